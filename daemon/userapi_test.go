package daemon

import (
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-dev/airlock/api"
)

// TestUserDaemonOnlyOwner pins the per-user daemon's peer-credential rule:
// its owner is served (and administers it: a root-only route answers), any
// other uid is refused before its request does anything, root included.
func TestUserDaemonOnlyOwner(t *testing.T) {
	w := newFakeWorld(t)
	w.d.owner = 1000
	owner, other, root := w.client(1000), w.client(1001), w.client(0)

	for _, tc := range []struct {
		name string
		c    *apiClient
	}{
		{"another user", other},
		{"root", root},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(w.exe.all())
			r := tc.c.json(t, "POST", "/v1/sandboxes", `{}`)
			if r.status != http.StatusForbidden {
				t.Fatalf("create: got %d, want 403: %s", r.status, r.body)
			}
			if e := r.apiError(t); e.Code != api.CodeForbidden {
				t.Fatalf("got code %q, want %q", e.Code, api.CodeForbidden)
			}
			if got := len(w.exe.all()); got != before {
				t.Fatalf("a refused caller prepared a sandbox: got %d prepares, want %d", got, before)
			}
			if r := tc.c.do(t, "GET", "/v1/health", nil); r.status != http.StatusForbidden {
				t.Fatalf("health: got %d, want 403", r.status)
			}
		})
	}
	sb := owner.create(t, `{}`)
	if r := owner.do(t, "GET", "/v1/sandboxes/"+sb.ID, nil); r.status != http.StatusOK {
		t.Fatalf("owner's inspect: got %d, want 200: %s", r.status, r.body)
	}
	if r := other.do(t, "GET", "/v1/sandboxes/"+sb.ID, nil); r.status != http.StatusForbidden {
		t.Fatalf("another user's inspect of the owner's sandbox: got %d, want 403", r.status)
	}
	// The owner administers its daemon: a root-only route is past the
	// guard for it (here refused for its empty body, not for who asks).
	if r := owner.json(t, "POST", "/v1/attach", `{}`); r.status == http.StatusForbidden {
		t.Fatalf("owner's attach: got 403, want it past the guard: %s", r.body)
	}
	if r := other.json(t, "POST", "/v1/attach", `{}`); r.status != http.StatusForbidden {
		t.Fatalf("another user's attach: got %d, want 403", r.status)
	}
}

// TestCheckUserDir refuses every directory another user could write the
// socket into.
func TestCheckUserDir(t *testing.T) {
	base := t.TempDir()
	uid := os.Getuid()
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	private := mk("private", 0o700)
	readable := mk("readable", 0o755)
	groupW := mk("groupw", 0o770)
	worldW := mk("worldw", 0o1777)
	link := filepath.Join(base, "link")
	if err := os.Symlink(private, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		dir    string
		uid    int
		unsafe bool
	}{
		{"private", private, uid, false},
		{"readable by others", readable, uid, false},
		{"group writable", groupW, uid, true},
		{"world writable, sticky", worldW, uid, true},
		{"a symlink", link, uid, true},
		{"a file", file, uid, true},
		{"another user's", private, uid + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckUserDir(tc.dir, tc.uid)
			if got := errors.Is(err, ErrUnsafeDir); got != tc.unsafe {
				t.Fatalf("got unsafe=%v (%v), want %v", got, err, tc.unsafe)
			}
		})
	}
	if err := CheckUserDir(filepath.Join(base, "missing"), uid); err == nil || errors.Is(err, ErrUnsafeDir) {
		t.Fatalf("missing dir: got %v, want a not-exist error", err)
	}
}

// TestListenUserAPI makes the socket 0600 in a 0700 directory of its own,
// refuses a parent another user could write, and never takes a live socket.
func TestListenUserAPI(t *testing.T) {
	uid := os.Getuid()
	runtime := t.TempDir()
	if err := os.Chmod(runtime, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(runtime, "airlock", "airlock.sock")
	ln, err := ListenUserAPI(sock, uid)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for p, want := range map[string]os.FileMode{sock: 0o600, filepath.Dir(sock): 0o700} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Fatalf("%s: got mode %04o, want %04o", p, got, want)
		}
	}
	if _, err := ListenUserAPI(sock, uid); err == nil {
		t.Fatal("a second listen took a live socket")
	}
	if c, err := net.Dial("unix", sock); err != nil {
		t.Fatalf("the first listener lost its socket: %v", err)
	} else {
		c.Close()
	}

	shared := t.TempDir()
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := ListenUserAPI(filepath.Join(shared, "airlock", "airlock.sock"), uid); !errors.Is(err, ErrUnsafeDir) {
		t.Fatalf("world-writable runtime dir: got %v, want ErrUnsafeDir", err)
	}
	if _, err := os.Stat(filepath.Join(shared, "airlock")); err == nil {
		t.Fatal("a refused runtime dir got airlock's directory")
	}
}
