package sandboxd

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/test/roottest"
)

func ownerOf(t *testing.T, p string) (uid, gid int, mode os.FileMode) {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatalf("host stat %s: %v", p, err)
	}
	s := st.Sys().(*syscall.Stat_t)
	return int(s.Uid), int(s.Gid), st.Mode()
}

// TestWorkspaceIdmappedRootOwned: a root-owned 0755 workspace is writable by the
// sandbox through an idmapped mount. Inside, the sandbox owns the directory and what
// it creates; on the host everything it made belongs to root (the directory's
// owner) and nothing on the host was chowned. Writes outside the workspace still
// fail, and a setuid file cannot be made there.
func TestWorkspaceIdmappedRootOwned(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	ws := hostDir(t, 0o755)
	outside := hostDir(t, 0o1777)
	pre := filepath.Join(ws, "preexisting")
	if err := os.WriteFile(pre, []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `cd ` + ws + ` || exit 9
	echo made > new.txt && echo "new W" || echo "new R"
	mkdir -p sub/deep && echo x > sub/deep/f && echo "mkdir W" || echo "mkdir R"
	echo appended >> preexisting && echo "pre W" || echo "pre R"
	echo "dir-owner $(stat -c %u:%g .)"
	echo "new-owner $(stat -c %u:%g new.txt)"
	echo "id $(id -u):$(id -g)"
	echo x > ` + outside + `/f 2>/dev/null && echo "outside W" || echo "outside R"
	cp /usr/bin/id ./suid-id
	chmod u+s ./suid-id 2>/dev/null && echo "chmod-suid W" || echo "chmod-suid R"
	chmod g+s ./suid-id 2>/dev/null && echo "chmod-sgid W" || echo "chmod-sgid R"
	python3 -c "import os; os.close(os.open('made-suid', os.O_CREAT|os.O_WRONLY, 0o4755))" 2>/dev/null && echo "create-suid W" || echo "create-suid R"
	echo "suid-run $(./suid-id -u)"`
	res := mustRun(t, e, Spec{Argv: sh(script), Workspace: ws})
	uid := strconv.Itoa(res.UID)
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			got[k] = v
		}
	}
	want := map[string]string{
		"new": "W", "mkdir": "W", "pre": "W",
		"dir-owner": uid + ":" + uid, "new-owner": uid + ":" + uid, "id": uid + ":" + uid,
		"outside": "R", "chmod-suid": "R", "chmod-sgid": "R", "create-suid": "R", "suid-run": uid,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: got %q, want %q (stdout %q stderr %q)", k, got[k], w, res.Stdout, res.Stderr)
		}
	}
	// Host view: owned by root, the directory's owner; the workspace itself unchanged.
	for _, p := range []string{filepath.Join(ws, "new.txt"), filepath.Join(ws, "sub"), filepath.Join(ws, "sub/deep/f"), filepath.Join(ws, "suid-id"), pre} {
		u, g, _ := ownerOf(t, p)
		if u != 0 || g != 0 {
			t.Errorf("host owner of %s: got %d:%d, want 0:0", p, u, g)
		}
	}
	if u, g, m := ownerOf(t, ws); u != 0 || g != 0 || m.Perm() != 0o755 {
		t.Errorf("host workspace: got %d:%d %v, want 0:0 0755 (unchanged)", u, g, m)
	}
	if b, _ := os.ReadFile(pre); string(b) != "host\nappended\n" {
		t.Errorf("preexisting: got %q", b)
	}
	if _, _, m := ownerOf(t, filepath.Join(ws, "suid-id")); m&(os.ModeSetuid|os.ModeSetgid) != 0 {
		t.Errorf("host suid-id mode: got %v, want no setuid/setgid bit", m)
	}
	if _, err := os.Stat(filepath.Join(ws, "made-suid")); err == nil {
		t.Errorf("made-suid exists on the host")
	}
	if _, err := os.Stat(filepath.Join(outside, "f")); err == nil {
		t.Errorf("write outside the workspace reached the host")
	}
}

