package sandboxd

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit/audittest"
)

// TestLookupSubIDs: a user's first range is found by name or uid; a
// malformed, empty or missing entry is no range.
func TestLookupSubIDs(t *testing.T) {
	dir := t.TempDir()
	subuid, subgid := filepath.Join(dir, "subuid"), filepath.Join(dir, "subgid")
	if err := os.WriteFile(subuid, []byte("alice:100000:65536\nbob:x:1\n1001:300000:10\nbob:200000:65536\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(subgid, []byte("alice:110000:65536\ncarol:0:5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		user     string
		uid      int
		wantUID  IDRange
		wantGIDs IDRange
	}{
		{"by name", "alice", 1000, IDRange{100000, 65536}, IDRange{110000, 65536}},
		{"by uid", "dave", 1001, IDRange{300000, 10}, IDRange{}},
		{"malformed line skipped", "bob", 1002, IDRange{200000, 65536}, IDRange{}},
		{"start 0 is no range", "carol", 1003, IDRange{}, IDRange{}},
		{"no entry", "erin", 1004, IDRange{}, IDRange{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, g := LookupSubIDs(subuid, subgid, tc.user, tc.uid)
			if u != tc.wantUID || g != tc.wantGIDs {
				t.Errorf("got %v %v, want %v %v", u, g, tc.wantUID, tc.wantGIDs)
			}
		})
	}
	if u, g := LookupSubIDs(filepath.Join(dir, "none"), filepath.Join(dir, "none"), "alice", 1000); u.Count != 0 || g.Count != 0 {
		t.Errorf("missing files: got %v %v, want no ranges", u, g)
	}
}

// TestCheckUserNamespaces: each setting that forbids unprivileged user
// namespaces is named with the command that lifts it; a kernel without the
// setting, or with it open, passes.
func TestCheckUserNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string // "" for allowed
	}{
		{"open", map[string]string{"kernel/unprivileged_userns_clone": "1", "user/max_user_namespaces": "15000"}, ""},
		{"no settings at all", nil, ""},
		{"debian clone switch", map[string]string{"kernel/unprivileged_userns_clone": "0"}, "kernel.unprivileged_userns_clone=1"},
		{"no namespaces allowed", map[string]string{"user/max_user_namespaces": "0\n"}, "user.max_user_namespaces=15000"},
		{"apparmor", map[string]string{"kernel/apparmor_restrict_unprivileged_userns": "1"}, "apparmor_restrict_unprivileged_userns=0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for k, v := range tc.files {
				p := filepath.Join(dir, k)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := CheckUserNamespaces(dir)
			var ue *UsernsError
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("got %v, want allowed", err)
			case tc.want != "" && (!errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want a UsernsError naming %q", err, tc.want)
			}
		})
	}
}

// TestRootlessSandboxUID: with both subordinate ranges the sandbox runs as
// RootlessSandboxUID inside, with one or none as 0 (the user).
func TestRootlessSandboxUID(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Rootless
		want int
	}{
		{"none", Rootless{UID: 1000, GID: 1000}, 0},
		{"uid range only", Rootless{UID: 1000, GID: 1000, SubUID: IDRange{100000, 65536}}, 0},
		{"both", Rootless{UID: 1000, GID: 1000, SubUID: IDRange{100000, 65536}, SubGID: IDRange{100000, 65536}}, RootlessSandboxUID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.sandboxUID(); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

// TestRootlessRefusesRoot: a rootless executor for uid 0 without a
// subordinate range would run sandboxes as the host's root; New refuses it.
func TestRootlessRefusesRoot(t *testing.T) {
	_, err := New(Config{StateDir: t.TempDir(), Rootless: &Rootless{UID: 0, GID: 0}}, &audittest.Log{}, nil)
	if err == nil || !strings.Contains(err.Error(), "host's root") {
		t.Errorf("got %v, want a refusal naming the host's root", err)
	}
}

// TestCgroup2Mount: the cgroup2 mount of a unified and of a hybrid host;
// none on a v1-only one.
func TestCgroup2Mount(t *testing.T) {
	for _, tc := range []struct{ name, mountinfo, want string }{
		{"unified", "30 1 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw\n", "/sys/fs/cgroup"},
		{"hybrid", "30 1 0:26 / /sys/fs/cgroup ro - tmpfs tmpfs ro\n31 30 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n" +
			"32 30 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n", "/sys/fs/cgroup/unified"},
		{"v1 only", "32 30 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Cgroup2Mount(tc.mountinfo); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestDelegatedCgroup: the highest writable ancestor of the process's own
// v2 cgroup, stopping at the first one it may not write; none for a v1-only
// process or one in the root cgroup.
func TestDelegatedCgroup(t *testing.T) {
	mnt := t.TempDir()
	for _, d := range []string{"user.slice/user@1000.service/app.slice/x.scope"} {
		if err := os.MkdirAll(filepath.Join(mnt, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"user.slice", "user.slice/user@1000.service", "user.slice/user@1000.service/app.slice", "user.slice/user@1000.service/app.slice/x.scope"} {
		for _, f := range []string{"cgroup.procs", "cgroup.subtree_control"} {
			if err := os.WriteFile(filepath.Join(mnt, d, f), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// user.slice is not the user's: its cgroup.procs may not be written
	// (as root, a missing file is what access(2) refuses).
	if err := os.Remove(filepath.Join(mnt, "user.slice", "cgroup.procs")); err != nil {
		t.Fatal(err)
	}
	self := "1:name=systemd:/user.slice\n0::/user.slice/user@1000.service/app.slice/x.scope\n"
	if got, want := DelegatedCgroup(mnt, self), filepath.Join(mnt, "user.slice/user@1000.service"); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	for _, self := range []string{"0::/\n", "4:memory:/user.slice\n", ""} {
		if got := DelegatedCgroup(mnt, self); got != "" {
			t.Errorf("%q: got %q, want none", self, got)
		}
	}
}
