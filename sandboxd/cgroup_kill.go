package sandboxd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Ending a sandbox's process tree and waiting until it is gone.
//
// v2: the tree dies through cgroup.kill (freeze, kill, thaw on kernels before
// 5.14); emptiness is cgroup.events "populated 0", waited for in poll(2).
//
// v1: the tree dies by freezer FROZEN, SIGKILL to every task, THAWED;
// emptiness is an empty cgroup.procs in every hierarchy.

// kill ends every process in the cgroup, including ones that fork while it runs.
func (cg *cgroup) kill() error {
	if cg.m.none {
		return nil // init's death ends its PID namespace
	}
	if cg.v2 {
		err := cg.m.write(filepath.Join(cg.dirs[""], "cgroup.kill"), "1")
		if err == nil {
			return nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("sandboxd: cgroup.kill: %w", err)
		}
		return cg.freezeKill() // kernels before 5.14
	}
	return cg.freezeKill()
}

// freezeKill freezes the cgroup so nothing can fork, SIGKILLs every task, thaws.
func (cg *cgroup) freezeKill() error {
	return cg.whileFrozen(func() error {
		ps, err := cg.pids()
		for _, p := range ps {
			_ = unix.Kill(p, unix.SIGKILL)
		}
		if err != nil {
			return fmt.Errorf("sandboxd: list cgroup %s: %w", cg.name, err)
		}
		return nil
	})
}

// whileFrozen runs fn with every process of the cgroup frozen (v2
// cgroup.freeze, v1 the freezer controller), so none can fork or exit
// meanwhile; signals fn sends are delivered once they thaw.
func (cg *cgroup) whileFrozen(fn func() error) error {
	var freeze, frozen func() error
	var thaw func() error
	if cg.v2 {
		f := filepath.Join(cg.dirs[""], "cgroup.freeze")
		freeze = func() error { return cg.m.write(f, "1") }
		thaw = func() error { return cg.m.write(f, "0") }
		frozen = func() error {
			n, err := readKeyed(filepath.Join(cg.dirs[""], "cgroup.events"), "frozen")
			if err == nil && n != 1 {
				err = errors.New("not frozen yet")
			}
			return err
		}
	} else {
		fd, ok := cg.dirs["freezer"]
		if !ok {
			return errors.New("sandboxd: freezer controller missing")
		}
		state := filepath.Join(fd, "freezer.state")
		freeze = func() error { return cg.m.write(state, "FROZEN") }
		thaw = func() error { return cg.m.write(state, "THAWED") }
		frozen = func() error {
			b, err := os.ReadFile(state)
			if err == nil && strings.TrimSpace(string(b)) != "FROZEN" {
				err = errors.New("not frozen yet")
			}
			return err
		}
	}
	if err := freeze(); err != nil {
		return fmt.Errorf("sandboxd: freeze cgroup %s: %w", cg.name, err)
	}
	waitFor(func() bool { return frozen() == nil })
	err := fn()
	if terr := thaw(); terr != nil {
		return fmt.Errorf("sandboxd: thaw cgroup %s: %w", cg.name, terr)
	}
	return err
}

// populated reports whether any process is left: v2 reads cgroup.events (which
// counts descendants too), v1 every hierarchy's cgroup.procs. An unreadable cgroup
// counts as populated.
func (cg *cgroup) populated() (bool, error) {
	if cg.v2 {
		n, err := readKeyed(filepath.Join(cg.dirs[""], "cgroup.events"), "populated")
		if err != nil {
			return true, fmt.Errorf("sandboxd: read cgroup.events: %w", err)
		}
		return n != 0, nil
	}
	ps, err := cg.pids()
	if err != nil {
		return true, fmt.Errorf("sandboxd: read cgroup.procs: %w", err)
	}
	return len(ps) > 0, nil
}

// waitEmpty waits until no process is left in the cgroup, for at most d. v2
// sleeps in poll(2) on cgroup.events, which the kernel wakes when "populated"
// changes; v1 has no such file and re-reads cgroup.procs with a backoff from
// 0.1 ms (a killed tree is usually gone within a millisecond, so a fixed 1 ms
// first sleep was most of the wait).
func (cg *cgroup) waitEmpty(d time.Duration) error {
	if cg.m.none {
		return nil
	}
	deadline := time.Now().Add(d)
	var events *os.File
	if cg.v2 {
		if f, err := os.Open(filepath.Join(cg.dirs[""], "cgroup.events")); err == nil {
			events = f
			defer f.Close()
		}
	}
	sleep := 100 * time.Microsecond
	for {
		pop, err := cg.populated()
		if err == nil && !pop {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			if err != nil {
				return err
			}
			ps, _ := cg.pids()
			return fmt.Errorf("sandboxd: cgroup %s still holds processes %v after kill", cg.name, ps)
		}
		if events != nil && err == nil {
			// POLLPRI|POLLERR is signalled on every change of the file; a
			// change between the read above and this poll is not lost, as the
			// kernel compares against the open file's last read event count.
			wait := min(left, 100*time.Millisecond)
			fds := []unix.PollFd{{Fd: int32(events.Fd()), Events: unix.POLLPRI | unix.POLLERR}}
			if _, perr := unix.Poll(fds, int(wait.Milliseconds())+1); perr == nil || errors.Is(perr, unix.EINTR) {
				_, _ = events.Seek(0, 0)
				_, _ = events.Read(make([]byte, 256)) // re-arm: the next poll waits for the next change
				continue
			}
		}
		time.Sleep(min(sleep, left))
		sleep = min(2*sleep, 20*time.Millisecond)
	}
}

// waitFor polls cond for up to a second, with a backoff from 0.1 ms to 5 ms.
func waitFor(cond func() bool) {
	deadline := time.Now().Add(time.Second)
	sleep := 100 * time.Microsecond
	for !cond() && time.Now().Before(deadline) {
		time.Sleep(sleep)
		sleep = min(2*sleep, 5*time.Millisecond)
	}
}
