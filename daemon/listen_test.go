package daemon

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/test/roottest"
)

// TestListenAPIRootOnly: with api.group "" the socket is 0600 in a 0700
// directory; a live socket is never taken over, a stale one is replaced.
func TestListenAPIRootOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	path := filepath.Join(dir, "airlock.sock")
	ln, err := ListenAPI(path, "")
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o600 {
		t.Fatalf("socket mode %o, want 600", got)
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Fatalf("socket directory mode %o, want 700", st.Mode().Perm())
	}
	if _, err := ListenAPI(path, ""); err == nil || !strings.Contains(err.Error(), "another airlock") {
		t.Fatalf("second listen on a live socket: %v, want a refusal", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	ln2, err := ListenAPI(path, "")
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	ln2.Close()
}

// TestListenAPIMissingGroup: a group the host lacks is named, with how to
// create it, and nothing listens.
func TestListenAPIMissingGroup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "airlock.sock")
	_, err := ListenAPI(path, "alk-no-such-group")
	if !errors.Is(err, ErrNoGroup) || !strings.Contains(err.Error(), "groupadd --system alk-no-such-group") || !strings.Contains(err.Error(), `api.group: ""`) {
		t.Fatalf("got %v, want the missing group named with groupadd and the root-only alternative", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a socket was made: %v", err)
	}
}

// TestRootListenAPIGroup: with a group the socket is 0660 root:group and its
// directory (made 0700 by a previous serve) becomes searchable.
func TestRootListenAPIGroup(t *testing.T) {
	roottest.Require(t)
	g := testGroup(t)
	dir := filepath.Join(searchableTempDir(t), "run")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "airlock.sock")
	ln, err := ListenAPI(path, g.name)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	st, _ := os.Stat(path)
	sys := st.Sys().(*syscall.Stat_t)
	if st.Mode().Perm() != 0o660 || sys.Uid != 0 || int(sys.Gid) != g.gid {
		t.Fatalf("socket %o %d:%d, want 660 0:%d", st.Mode().Perm(), sys.Uid, sys.Gid, g.gid)
	}
	if dst, _ := os.Stat(dir); dst.Mode().Perm()&0o011 != 0o011 {
		t.Fatalf("socket directory mode %o: the group cannot reach the socket", dst.Mode().Perm())
	}
	// By gid too.
	ln.Close()
	ln2, err := ListenAPI(path, strconv.Itoa(g.gid))
	if err != nil {
		t.Fatal(err)
	}
	ln2.Close()
}

type group struct {
	name string
	gid  int
}

// testGroup creates a system group alk<pid> for the test, removed after it.
func testGroup(t *testing.T) group {
	t.Helper()
	name := "alkg" + strconv.Itoa(os.Getpid())
	if out, err := exec.Command("groupadd", "--system", name).CombinedOutput(); err != nil {
		t.Fatalf("groupadd: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("groupdel", name).Run() })
	gid, err := lookupGroup(name)
	if err != nil {
		t.Fatal(err)
	}
	return group{name: name, gid: gid}
}

// searchableTempDir is a temporary directory other users may traverse (a
// socket in it is reachable by a test user).
func searchableTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "alk-api-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}
