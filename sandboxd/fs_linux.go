package sandboxd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The filesystem view, built by init as root in its own mount namespace:
//
//  1. every host-side source (root or RootFS, workspace, CA bundle) is cloned as a
//     detached mount (tree) with open_tree before anything covers it: the root
//     and each mount below it one by one, each read-only, nosuid, nodev and
//     idmapped so that no host socket is connectable through it (mounts that
//     cannot be idmapped are left out; hostview_linux.go);
//  2. the root is attached on a private staging tmpfs with its mounts in place,
//     and pivot_root'ed into; the old root is detached, so host paths are gone;
//  3. fresh /proc (masked), minimal /dev, empty read-only /sys, tmpfs /tmp, $HOME
//     and /var/tmp, an empty /run, the workspace, resolv.conf, the CA bundle and
//     the hidden-path masks are mounted inside, targets resolved inside the new
//     root.
//
// The workspace is an idmapped mount (see idmapWorkspace): the sandbox uid and gid
// act as the workspace directory's owner, so the sandbox can write a root- or
// user-owned directory without a chown on the host, and what it creates belongs to
// that owner on the host. The seccomp filter refuses setuid and setgid mode bits, so
// nothing the sandbox creates there becomes a setuid binary of the owner.
//
// Needs Linux >= 5.12 (open_tree, move_mount, mount_setattr); older kernels fail
// closed with a clear error.

const (
	stagingDir = "/tmp" // any directory that exists on the host root; private to us
	resolvConf = "nameserver 127.0.0.1\noptions edns0 trust-ad\n"
)

// Masked /proc files (bound to /dev/null) and directories (empty read-only tmpfs).
var (
	procMaskFiles = []string{"/proc/kcore", "/proc/keys", "/proc/key-users", "/proc/sched_debug",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sysrq-trigger", "/proc/kallsyms",
		"/proc/latency_stats", "/proc/kmsg", "/proc/config.gz", "/proc/vmallocinfo", "/proc/pagetypeinfo"}
	procMaskDirs = []string{"/proc/acpi", "/proc/scsi", "/proc/asound", "/proc/firmware", "/proc/driver"}
	procReadOnly = []string{"/proc/sys", "/proc/irq", "/proc/bus", "/proc/fs"}
)

