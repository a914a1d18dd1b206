package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
)

// ErrUnsafeDir is wrapped by CheckUserDir's and ListenUserAPI's errors when
// a directory on the socket's path could let another user in: owned by
// someone else, writable by its group or by everyone, or a symlink.
var ErrUnsafeDir = errors.New("unsafe directory")

// CheckUserDir refuses dir unless it is a directory (not a symlink) owned by
// uid and writable by nobody else: another user able to write there could
// replace the socket with one of theirs, and a client would send them its
// commands.
func CheckUserDir(dir string, uid int) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%w: %s is a symlink; airlock keeps its socket only in a real directory of yours", ErrUnsafeDir, dir)
	case !fi.IsDir():
		return fmt.Errorf("%w: %s is not a directory", ErrUnsafeDir, dir)
	case !ok:
		return fmt.Errorf("%w: %s: no owner information", ErrUnsafeDir, dir)
	case int(st.Uid) != uid:
		return fmt.Errorf("%w: %s is owned by uid %d, not by you (uid %d): set $XDG_RUNTIME_DIR to a directory of yours (mode 0700)", ErrUnsafeDir, dir, st.Uid, uid)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%w: %s is mode %04o, writable by others: chmod go-w %s (0700 is usual)", ErrUnsafeDir, dir, fi.Mode().Perm(), dir)
	}
	return nil
}

// ListenUserAPI listens on the per-user daemon's socket, mode 0600 in a
// directory of uid's (created 0700 when missing) whose parent is uid's too:
// each must pass CheckUserDir. The peer-credential check (Options.Owner)
// is the second lock: a connection from any other uid, root included, is
// refused. A stale socket file is replaced, a live one never.
func ListenUserAPI(path string, uid int) (net.Listener, error) {
	dir := filepath.Dir(path)
	parent := filepath.Dir(dir)
	if err := CheckUserDir(parent, uid); err != nil {
		return nil, fmt.Errorf("api.socket: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("api.socket: %w", err)
	}
	if err := CheckUserDir(dir, uid); err != nil {
		return nil, fmt.Errorf("api.socket: %w", err)
	}
	ln, err := listenUnix(path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("api.socket: %w", err)
	}
	return ln, nil
}

// ownerCaller applies the per-user daemon's rule to a request's caller:
// with an owner, only it may call (ok false for anyone else, root
// included), and it is the daemon's administrator (what root may do
// through a system daemon's API). Without one, c is returned unchanged.
func (d *Daemon) ownerCaller(ctx context.Context, c caller) (context.Context, caller, bool) {
	if d.owner <= 0 {
		return ctx, c, true
	}
	if c.uid != d.owner {
		return ctx, c, false
	}
	c.admin = true
	return withCaller(ctx, c), c, true
}
