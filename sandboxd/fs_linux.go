package sandboxd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The filesystem view, built by init as root in its own mount namespace when
// it gets its config (Prepare):
//
//  1. every host-side source (root or RootFS, CA bundle, trust dir) is cloned as a
//     detached mount (tree) with open_tree before anything covers it: the root
//     and each mount below it one by one, each read-only, nosuid, nodev and
//     idmapped so that no host socket is connectable through it (mounts that
//     cannot be idmapped are left out; hostview_linux.go);
//  2. the root is attached on a private staging tmpfs with its mounts in place,
//     and pivot_root'ed into; the old root is detached, so host paths are gone;
//  3. fresh /proc (masked), minimal /dev, empty read-only /sys, tmpfs /tmp, $HOME,
//     /var/tmp and the empty workspace, an empty /run, resolv.conf, passwd and
//     group naming the sandbox uid (SandboxUser), hosts naming the hostname, the CA bundle,
//     the trust directory (at SandboxTrustDir in that /run) and the hidden-path
//     masks are mounted inside, targets resolved inside the new root.
//
// Start then resizes the tmpfs mounts if the user's limits differ and attaches
// the user's workspace: a tree the executor cloned (open_tree) and idmapped in
// its own mount namespace (workspace.go) and sent as an fd, so init never
// resolves a host path after its pivot. The sandbox uid and gid act as the
// workspace directory's owner, so the sandbox can write a root- or user-owned
// directory without a chown on the host, and what it creates belongs to that
// owner on the host. The seccomp filter refuses setuid and setgid mode bits, so
// nothing the sandbox creates there becomes a setuid binary of the owner.
//
// Needs Linux >= 5.12 (open_tree, move_mount, mount_setattr); older kernels fail
// closed with a clear error.

const (
	stagingDir = "/tmp" // any directory that exists on the host root; private to us
	resolvConf = "nameserver 127.0.0.1\noptions edns0 trust-ad\n"
	// maxIdentityFile bounds the root's passwd and group files read for the
	// sandbox's copies (which live on the 1 MiB staging tmpfs).
	maxIdentityFile = 256 << 10
)

// Masked /proc files (bound to /dev/null) and directories (empty read-only tmpfs).
var (
	procMaskFiles = []string{"/proc/kcore", "/proc/keys", "/proc/key-users", "/proc/sched_debug",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sysrq-trigger", "/proc/kallsyms",
		"/proc/latency_stats", "/proc/kmsg", "/proc/config.gz", "/proc/vmallocinfo", "/proc/pagetypeinfo"}
	procMaskDirs = []string{"/proc/acpi", "/proc/scsi", "/proc/asound", "/proc/firmware", "/proc/driver"}
	procReadOnly = []string{"/proc/sys", "/proc/irq", "/proc/bus", "/proc/fs"}
)

// fsState is what init keeps of the filesystem it built: the tmpfs mounts
// whose size the start request may change, and the roots the files stage
// works below.
type fsState struct {
	cfg        *initConfig
	homeParent string
	tmpfs      []tmpfsMount
	homeRoot   int // O_PATH fd of $HOME
	wsRoot     int // O_PATH fd of the workspace (the tmpfs one, or the bound tree after start); -1 for none
	// Rootless (rootless_linux.go): the host's device nodes cloned for
	// /dev, and the workspace tree cloned at config (-1: none).
	devs    map[string]int
	wsClone int
}

// tmpfsMount is one of the sandbox's sized tmpfs mounts.
type tmpfsMount struct {
	path, source string
	flags        uintptr
	mode         string
}

// mount mounts it with size and inode limits.
func (t tmpfsMount) mount(size, inodes int64) error {
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=%s", size, inodes, t.mode)
	if err := unix.Mount(t.source, t.path, "tmpfs", t.flags, opts); err != nil {
		return fmt.Errorf("mount %s tmpfs (%s): %w", t.path, opts, err)
	}
	return nil
}