func setupSandbox(cfg *initConfig) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	src := "/"
	if cfg.RootFS != "" {
		src = cfg.RootFS
	}
	view, err := cloneHostView(src, fdRootUserns, cfg.Mounts)
	if err != nil {
		return fmt.Errorf("clone root %s: %w", src, err)
	}
	defer view.close()
	unix.Close(fdRootUserns)
	wsFD := -1
	var wsOwner unix.Stat_t
	if cfg.Workspace != "" {
		if wsFD, err = cloneTree(cfg.Workspace, true, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV); err != nil {
			return fmt.Errorf("clone workspace %s: %w", cfg.Workspace, err)
		}
		defer unix.Close(wsFD)
		if err := unix.Fstat(wsFD, &wsOwner); err != nil {
			return fmt.Errorf("stat workspace %s: %w", cfg.Workspace, err)
		}
	}
	caFD := -1
	if cfg.CABundle != "" {
		if caFD, err = cloneTree(cfg.CABundle, false, roAttrs); err != nil {
			return fmt.Errorf("clone ca bundle %s: %w", cfg.CABundle, err)
		}
		defer unix.Close(caFD)
	}
	// Staging: a private tmpfs holding resolv.conf and the new root's mount point.
	if err := unix.Mount("airlock-stage", stagingDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=64k,mode=700"); err != nil {
		return fmt.Errorf("mount staging tmpfs: %w", err)
	}
	rc := filepath.Join(stagingDir, "resolv.conf")
	if err := os.WriteFile(rc, []byte(resolvConf), 0o644); err != nil {
		return fmt.Errorf("write resolv.conf: %w", err)
	}
	rcFD, err := cloneTree(rc, false, roAttrs)
	if err != nil {
		return fmt.Errorf("clone resolv.conf: %w", err)
	}
	defer unix.Close(rcFD)
	newRoot := filepath.Join(stagingDir, "root")
	if err := os.Mkdir(newRoot, 0o755); err != nil {
		return err
	}
	if err := view.attach(newRoot); err != nil {
		return err
	}
	if err := unix.Chdir(newRoot); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}

	if err := setupDev(cfg); err != nil {
		return err
	}
	if err := setupProc(); err != nil {
		return err
	}
	_ = unix.Unmount("/sys", unix.MNT_DETACH)
	if err := unix.Mount("airlock-nosys", "/sys", "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=555"); err != nil {
		return fmt.Errorf("mount empty /sys: %w", err)
	}
	tmpOpts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=1777", cfg.TmpSize, cfg.TmpInodes)
	if err := unix.Mount("airlock-tmp", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmpOpts); err != nil {
		return fmt.Errorf("mount /tmp tmpfs (%s): %w", tmpOpts, err)
	}
	homeParent := filepath.Dir(cfg.Home)
	if st, err := os.Stat(homeParent); err != nil || !st.IsDir() {
		return fmt.Errorf("home %s: parent %s is not a directory in the sandbox root", cfg.Home, homeParent)
	}
	homeOpts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=755", cfg.TmpSize, cfg.TmpInodes)
	if err := unix.Mount("airlock-home", homeParent, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, homeOpts); err != nil {
		return fmt.Errorf("mount %s tmpfs (%s): %w", homeParent, homeOpts, err)
	}
	if err := os.Mkdir(cfg.Home, 0o700); err != nil {
		return fmt.Errorf("create home: %w", err)
	}
	if err := os.Chown(cfg.Home, cfg.Exec.UID, cfg.Exec.GID); err != nil {
		return fmt.Errorf("chown home: %w", err)
	}
	if st, err := os.Stat("/root"); err == nil && st.IsDir() && homeParent != "/root" {
		if err := unix.Mount("airlock-mask", "/root", "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=700"); err != nil {
			return fmt.Errorf("mask /root: %w", err)
		}
	}
	targets := []string{"/etc/resolv.conf"}
	if caFD >= 0 {
		targets = append(targets, SystemCABundle)
	}
	runtimeDirs, err := maskRuntimeDirs(cfg, targets)
	if err != nil {
		return err
	}
	if wsFD >= 0 {
		t := cfg.WorkspaceTarget
		if underTmpfs(t, homeParent) {
			if err := os.MkdirAll(t, 0o755); err != nil {
				return fmt.Errorf("create workspace target %s: %w", t, err)
			}
		}
		if st, err := os.Stat(t); err != nil || !st.IsDir() {
			return fmt.Errorf("workspace_target %s is not a directory in the sandbox root", t)
		}
		if err := idmapWorkspace(wsFD, cfg.Workspace, int(wsOwner.Uid), int(wsOwner.Gid), cfg.Exec.UID, cfg.Exec.GID); err != nil {
			return err
		}
		if err := unix.MoveMount(wsFD, "", unix.AT_FDCWD, t, unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_SYMLINKS); err != nil {
			return fmt.Errorf("attach workspace at %s: %w", t, err)
		}
	}
	if err := unix.MoveMount(rcFD, "", unix.AT_FDCWD, "/etc/resolv.conf", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_SYMLINKS); err != nil {
		return fmt.Errorf("mount /etc/resolv.conf (it must exist in the sandbox root): %w", err)
	}
	if caFD >= 0 {
		if err := unix.MoveMount(caFD, "", unix.AT_FDCWD, SystemCABundle, unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_SYMLINKS); err != nil {
			return fmt.Errorf("mount ca bundle over %s (it must exist in the sandbox root): %w", SystemCABundle, err)
		}
	}
	if err := sealRuntimeDirs(runtimeDirs); err != nil {
		return err
	}
	for _, h := range cfg.Hidden {
		if err := maskPath(h); err != nil {
			return fmt.Errorf("hide %s: %w", h, err)
		}
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	if cfg.FreshNet {
		if err := loopbackUp(); err != nil {
			return err
		}
	}
	return nil
}

const roAttrs = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC

// cloneTree makes a detached copy of the mount (tree) at path with attrs set.
func cloneTree(path string, recursive bool, attrs uint64) (int, error) {
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC)
	if recursive {
		flags |= unix.AT_RECURSIVE
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, flags)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) {
			return -1, fmt.Errorf("open_tree: kernel too old (need Linux >= 5.12): %w", err)
		}
		return -1, fmt.Errorf("open_tree: %w", err)
	}
	setFlags := uint(unix.AT_EMPTY_PATH)
	if recursive {
		setFlags |= unix.AT_RECURSIVE
	}
	attr := unix.MountAttr{Attr_set: attrs, Propagation: unix.MS_PRIVATE}
	if err := unix.MountSetattr(fd, "", setFlags, &attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("mount_setattr: %w", err)
	}
	return fd, nil
}

func underTmpfs(p, homeParent string) bool {
	for _, base := range []string{"/tmp", homeParent, varTmpDir, runDir, varRunDir} {
		if p == base || strings.HasPrefix(p, base+"/") {
			return true
		}
	}
	return false
}

