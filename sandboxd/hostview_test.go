package sandboxd

import (
	"slices"
	"testing"
)

func TestUnescapeMountinfo(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain", "/run/netns", "/run/netns"},
		{"space", `/mnt/my\040disk`, "/mnt/my disk"},
		{"tab newline backslash", `/a\011b\012c\134d`, "/a\tb\nc\\d"},
		{"trailing backslash", `/a\`, `/a\`},
		{"not octal", `/a\09x`, `/a\09x`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := unescapeMountinfo(tt.in); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCoveredTrees(t *testing.T) {
	cfg := &initConfig{Home: "/home/sandbox", Hidden: []string{"/etc/airlock", "/srv/secret.key"}}
	covered := coveredTrees(cfg)
	tests := []struct {
		rel  string
		want bool
	}{
		{"run/docker/netns/x", true}, {"run", true}, {"var/run/x", true}, {"var/tmp", true},
		{"proc/sys/fs/binfmt_misc", true}, {"home/user", true}, {"etc/airlock/keys", true},
		{"srv/secret.key", true}, {"runner", false}, {"var/lib/docker/overlay2/x/merged", false},
		{"mnt/data", false}, {"srv", false},
	}
	for _, tt := range tests {
		if got := inTrees(tt.rel, covered); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.rel, got, tt.want)
		}
	}
}

// TestViewMountsRootFirst: the host view lists the root first, parents
// before children, and nothing in a covered tree.
func TestViewMountsRootFirst(t *testing.T) {
	rels, err := viewMounts("/", &initConfig{Home: "/home/sandbox"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rels) == 0 || rels[0] != "" {
		t.Fatalf("got %q, want the root first", rels)
	}
	covered := coveredTrees(&initConfig{Home: "/home/sandbox"})
	for i, r := range rels[1:] {
		if inTrees(r, covered) {
			t.Errorf("%s is in a covered tree", r)
		}
		if !slices.IsSortedFunc(rels[:i+2], func(a, b string) int { return depth(a) - depth(b) }) {
			t.Errorf("not parents first: %q", rels)
		}
	}
}

func depth(rel string) int {
	n := 0
	for _, c := range rel {
		if c == '/' {
			n++
		}
	}
	return n
}
