package hostname

import (
	"strings"
	"testing"
)

func TestValidNode(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want bool
	}{
		{"empty means unset", "", true},
		{"simple", "node-1", true},
		{"cloud host name", "ip-10-0-1-17.eu-west-1.compute.internal", true},
		{"underscore and capitals", "Node_A", true},
		{"longest", strings.Repeat("a", MaxNode), true},
		{"too long", strings.Repeat("a", MaxNode+1), false},
		{"space", "node a", false},
		{"slash", "node/1", false},
		{"non-ASCII", "nöde", false},
		{"newline", "node\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ValidNode(tc.in); got != tc.want {
				t.Errorf("ValidNode(%q): got %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}