func setupDev(cfg *initConfig) error {
	_ = unix.Unmount("/dev", unix.MNT_DETACH)
	if err := unix.Mount("airlock-dev", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "size=64k,nr_inodes=64,mode=755"); err != nil {
		return fmt.Errorf("mount /dev tmpfs: %w", err)
	}
	for _, d := range []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}} {
		p := "/dev/" + d.name
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor))); err != nil {
			return fmt.Errorf("mknod %s: %w", p, err)
		}
		if err := unix.Chmod(p, 0o666); err != nil { // umask
			return err
		}
	}
	for _, l := range [][2]string{{"/proc/self/fd", "/dev/fd"}, {"/proc/self/fd/0", "/dev/stdin"},
		{"/proc/self/fd/1", "/dev/stdout"}, {"/proc/self/fd/2", "/dev/stderr"}, {"pts/ptmx", "/dev/ptmx"}} {
		if err := os.Symlink(l[0], l[1]); err != nil {
			return err
		}
	}
	for _, d := range []string{"/dev/pts", "/dev/shm"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("airlock-devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("mount devpts: %w", err)
	}
	shmOpts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=1777", cfg.TmpSize, cfg.TmpInodes)
	if err := unix.Mount("airlock-shm", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, shmOpts); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	if err := unix.Mount("", "/dev", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("remount /dev read-only: %w", err)
	}
	return nil
}

func setupProc() error {
	_ = unix.Unmount("/proc", unix.MNT_DETACH)
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	for _, p := range procReadOnly {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", p, err)
		}
		if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("remount %s read-only: %w", p, err)
		}
	}
	for _, p := range procMaskFiles {
		if err := maskPath(p); err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
	}
	for _, p := range procMaskDirs {
		if err := maskPath(p); err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
	}
	return nil
}

// maskPath hides p: a directory gets an empty read-only tmpfs, anything else
// /dev/null bound read-only. A path that does not exist needs no mask.
func maskPath(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	if st.IsDir() {
		return unix.Mount("airlock-mask", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,nr_inodes=1,mode=000")
	}
	if err := unix.Mount("/dev/null", p, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	return unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
}

// loopbackUp sets lo up in a fresh network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	return nil
}

// idmapWorkspace makes the detached workspace tree fd an idmapped mount in which
// files owned by ownerUID/ownerGID on disk appear as uid/gid, and files uid/gid
// creates land on disk as ownerUID/ownerGID. Other on-disk owners appear as the
// overflow id (nobody) and cannot be written through ownership. It must run after
// the sandbox's /proc is mounted (the helper's maps are written through it) and
// before the tree is attached (an attached mount cannot be idmapped).
func idmapWorkspace(treeFD int, path string, ownerUID, ownerGID, uid, gid int) error {
	nsFD, err := idmapUserns(ownerUID, ownerGID, uid, gid)
	if err != nil {
		return fmt.Errorf("workspace %s: user namespace for the idmapped mount: %w", path, err)
	}
	defer unix.Close(nsFD)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(nsFD)}
	if err := unix.MountSetattr(treeFD, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		var fs unix.Statfs_t
		_ = unix.Fstatfs(treeFD, &fs)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOSYS) {
			return fmt.Errorf("workspace %s: the filesystem (statfs type %#x) or one of its submounts does not support idmapped mounts, "+
				"so the sandbox (uid %d) cannot be made its owner (uid %d); use a workspace on ext4, xfs, btrfs or tmpfs (Linux >= 6.3): %w",
				path, fs.Type, uid, ownerUID, err)
		}
		return fmt.Errorf("workspace %s: idmap mount: %w", path, err)
	}
	return nil
}

// idmapUserns returns an fd for a new user namespace whose uid_map is
// "ownerUID uid 1" and gid_map "ownerGID gid 1". The namespace needs a process to
// be born: a child of this process is cloned into it and traced, so it stops at
// its execve before running a single instruction of the program, and is killed and
// reaped once its namespace is open.
func idmapUserns(ownerUID, ownerGID, uid, gid int) (int, error) {
	// The tracer is this thread; it stays locked until the child is reaped.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, err := syscall.ForkExec("/proc/self/exe", []string{"airlock-idmap"}, &syscall.ProcAttr{
		Env: []string{},
		Sys: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: ownerUID, HostID: uid, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: ownerGID, HostID: gid, Size: 1}},
			Ptrace:      true,
			Pdeathsig:   unix.SIGKILL,
		},
	})
	if err != nil {
		return -1, fmt.Errorf("clone helper: %w", err)
	}
	defer func() {
		_ = unix.Kill(pid, unix.SIGKILL)
		for {
			var ws unix.WaitStatus
			if _, err := unix.Wait4(pid, &ws, 0, nil); err == unix.EINTR || (err == nil && !ws.Exited() && !ws.Signaled()) {
				continue
			}
			return
		}
	}()
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open helper user namespace: %w", err)
	}
	return fd, nil
}