// TestWorkspaceIdmappedUserOwned: a 0700 directory owned by an ordinary user is
// writable by the sandbox; its files land owned by that user; files of other owners
// inside appear as nobody and stay read-only.
func TestWorkspaceIdmappedUserOwned(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	ws := hostDir(t, 0o700)
	const owner = 4242
	if err := os.Chown(ws, owner, owner); err != nil {
		t.Fatal(err)
	}
	rootFile := filepath.Join(ws, "root-owned")
	if err := os.WriteFile(rootFile, []byte("r\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `cd /home/sandbox/work && echo made > new.txt && echo "new W" || echo "new R"
	echo x >> root-owned 2>/dev/null && echo "rootfile W" || echo "rootfile R"
	echo "rootfile-owner $(stat -c %u root-owned)"`
	res := mustRun(t, e, Spec{Argv: sh(script), Workspace: ws, WorkspaceTarget: "/home/sandbox/work"})
	out := string(res.Stdout)
	for _, w := range []string{"new W", "rootfile R", "rootfile-owner 65534"} {
		if !strings.Contains(out, w) {
			t.Errorf("got %q, want a line %q (stderr %q)", out, w, res.Stderr)
		}
	}
	if u, g, _ := ownerOf(t, filepath.Join(ws, "new.txt")); u != owner || g != owner {
		t.Errorf("host owner: got %d:%d, want %d:%d", u, g, owner, owner)
	}
	if b, _ := os.ReadFile(rootFile); string(b) != "r\n" {
		t.Errorf("root-owned file changed: %q", b)
	}
}

// TestWorkspaceWithoutIdmapFails: a workspace on a filesystem that cannot be
// idmapped (proc) fails the run with an error that says so; it never runs the
// command with a read-only or host-permission workspace.
func TestWorkspaceWithoutIdmapFails(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	marker := filepath.Join(hostDir(t, 0o755), "ran")
	_, err := e.Run(t.Context(), Spec{Argv: sh("touch " + marker), Workspace: "/proc/sys"})
	if err == nil || !strings.Contains(err.Error(), "does not support idmapped mounts") {
		t.Fatalf("got %v, want an error saying the filesystem does not support idmapped mounts", err)
	}
	if _, serr := os.Stat(marker); serr == nil {
		t.Errorf("the command ran")
	}
}

// TestWorkspaceCannotExposeHiddenPaths: the workspace is a second view of host
// files. A hidden path inside it stays hidden at its place under the target; a
// workspace that is, or resolves (through a symlink) to, a place inside a hidden
// path is refused before anything runs.
func TestWorkspaceCannotExposeHiddenPaths(t *testing.T) {
	ws := hostDir(t, 0o755)
	secretDir := filepath.Join(ws, "secrets")
	if err := os.Mkdir(secretDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secretDir, "token"), []byte("TOPSECRET-TOKEN"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "plain"), []byte("PLAIN"), 0o644); err != nil {
		t.Fatal(err)
	}
	e, _ := newTestExecutor(t, func(c *Config) { c.HiddenPaths = []string{secretDir} })
	// The masked directory lists as empty rather than failing, so a tool
	// walking the workspace (pytest, git, find) does not trip on it.
	res := mustRun(t, e, Spec{Argv: sh("cat /home/sandbox/work/plain /home/sandbox/work/secrets/token 2>&1; ls -A /home/sandbox/work/secrets | wc -l; " +
		"find /home/sandbox/work >/dev/null && echo walked"),
		Workspace: ws, WorkspaceTarget: "/home/sandbox/work"})
	out := string(res.Stdout)
	if strings.Contains(out, "TOPSECRET") || !strings.Contains(out, "PLAIN") || !strings.HasSuffix(strings.TrimSpace(out), "0\nwalked") {
		t.Errorf("got %q, want PLAIN, no secret and an empty masked directory a walk gets through", out)
	}

	marker := filepath.Join(hostDir(t, 0o755), "ran")
	link := filepath.Join(hostDir(t, 0o755), "link")
	if err := os.Symlink(secretDir, link); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{secretDir, link} {
		_, err := e.Run(t.Context(), Spec{Argv: sh("touch " + marker), Workspace: w, WorkspaceTarget: "/home/sandbox/work"})
		if err == nil || !strings.Contains(err.Error(), "inside hidden path") {
			t.Errorf("workspace %s: got %v, want an error saying it is inside a hidden path", w, err)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the command ran")
	}
}

// TestSetupFailureNeverRuns: a failure in init's command thread setup (the same path a
// seccomp load error takes) fails the run and the command never executes.
func TestSetupFailureNeverRuns(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	ws := hostDir(t, 0o755)
	_, err := e.Run(t.Context(), Spec{Argv: sh("touch " + ws + "/ran"), Workspace: ws, Dir: "/airlock-no-such-dir"})
	if err == nil || !strings.Contains(err.Error(), "chdir /airlock-no-such-dir") {
		t.Errorf("got %v, want a setup error naming the chdir", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
		t.Errorf("the command ran")
	}
}

// TestIdmapCacheReusesAndEvicts: a workspace's user namespace is made once
// per (owner, sandbox uid) and reused; past the cache's size the least
// recently used one is closed.
func TestIdmapCacheReusesAndEvicts(t *testing.T) {
	roottest.Require(t)
	c := newIdmapCache()
	c.max = 2
	t.Cleanup(c.close)
	ino := func(key [4]int) uint64 {
		var ino uint64
		if err := c.with(key, func(fd int) {
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				t.Fatal(err)
			}
			ino = st.Ino
		}); err != nil {
			t.Fatal(err)
		}
		return ino
	}
	a, b := [4]int{0, 0, 300001, 300001}, [4]int{4242, 4242, 300001, 300001}
	first := ino(a)
	if again := ino(a); again != first {
		t.Errorf("second use of %v: got namespace %d, want the cached %d", a, again, first)
	}
	if ino(b) == first {
		t.Errorf("another owner got the same namespace")
	}
	ino(a)                            // a is now the most recently used
	ino([4]int{1, 1, 300002, 300002}) // evicts b
	if _, ok := c.byKey[b]; ok || len(c.byKey) != 2 {
		t.Errorf("after eviction: got %d entries (b kept: %v), want 2 without b", len(c.byKey), ok)
	}
	if again := ino(a); again != first {
		t.Errorf("a evicted instead of b")
	}
}

// TestIdmapCacheWarm: warm makes nothing before a workspace has been bound,
// then makes a new sandbox uid's entry for the owner bound last, which that
// owner's next bind uses without a helper of its own; a closed cache takes
// nothing more.
func TestIdmapCacheWarm(t *testing.T) {
	roottest.Require(t)
	c := newIdmapCache()
	defer c.close()
	const owner, uid1, uid2, uid3 = 4242, 2000100, 2000101, 2000102
	c.warm(uid1)
	if n := len(c.byKey); n != 0 {
		t.Fatalf("warm before any bind made %d entries, want 0", n)
	}
	used := func(uid int) int {
		t.Helper()
		fd := -1
		if err := c.with([4]int{owner, owner, uid, uid}, func(nsFD int) { fd = nsFD }); err != nil {
			t.Fatal(err)
		}
		return fd
	}
	used(uid1)
	c.warm(uid2)
	e, ok := c.byKey[[4]int{owner, owner, uid2, uid2}]
	if !ok || len(c.byKey) != 2 {
		t.Fatalf("after warm(%d): entries %v, want the owner's entry for it", uid2, c.byKey)
	}
	if fd := used(uid2); fd != int(e.f.Fd()) || len(c.byKey) != 2 {
		t.Errorf("the bind after warm used fd %d (entries %d), want the warmed %d", fd, len(c.byKey), e.f.Fd())
	}
	c.warm(uid2) // present: nothing new
	c.close()
	c.warm(uid3)
	if n := len(c.byKey); n != 0 {
		t.Errorf("a closed cache holds %d entries, want 0", n)
	}
}
