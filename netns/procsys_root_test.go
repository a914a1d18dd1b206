package netns

import (
	"fmt"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/test/roottest"
)

// TestRootWritableNetSysctls pins the bug where every attach and pool
// namespace failed with "read-only file system" when airlock serve ran in a
// container: runtimes mount /proc/sys read-only in a container that is not
// privileged. In a mount namespace of its own with /proc/sys made read-only
// the same way, writableNetSysctls leaves /proc/sys/net writable and the
// rest of /proc/sys read-only; called again it changes nothing.
func TestRootWritableNetSysctls(t *testing.T) {
	roottest.Require(t)
	errs := make(chan []string, 1)
	go func() {
		// The thread gets its own mount namespace and is never unlocked, so
		// it ends with this goroutine and no other code runs in it.
		runtime.LockOSThread()
		var bad []string
		fail := func(s string, err error) { bad = append(bad, s+": "+err.Error()) }
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			fail("unshare", err)
			errs <- bad
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			fail("make / private", err)
		}
		// What runc, containerd and CRI-O do for readonlyPaths.
		if err := unix.Mount("/proc/sys", "/proc/sys", "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			fail("bind /proc/sys", err)
		}
		if err := unix.Mount("", "/proc/sys", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			fail("remount /proc/sys read-only", err)
		}
		if len(bad) == 0 && readOnly("/proc/sys/net") != true {
			bad = append(bad, "the test's /proc/sys/net is not read-only")
		}
		for round := range 2 {
			if err := writableNetSysctls(); err != nil {
				fail("writableNetSysctls", err)
			}
			if ro := readOnly("/proc/sys/net"); ro != false {
				bad = append(bad, fmt.Sprintf("call %d: got /proc/sys/net read-only %v, want false", round+1, ro))
			}
			if ro := readOnly("/proc/sys/kernel"); ro != true {
				bad = append(bad, fmt.Sprintf("call %d: got /proc/sys/kernel read-only %v, want true (left as the runtime made it)", round+1, ro))
			}
		}
		// A write goes through: the value it already has, in this thread's
		// (the test process's) network namespace.
		if err := writeSysctlsHere("net/ipv4/conf/lo/route_localnet"); err != nil {
			fail("write a sysctl", err)
		}
		errs <- bad
	}()
	for _, e := range <-errs {
		t.Error(e)
	}
}

// readOnly reports whether the mount holding p is read-only (nil: statfs
// failed).
func readOnly(p string) any {
	var st unix.Statfs_t
	if unix.Statfs(p, &st) != nil {
		return nil
	}
	return st.Flags&unix.ST_RDONLY != 0
}

// writeSysctlsHere writes key's current value back to it.
func writeSysctlsHere(key string) error {
	p, err := sysctlPath(key)
	if err != nil {
		return err
	}
	b := make([]byte, 16)
	fd, err := unix.Open(p, unix.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	n, err := unix.Read(fd, b)
	if err != nil {
		return err
	}
	_, err = unix.Pwrite(fd, b[:n], 0)
	return err
}