// mountTmpfs mounts t with the config's size and remembers it for resizing.
func (f *fsState) mountTmpfs(t tmpfsMount) error {
	if err := t.mount(f.cfg.TmpSize, f.cfg.TmpInodes); err != nil {
		return err
	}
	f.tmpfs = append(f.tmpfs, t)
	return nil
}

// resizeTmpfs remounts every sized tmpfs with new limits (a fresh sandbox
// uses almost none of them).
func (f *fsState) resizeTmpfs(size, inodes int64) error {
	opts := fmt.Sprintf("size=%d,nr_inodes=%d", size, inodes)
	for _, t := range f.tmpfs {
		if err := unix.Mount("", t.path, "", unix.MS_REMOUNT|t.flags, opts); err != nil {
			return fmt.Errorf("remount %s tmpfs (%s): %w", t.path, opts, err)
		}
	}
	return nil
}

func setupSandbox(cfg *initConfig) (*fsState, error) {
	f := &fsState{cfg: cfg, homeParent: filepath.Dir(cfg.Home), homeRoot: -1, wsRoot: -1, wsClone: -1}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("make mounts private: %w", err)
	}
	src := "/"
	if cfg.RootFS != "" {
		src = cfg.RootFS
	}
	var view *hostView
	var err error
	if cfg.Rootless {
		view, err = f.cloneRootless(src)
		defer f.closeRootless()
	} else {
		view, err = cloneHostView(src, fdRootUserns, cfg.Mounts)
	}
	if err != nil {
		return nil, fmt.Errorf("clone root %s: %w", src, err)
	}
	defer view.close()
	unix.Close(fdRootUserns)
	caFD := -1
	if cfg.CABundle != "" {
		if caFD, err = cloneTree(cfg.CABundle, false, roAttrs); err != nil {
			return nil, fmt.Errorf("clone ca bundle %s: %w", cfg.CABundle, err)
		}
		defer unix.Close(caFD)
	}
	trustFD := -1
	if cfg.TrustDir != "" {
		if trustFD, err = cloneTree(cfg.TrustDir, false, roAttrs); err != nil {
			return nil, fmt.Errorf("clone trust dir %s: %w", cfg.TrustDir, err)
		}
		defer unix.Close(trustFD)
	}
	staged, err := enterView(view, cfg)
	if err != nil {
		return nil, err
	}
	defer staged.close()
	rcFD := staged.resolv
	if err := f.mountSystem(); err != nil {
		return nil, err
	}
	if err := f.mountHome(); err != nil {
		return nil, err
	}
	if err := f.hideHome(); err != nil {
		return nil, err
	}
	targets := []string{"/etc/resolv.conf"}
	if caFD >= 0 {
		targets = append(targets, SystemCABundle)
	}
	runtimeDirs, err := f.maskRuntimeDirs(targets)
	if err != nil {
		return nil, err
	}
	if err := unix.MoveMount(rcFD, "", unix.AT_FDCWD, "/etc/resolv.conf", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_SYMLINKS); err != nil {
		return nil, fmt.Errorf("mount /etc/resolv.conf (it must exist in the sandbox root): %w", err)
	}
	if caFD >= 0 {
		if err := unix.MoveMount(caFD, "", unix.AT_FDCWD, SystemCABundle, unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_SYMLINKS); err != nil {
			return nil, fmt.Errorf("mount ca bundle over %s (it must exist in the sandbox root): %w", SystemCABundle, err)
		}
	}
	if err := staged.mountIdentity(); err != nil {
		return nil, err
	}
	if err := mountTrustDir(trustFD, runtimeDirs); err != nil {
		return nil, err
	}
	if err := sealRuntimeDirs(runtimeDirs); err != nil {
		return nil, err
	}
	if err := f.mountEmptyWorkspace(); err != nil {
		return nil, err
	}
	for _, h := range cfg.Hidden {
		if err := maskPath(h); err != nil {
			return nil, fmt.Errorf("hide %s: %w", h, err)
		}
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return nil, fmt.Errorf("sethostname: %w", err)
	}
	if cfg.FreshNet {
		if err := loopbackUp(); err != nil {
			return nil, err
		}
	}
	if f.homeRoot, err = unix.Open(cfg.Home, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("open home %s: %w", cfg.Home, err)
	}
	return f, nil
}

