package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// runDirLockName is the lock file in a run directory. The process holding
// an exclusive flock on it, for its whole life, owns the directory: only
// it writes there or removes it. It holds the owner's pid, for the message
// of a process that finds it taken.
const runDirLockName = "lock"

// RunDirInUseError is a run directory another process holds (a second
// `airlock serve` with the same --run-dir, a second attach of one id).
type RunDirInUseError struct {
	Dir string
	// PID is the holder's pid as its lock file says (0 when unknown).
	PID int
}

func (e *RunDirInUseError) Error() string {
	who := "another process"
	if e.PID > 0 {
		who = "process " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("run dir %s is in use by %s (another airlock serve or attach with the same directory?); stop it or choose another --run-dir", e.Dir, who)
}

// lockRunDir creates dir (0700) and takes its lock, without waiting. It
// returns the lock file, held until it is closed, or a *RunDirInUseError.
// Nothing in dir is written or removed before the lock is held.
func lockRunDir(dir string) (*os.File, error) {
	// A holder may remove the directory (its lock file with it) between our
	// open and our flock: the flock is then on a file nobody else will
	// open, so the path is checked again and the lock retried.
	for range 5 {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("run dir: %w", err)
		}
		f, err := os.OpenFile(filepath.Join(dir, runDirLockName), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("run dir: lock: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, &RunDirInUseError{Dir: dir, PID: lockHolder(dir)}
			}
			return nil, fmt.Errorf("run dir: lock %s: %w", dir, err)
		}
		if !holdsLock(dir, f) {
			f.Close()
			continue
		}
		if err := f.Truncate(0); err == nil {
			_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
		return f, nil
	}
	return nil, fmt.Errorf("run dir %s: its lock file keeps being replaced", dir)
}

// tryLockRunDir takes the lock of an existing run directory, without
// creating anything. held is true when another process holds it; a
// directory without a lock file returns (nil, false, nil).
func tryLockRunDir(dir string) (f *os.File, held bool, err error) {
	f, err = os.OpenFile(filepath.Join(dir, runDirLockName), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, true, nil
		}
		return nil, false, err
	}
	return f, false, nil
}

// holdsLock reports whether f is still the lock file at dir's path: false
// when the directory or its lock file was removed or replaced.
func holdsLock(dir string, f *os.File) bool {
	onDisk, err := os.Stat(filepath.Join(dir, runDirLockName))
	if err != nil {
		return false
	}
	held, err := f.Stat()
	return err == nil && os.SameFile(onDisk, held)
}

// lockHolder is the pid a run directory's lock file names (0 when it names
// none).
func lockHolder(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, runDirLockName))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// runDirProblem says what is wrong with the run directory this daemon
// holds ("" when nothing is): removed, or its lock file replaced, from
// outside. Its CA, trust bundle and namespace state are then gone.
func (d *Daemon) runDirProblem() string {
	if holdsLock(d.runDir, d.runLock) {
		return ""
	}
	if _, err := os.Stat(d.runDir); err != nil {
		return fmt.Sprintf("run dir %s is gone (%v): its CA, trust bundle and namespace state with it", d.runDir, err)
	}
	return fmt.Sprintf("run dir %s is no longer this daemon's: its lock file was removed or replaced", d.runDir)
}
