package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// caller is who sent a request: the uid the kernel reported for the API
// connection's peer (SO_PEERCRED, taken at connect), never anything the
// request says.
type caller struct {
	uid int
	pid int
	// admin: the owner of a per-user daemon (Options.Owner), who may do
	// through it what root may through the system daemon.
	admin bool
}

func (c caller) root() bool { return c.uid == 0 || c.admin }

// may reports whether the caller sees and controls a sandbox of owner.
func (c caller) may(owner int) bool { return c.root() || c.uid == owner }

type callerKey struct{}

// ConnContext is the API server's http.Server.ConnContext: every request on
// a connection acts as the uid of its peer, read once per connection
// (SO_PEERCRED; at accept on APIServer's connections). A connection whose
// peer cannot be identified (not a unix socket, getsockopt failed) carries
// no caller and every request on it is refused.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if ac, ok := c.(*apiConn); ok {
		if !ac.known {
			return ctx
		}
		return withCaller(ctx, ac.who)
	}
	if who, ok := peerCaller(c); ok {
		return withCaller(ctx, who)
	}
	return ctx
}

// peerCaller reads the credentials of a unix socket's peer.
func peerCaller(c net.Conn) (caller, bool) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return caller{}, false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return caller{}, false
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || serr != nil || cred == nil {
		return caller{}, false
	}
	return caller{uid: int(cred.Uid), pid: int(cred.Pid)}, true
}

func withCaller(ctx context.Context, c caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

func callerFrom(ctx context.Context) (caller, bool) {
	c, ok := ctx.Value(callerKey{}).(caller)
	return c, ok
}

// ErrNoGroup is wrapped by ListenAPI's error when api.group names a group
// this host does not have.
var ErrNoGroup = errors.New("api.group does not exist")

// ListenAPI listens on the API's unix socket: mode 0660 owned by root and
// group (its members may call the API as themselves), or 0600 for root only
// when group is "". A stale socket file is replaced, a live one never. The
// socket's directory is made traversable (0755) when the group needs it; a
// parent the group cannot traverse is an error naming it.
func ListenAPI(path, group string) (net.Listener, error) {
	gid := -1
	if group != "" {
		var err error
		if gid, err = lookupGroup(group); err != nil {
			return nil, err
		}
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("api.socket: %w", err)
	}
	if gid >= 0 {
		if err := traversable(dir); err != nil {
			return nil, err
		}
	}
	// Until the chmod below the umask leaves the socket without group or
	// other write permission, which connect needs.
	ln, err := listenUnix(path)
	if err != nil {
		return nil, err
	}
	mode := os.FileMode(0o600)
	if gid >= 0 {
		mode = 0o660
		if err := os.Chown(path, 0, gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("api.socket: %w", err)
		}
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("api.socket: %w", err)
	}
	return ln, nil
}

// listenUnix listens on the unix socket path, replacing a file there that no
// one serves; it refuses a socket another airlock still answers on.
func listenUnix(path string) (net.Listener, error) {
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("api.socket %s: another airlock is serving it", path)
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("api.socket: %w", err)
	}
	return ln, nil
}

// lookupGroup resolves a group name or numeric gid.
func lookupGroup(group string) (int, error) {
	g, err := user.LookupGroup(group)
	if err != nil {
		if _, numeric := strconv.Atoi(group); numeric == nil {
			g, err = user.LookupGroupId(group)
		}
	}
	if err != nil {
		return -1, fmt.Errorf("%w: group %q: create it with `groupadd --system %s` and add the users who may create sandboxes (usermod -aG %s USER), or set api.group: \"\" for a socket only root may use",
			ErrNoGroup, group, group, group)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return -1, fmt.Errorf("api.group %q: gid %q: %w", group, g.Gid, err)
	}
	return gid, nil
}

// traversable makes the socket's directory searchable by everyone when it
// is root's and only root's (as /run/airlock is when serve made it 0700: what
// it holds is in 0700 directories of its own), and checks that every parent
// above it is searchable, naming the first that is not.
func traversable(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("api.socket: %w", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return fmt.Errorf("api.socket: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == 0 && fi.Mode().Perm()&0o011 != 0o011 {
		if err := os.Chmod(abs, fi.Mode().Perm()|0o011); err != nil {
			return fmt.Errorf("api.socket: %w", err)
		}
	}
	for p := abs; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("api.socket: %w", err)
		}
		if fi.Mode().Perm()&0o011 == 0 {
			return fmt.Errorf("api.socket: directory %s (mode %s) is not searchable by api.group: the group's members could not reach the socket", p, fi.Mode().Perm())
		}
		if p == "/" {
			return nil
		}
	}
}
