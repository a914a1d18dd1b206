package netns

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// procSysNet is where the sysctls of a namespace are written: it shows the
// network namespace of the thread that opens a file in it.
const procSysNet = "/proc/sys/net"

// writableNetSysctls makes /proc/sys/net writable in the daemon's own mount
// namespace when it is read-only, which is how containerd and CRI-O mount
// /proc/sys in every container that is not privileged: a bind mount of
// /proc/sys/net over itself, remounted read-write. One mount serves every
// namespace (the files follow the opening thread's network namespace); the
// rest of /proc/sys stays read-only, and nothing outside the daemon's mount
// namespace changes. Where /proc/sys/net is writable already (a host) it
// does nothing.
func writableNetSysctls() error {
	var st unix.Statfs_t
	if err := unix.Statfs(procSysNet, &st); err != nil {
		return fmt.Errorf("netns: statfs %s: %w", procSysNet, err)
	}
	if st.Flags&unix.ST_RDONLY == 0 {
		return nil
	}
	fail := func(err error) error {
		return fmt.Errorf("netns: %s is read-only (a container runtime's default) and remounting it read-write in the daemon's mount namespace failed: %w; the daemon needs CAP_SYS_ADMIN and a profile that allows mount(2) (the DaemonSet's AppArmor Unconfined)", procSysNet, err)
	}
	if err := unix.Mount(procSysNet, procSysNet, "", unix.MS_BIND, ""); err != nil {
		return fail(err)
	}
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	if err := unix.Mount("", procSysNet, "", flags, ""); err != nil {
		_ = unix.Unmount(procSysNet, unix.MNT_DETACH)
		return fail(err)
	}
	return nil
}