// mountTrustDir attaches the cloned trust directory (trustFD, -1 for none) at
// SandboxTrustDir, made in the fresh /run before it is sealed read-only.
func mountTrustDir(trustFD int, fresh []string) error {
	if trustFD < 0 {
		return nil
	}
	if !slices.Contains(fresh, runDir) {
		return fmt.Errorf("mount trust dir at %s: %s is not a directory in the sandbox root", SandboxTrustDir, runDir)
	}
	if err := os.Mkdir(SandboxTrustDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", SandboxTrustDir, err)
	}
	if err := unix.MoveMount(trustFD, "", unix.AT_FDCWD, SandboxTrustDir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount trust dir at %s: %w", SandboxTrustDir, err)
	}
	return nil
}

// stagedFiles are the files init writes on the staging tmpfs and clones
// (detached, read-only) before the pivot, to mount over the root's own.
type stagedFiles struct {
	resolv int
	etc    []stagedEtc // passwd, group, hosts: those the root has
}

type stagedEtc struct {
	path string
	fd   int
}

func (s *stagedFiles) close() {
	if s.resolv >= 0 {
		unix.Close(s.resolv)
	}
	for _, f := range s.etc {
		unix.Close(f.fd)
	}
}

// mountIdentity mounts the staged /etc/passwd, /etc/group and /etc/hosts over
// the root's.
func (s *stagedFiles) mountIdentity() error {
	for _, f := range s.etc {
		if err := unix.MoveMount(f.fd, "", unix.AT_FDCWD, f.path, unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_SYMLINKS); err != nil {
			return fmt.Errorf("mount %s: %w", f.path, err)
		}
	}
	return nil
}

// enterView attaches the host view on a private staging tmpfs, which also
// holds the sandbox's resolv.conf, passwd, group and hosts (cloned before the
// pivot), pivots into it and detaches the old root.
func enterView(view *hostView, cfg *initConfig) (*stagedFiles, error) {
	s := &stagedFiles{resolv: -1}
	fail := func(err error) (*stagedFiles, error) {
		s.close()
		return nil, err
	}
	if err := unix.Mount("airlock-stage", stagingDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,mode=700"); err != nil {
		return fail(fmt.Errorf("mount staging tmpfs: %w", err))
	}
	var err error
	if s.resolv, err = stageFile("resolv.conf", []byte(resolvConf)); err != nil {
		return fail(err)
	}
	newRoot := filepath.Join(stagingDir, "root")
	if err := os.Mkdir(newRoot, 0o755); err != nil {
		return fail(err)
	}
	if err := view.attach(newRoot); err != nil {
		return fail(err)
	}
	if err := s.stageIdentity(newRoot, cfg); err != nil {
		return fail(err)
	}
	if err := unix.Chdir(newRoot); err != nil {
		return fail(err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fail(fmt.Errorf("pivot_root: %w", err))
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fail(fmt.Errorf("detach old root: %w", err))
	}
	if err := unix.Chdir("/"); err != nil {
		return fail(err)
	}
	return s, nil
}

// stageFile writes name on the staging tmpfs and returns a detached read-only
// clone of it.
func stageFile(name string, data []byte) (int, error) {
	p := filepath.Join(stagingDir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return -1, fmt.Errorf("write %s: %w", name, err)
	}
	fd, err := cloneTree(p, false, roAttrs)
	if err != nil {
		return -1, fmt.Errorf("clone %s: %w", name, err)
	}
	return fd, nil
}

// stageIdentity stages the root's /etc/passwd and /etc/group with an entry
// for the sandbox uid (SandboxUser, home cfg.Home), so tools that look their
// user up (ssh, whoami, getpass) work, and its /etc/hosts with the sandbox's
// hostname on loopback, so a lookup of it never reaches the DNS filter. A file
// the root does not have is left out.
func (s *stagedFiles) stageIdentity(root string, cfg *initConfig) error {
	uid := strconv.Itoa(cfg.UID)
	for _, f := range []struct {
		name string
		edit func([]byte) []byte
	}{
		{"passwd", func(b []byte) []byte {
			return withEntry(b, SandboxUser+":x:"+uid+":"+uid+":airlock sandbox:"+cfg.Home+":/bin/sh", uid)
		}},
		{"group", func(b []byte) []byte { return withEntry(b, SandboxUser+":x:"+uid+":", uid) }},
		{"hosts", func(b []byte) []byte { return withHostname(b, cfg.Hostname) }},
	} {
		cur, err := readInRoot(root, "etc/"+f.name)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read /etc/%s of the sandbox root: %w", f.name, err)
		}
		fd, err := stageFile(f.name, f.edit(cur))
		if err != nil {
			return err
		}
		s.etc = append(s.etc, stagedEtc{path: "/etc/" + f.name, fd: fd})
	}
	return nil
}

