package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/config"
)

// ErrLowDiskSpace is wrapped by the error that refuses a new sandbox while
// the audit log's filesystem is below audit.min_free.
var ErrLowDiskSpace = errors.New("audit log filesystem below audit.min_free")

// LowDiskSpaceError names the filesystem and the numbers.
type LowDiskSpaceError struct {
	Dir        string // the audit file's directory
	Mount      string // the filesystem's mount point
	Free       uint64 // bytes available to the daemon
	Total      uint64 // filesystem size
	Need       uint64 // audit.min_free in bytes
	MinFreeCfg config.FreeSpace
}

func (e *LowDiskSpaceError) Error() string {
	return fmt.Sprintf("refusing a new sandbox: the audit log's filesystem (%s, mounted at %s) has %s free of %s, below audit.min_free %s (%s): free space there or lower audit.min_free",
		e.Dir, e.Mount, config.Size(e.Free), config.Size(e.Total), e.MinFreeCfg, config.Size(e.Need))
}

func (e *LowDiskSpaceError) Unwrap() error { return ErrLowDiskSpace }

// checkFreeSpace refuses a new sandbox when the audit log's filesystem has
// less free space than audit.min_free: a sandbox started there would soon
// have every request refused by a full log. It fails closed: a filesystem
// it cannot measure refuses too.
func (d *Daemon) checkFreeSpace() error {
	dir := filepath.Dir(d.cfg.Audit.File)
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("audit.min_free: measure free space of %s: %w", dir, err)
	}
	free, total := st.Bavail*uint64(st.Bsize), st.Blocks*uint64(st.Bsize)
	need := d.cfg.Audit.MinFree.Of(total)
	if need == 0 || free >= need {
		return nil
	}
	return &LowDiskSpaceError{Dir: dir, Mount: mountPoint(dir), Free: free, Total: total, Need: need, MinFreeCfg: d.cfg.Audit.MinFree}
}

// mountPoint returns the nearest parent of dir on another device, that is
// the mount point of dir's filesystem (dir itself when it cannot tell).
func mountPoint(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return dir
	}
	dev := func(p string) (uint64, bool) {
		fi, err := os.Stat(p)
		if err != nil {
			return 0, false
		}
		s, ok := fi.Sys().(*syscall.Stat_t)
		return uint64(s.Dev), ok
	}
	d0, ok := dev(abs)
	if !ok {
		return dir
	}
	for p := abs; ; {
		parent := filepath.Dir(p)
		if parent == p {
			return p
		}
		if d, ok := dev(parent); !ok || d != d0 {
			return p
		}
		p = parent
	}
}