// withHostname returns the hosts file cur with name on 127.0.1.1 (as Debian
// names its own host), unless cur already maps it.
func withHostname(cur []byte, name string) []byte {
	for _, l := range strings.Split(string(cur), "\n") {
		if i := strings.IndexByte(l, '#'); i >= 0 {
			l = l[:i]
		}
		if f := strings.Fields(l); len(f) > 1 && slices.Contains(f[1:], name) {
			return cur
		}
	}
	out := append([]byte(nil), cur...)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	return append(out, "127.0.1.1\t"+name+"\n"...)
}

// withEntry returns the passwd or group file cur with every entry named
// SandboxUser or numbered id replaced by line.
func withEntry(cur []byte, line, id string) []byte {
	var b bytes.Buffer
	for _, l := range strings.Split(string(cur), "\n") {
		f := strings.SplitN(l, ":", 4)
		if l == "" || (len(f) >= 3 && (f[0] == SandboxUser || f[2] == id)) {
			continue
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	b.WriteString(line)
	b.WriteByte('\n')
	return b.Bytes()
}

// readInRoot reads the regular file rel of the tree at root, resolving every
// symlink inside that tree (a root's /etc/passwd -> /host/file stays inside).
func readInRoot(root, rel string) ([]byte, error) {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(rfd)
	fd, err := unix.Openat2(rfd, rel, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", rel)
	}
	return io.ReadAll(io.LimitReader(f, maxIdentityFile))
}

// mountSystem mounts /dev, /proc, an empty /sys and /tmp.
func (f *fsState) mountSystem() error {
	if err := f.setupDev(); err != nil {
		return err
	}
	if err := setupProc(); err != nil {
		return err
	}
	_ = unix.Unmount("/sys", unix.MNT_DETACH)
	if err := unix.Mount("airlock-nosys", "/sys", "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=555"); err != nil {
		return fmt.Errorf("mount empty /sys: %w", err)
	}
	return f.mountTmpfs(tmpfsMount{path: "/tmp", source: "airlock-tmp", flags: unix.MS_NOSUID | unix.MS_NODEV, mode: "1777"})
}

// mountHome mounts a tmpfs over $HOME's parent, makes $HOME owned by the
// sandbox uid and masks /root.
func (f *fsState) mountHome() error {
	cfg := f.cfg
	if st, err := os.Stat(f.homeParent); err != nil || !st.IsDir() {
		return fmt.Errorf("home %s: parent %s is not a directory in the sandbox root", cfg.Home, f.homeParent)
	}
	if err := f.mountTmpfs(tmpfsMount{path: f.homeParent, source: "airlock-home", flags: unix.MS_NOSUID | unix.MS_NODEV, mode: "755"}); err != nil {
		return err
	}
	if err := os.Mkdir(cfg.Home, 0o700); err != nil {
		return fmt.Errorf("create home: %w", err)
	}
	if err := os.Chown(cfg.Home, cfg.UID, cfg.GID); err != nil {
		return fmt.Errorf("chown home: %w", err)
	}
	if st, err := os.Stat("/root"); err == nil && st.IsDir() && f.homeParent != "/root" {
		if err := unix.Mount("airlock-mask", "/root", "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=700"); err != nil {
			return fmt.Errorf("mask /root: %w", err)
		}
	}
	return nil
}

// mountEmptyWorkspace mounts the empty workspace, a tmpfs owned by the
// sandbox uid, when the config asks for one.
func (f *fsState) mountEmptyWorkspace() error {
	d := f.cfg.WorkspaceDir
	if d == "" {
		return nil
	}
	if st, err := os.Lstat(d); err != nil || !st.IsDir() {
		return fmt.Errorf("workspace %s is not a directory in the sandbox root", d)
	}
	if err := f.mountTmpfs(tmpfsMount{path: d, source: "airlock-workspace", flags: unix.MS_NOSUID | unix.MS_NODEV, mode: "755"}); err != nil {
		return err
	}
	if err := os.Chown(d, f.cfg.UID, f.cfg.GID); err != nil {
		return fmt.Errorf("chown workspace %s: %w", d, err)
	}
	fd, err := unix.Open(d, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open workspace %s: %w", d, err)
	}
	f.wsRoot = fd
	return nil
}

// attachWorkspace moves the detached workspace tree treeFD (made and
// idmapped by the executor in its own mount namespace: init never resolves a
// host path after its pivot) to target, masks the hidden paths below it and
// makes it the files stage's workspace root. treeFD < 0 means no workspace.
func (f *fsState) attachWorkspace(treeFD int, target string, hidden []string) error {
	if treeFD < 0 {
		return nil
	}
	inWS := f.cfg.WorkspaceDir != "" && within(target, f.cfg.WorkspaceDir) && target != f.cfg.WorkspaceDir
	if underTmpfs(target, f.homeParent) || inWS {
		if err := os.MkdirAll(target, 0o755); err != nil {
			return fmt.Errorf("create workspace target %s: %w", target, err)
		}
	}
	if st, err := os.Stat(target); err != nil || !st.IsDir() {
		return fmt.Errorf("workspace_target %s is not a directory in the sandbox root", target)
	}
	if err := unix.MoveMount(treeFD, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_SYMLINKS); err != nil {
		return fmt.Errorf("attach workspace at %s: %w", target, err)
	}
	for _, h := range hidden {
		if err := maskPath(h); err != nil {
			return fmt.Errorf("hide %s: %w", h, err)
		}
	}
	fd, err := unix.Open(target, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open workspace %s: %w", target, err)
	}
	if f.wsRoot >= 0 {
		unix.Close(f.wsRoot)
	}
	f.wsRoot = fd
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

func (f *fsState) setupDev() error {
	_ = unix.Unmount("/dev", unix.MNT_DETACH)
	if err := unix.Mount("airlock-dev", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "size=64k,nr_inodes=64,mode=755"); err != nil {
		return fmt.Errorf("mount /dev tmpfs: %w", err)
	}
	for _, d := range []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}} {
		p := "/dev/" + d.name
		if f.cfg.Rootless {
			if err := f.mountDevice(d.name, p); err != nil {
				return err
			}
			continue
		}
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
	if err := f.mountTmpfs(tmpfsMount{path: "/dev/shm", source: "airlock-shm", flags: unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, mode: "1777"}); err != nil {
		return err
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
// /dev/null bound read-only. A path that does not exist needs no mask. The
// empty directory may be listed (mode 0555): a tool that walks a workspace
// holding a hidden directory (pytest, git, find) sees it empty instead of
// failing on EACCES; it shows nothing either way.
func maskPath(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	if st.IsDir() {
		return unix.Mount("airlock-mask", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,nr_inodes=1,mode=555")
	}
	if err := unix.Mount("/dev/null", p, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	// mount_setattr, not a bind remount: it changes only the flags named, so
	// it works on a rootless sandbox's /dev/null too, whose access-time
	// flags are locked to the host's.
	return unix.MountSetattr(unix.AT_FDCWD, p, 0,
		&unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC})
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
