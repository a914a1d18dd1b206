package sandboxd

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The host's unix sockets. A read-only mount does not stop connect() (or
// sendto()) on a pathname socket: the kernel asks only for write permission
// on the socket's inode, which a 0666 socket grants to anyone. So the host
// view is made so that no host socket can be written through it:
//
//  1. Every mount of the sandbox's view of the host root is an idmapped mount
//     whose map names a single id, rootViewID, that no host file has. The
//     kernel refuses write access, and so connect() and sendto(), with EACCES
//     to every inode whose owner or group the mount's map leaves unmapped
//     (inode_permission's HAS_UNMAPPED_ID check): that is every socket file
//     of the host, present when the sandbox started or created later. The
//     sandbox's uid was never the owner or group of a host file, so what it
//     may read and run is unchanged; files show as owned by the overflow id
//     (nobody).
//  2. A mount that cannot be idmapped (its filesystem lacks support: nfs,
//     most fuse, ramfs...) is left out of the view: the sandbox sees the
//     directory under it, in the idmapped parent. Mounts in the trees the
//     sandbox covers with its own (/proc, /sys, /dev, /tmp, /run, ...) are
//     not cloned at all. A root that cannot be idmapped fails the run: it is
//     never shown unprotected.
//  3. /run (and /var/run where it is a directory of its own) get an empty
//     read-only tmpfs and /var/tmp a private writable one, like /tmp, so the
//     sandbox does not even see the names of the host's sockets, pid files
//     and runtime state there. A resolv.conf or CA bundle path that resolves
//     into one of them (/etc/resolv.conf -> /run/systemd/resolve/...) gets an
//     empty file there to mount the sandbox's own over.
//
// Sockets the sandbox binds itself live on its own tmpfs mounts (/tmp, $HOME,
// /var/tmp, /dev/shm), which are not idmapped, so they work. Abstract sockets
// belong to a network namespace; the sandbox has its own. The workspace is
// idmapped to its owner: a socket its owner keeps inside the workspace is the
// one host socket a sandbox can reach, as it can the rest of the workspace.

// rootViewID is the only uid and gid the host view's idmapping maps (to
// itself): (uid_t)-2. Every other owner appears unmapped, so nothing on the
// host root is writable, and no socket there connectable, through the view.
const rootViewID = 1<<32 - 2

// usernsFuture is the user namespace whose map is rootViewID to itself, for
// the idmapping of every sandbox's root. The executor makes it once (it costs
// a helper process, 3-5 ms) in the background from New, and passes it to each
// init; Run waits for it and fails if it could not be made.
type usernsFuture struct {
	done chan struct{}
	f    *os.File
	err  error
}

func startRootUserns() *usernsFuture {
	u := &usernsFuture{done: make(chan struct{})}
	go func() {
		defer close(u.done)
		fd, err := idmapUserns(rootViewID, rootViewID, rootViewID, rootViewID)
		if err != nil {
			u.err = fmt.Errorf("sandboxd: user namespace for the host view's idmapping: %w", err)
			return
		}
		u.f = os.NewFile(uintptr(fd), "airlock-root-userns")
	}()
	return u
}

// get waits for the namespace.
func (u *usernsFuture) get() (*os.File, error) {
	<-u.done
	return u.f, u.err
}

// mountPoints returns src itself ("", first, whether or not it is a mount
// point) and the mount points below it from /proc/self/mountinfo, as paths
// relative to src.
func mountPoints(src string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	src = filepath.Clean(src)
	rels := []string{""}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			return nil, fmt.Errorf("read mount table: malformed line %q", sc.Text())
		}
		mp := unescapeMountinfo(fields[4])
		if !within(mp, src) {
			continue
		}
		rel, err := filepath.Rel(src, mp)
		if err != nil {
			return nil, fmt.Errorf("read mount table: %w", err)
		}
		if rel != "." {
			rels = append(rels, rel)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	return rels, nil
}

// unescapeMountinfo undoes the octal escapes (\040 for space, \011, \012,
// \134) of a mountinfo path.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// hostView is the sandbox's view of the host root: each mount at or below src
// cloned on its own (open_tree without AT_RECURSIVE: mount_setattr can only
// change the root of a detached tree), made read-only, nosuid, nodev, private
// and idmapped, and attached in order below the new root. A mount that cannot
// be cloned or idmapped is left out, so the directory under it shows (through
// its idmapped parent), never its contents.
type hostView struct {
	root int         // the root mount
	subs []viewMount // parents before children
}

type viewMount struct {
	rel string // below the root, no leading slash
	fd  int
}

// viewMounts lists, for the executor, the mount points of the host view of
// src that init clones: src itself ("") and the mounts below it, less those
// in the trees the sandbox's own mounts cover whole (on a container host,
// /run alone holds a mount per container). The executor reads its mount table
// (a warm process reads it in well under 0.1 ms; a fresh init took 0.2-2.5
// ms) and init clones from a copy of the same namespace: a mount made in
// between is not in the view, one removed is skipped.
func viewMounts(src string, icfg *initConfig) ([]string, error) {
	rels, err := mountPoints(src)
	if err != nil {
		return nil, fmt.Errorf("sandboxd: %w", err)
	}
	covered := coveredTrees(icfg)
	out := rels[:0]
	for _, rel := range rels {
		if rel == "" || !inTrees(rel, covered) {
			out = append(out, rel)
		}
	}
	// Parents before children: a mount point lies in its parent's tree.
	sort.SliceStable(out, func(i, j int) bool { return strings.Count(out[i], "/") < strings.Count(out[j], "/") })
	return out, nil
}

// cloneHostView clones the view of src: the mounts rels lists (viewMounts),
// parents first. The root ("", first) must be idmapped.
func cloneHostView(src string, usernsFD int, rels []string) (*hostView, error) {
	if len(rels) == 0 || rels[0] != "" {
		return nil, errors.New("the executor sent no mount list for the host view")
	}
	v := &hostView{root: -1}
	seen := map[uint64]bool{}
	for _, rel := range rels {
		path := filepath.Join(src, rel)
		var stx unix.Statx_t
		if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &stx); err != nil {
			if rel == "" {
				v.close()
				return nil, fmt.Errorf("statx %s: %w", path, err)
			}
			continue // gone, or under a covering mount
		}
		if seen[stx.Mnt_id] || (rel != "" && stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0) {
			continue // covered: path resolves into another mount
		}
		seen[stx.Mnt_id] = true
		fd, err := cloneIdmapped(path, usernsFD)
		switch {
		case err == nil && rel == "":
			v.root = fd
		case err == nil:
			v.subs = append(v.subs, viewMount{rel: rel, fd: fd})
		case rel == "":
			v.close()
			var fs unix.Statfs_t
			_ = unix.Statfs(src, &fs)
			return nil, fmt.Errorf("the sandbox root %s (filesystem type %#x) cannot be idmapped, so the host's unix sockets "+
				"would be connectable from the sandbox; use a root on ext4, xfs, btrfs, overlayfs or tmpfs: %w", src, fs.Type, err)
		}
	}
	if v.root < 0 {
		return nil, fmt.Errorf("%s is not in the mount table", src)
	}
	return v, nil
}

// inTrees reports whether rel is or lies below one of trees.
func inTrees(rel string, trees []string) bool {
	for _, r := range trees {
		if rel == r || strings.HasPrefix(rel, r+"/") {
			return true
		}
	}
	return false
}

// coveredTrees lists the trees of the sandbox's view that its own mounts cover
// whole, relative to the root: /proc, /sys, /dev, /tmp, /run, /var/run,
// /var/tmp, $HOME's parent, /root, the empty workspace and the hidden paths
// (setupSandbox masks each of them that exists).
func coveredTrees(cfg *initConfig) []string {
	trees := []string{"proc", "sys", "dev", "tmp", "run", "var/run", "var/tmp", "root"}
	for _, p := range append([]string{filepath.Dir(cfg.Home), cfg.WorkspaceDir}, cfg.Hidden...) {
		if p == "" {
			continue
		}
		if r := strings.TrimPrefix(filepath.Clean(p), "/"); r != "" {
			trees = append(trees, r)
		}
	}
	return trees
}

// cloneIdmapped clones the one mount at path (not its submounts) as a
// detached mount that is read-only, nosuid, nodev, private and idmapped.
func cloneIdmapped(path string, usernsFD int) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) {
			return -1, fmt.Errorf("open_tree: kernel too old (need Linux >= 5.12): %w", err)
		}
		return -1, fmt.Errorf("open_tree %s: %w", path, err)
	}
	attr := unix.MountAttr{
		Attr_set:    unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_IDMAP,
		Userns_fd:   uint64(usernsFD),
		Propagation: unix.MS_PRIVATE,
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("mount_setattr idmap %s: %w", path, err)
	}
	return fd, nil
}

// attach moves the root mount to newRoot and each submount to its place
// below it, resolved without following a symlink. A mount point that is not
// there (it lay inside a mount that was left out) is skipped.
func (v *hostView) attach(newRoot string) error {
	if err := unix.MoveMount(v.root, "", unix.AT_FDCWD, newRoot, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach root: %w", err)
	}
	rootDir, err := unix.Open(newRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open new root: %w", err)
	}
	defer unix.Close(rootDir)
	for _, m := range v.subs {
		t, err := unix.Openat2(rootDir, m.rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("mount point /%s: %w", m.rel, err)
		}
		err = unix.MoveMount(m.fd, "", t, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
		unix.Close(t)
		if err != nil {
			return fmt.Errorf("attach /%s: %w", m.rel, err)
		}
	}
	return nil
}

func (v *hostView) close() {
	if v.root >= 0 {
		unix.Close(v.root)
	}
	for _, m := range v.subs {
		unix.Close(m.fd)
	}
}

// runDirs are the host's runtime directories the sandbox gets its own empty
// ones of; varTmp gets a private writable tmpfs.
const (
	runDir    = "/run"
	varRunDir = "/var/run"
	varTmpDir = "/var/tmp"
)

// maskRuntimeDirs mounts an empty tmpfs over /run (and /var/run when it is not
// a link into /run) and a writable one over /var/tmp, then makes sure the
// targets the sandbox's resolv.conf and CA bundle are mounted over exist. The
// /run tmpfs is made read-only by sealRuntimeDirs once those mounts are made.
func (f *fsState) maskRuntimeDirs(mountTargets []string) (sealed []string, err error) {
	for _, d := range []string{runDir, varRunDir} {
		st, err := os.Lstat(d)
		if err != nil || !st.IsDir() {
			continue // absent, or a link (into /run)
		}
		if err := unix.Mount("airlock-run", d, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=64k,nr_inodes=256,mode=755"); err != nil {
			return nil, fmt.Errorf("mount %s tmpfs: %w", d, err)
		}
		sealed = append(sealed, d)
	}
	if st, err := os.Lstat(varTmpDir); err == nil && st.IsDir() {
		if err := f.mountTmpfs(tmpfsMount{path: varTmpDir, source: "airlock-vartmp", flags: unix.MS_NOSUID | unix.MS_NODEV, mode: "1777"}); err != nil {
			return nil, err
		}
	}
	for _, t := range mountTargets {
		if err := ensureTarget(t, sealed); err != nil {
			return nil, err
		}
	}
	return sealed, nil
}

// sealRuntimeDirs makes the runtime tmpfs mounts read-only.
func sealRuntimeDirs(dirs []string) error {
	for _, d := range dirs {
		if err := unix.Mount("", d, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("remount %s read-only: %w", d, err)
		}
	}
	return nil
}

// ensureTarget follows path's symlinks; when the final target lies in one of
// the fresh tmpfs dirs and does not exist, it creates it as an empty file (and
// its directories) so that a file can be mounted over it.
func ensureTarget(path string, fresh []string) error {
	p := path
	for i := 0; i < 40; i++ {
		st, err := os.Lstat(p)
		if err != nil {
			break
		}
		if st.Mode()&os.ModeSymlink == 0 {
			return nil // exists
		}
		l, err := os.Readlink(p)
		if err != nil {
			return fmt.Errorf("read link %s: %w", p, err)
		}
		if !filepath.IsAbs(l) {
			l = filepath.Join(filepath.Dir(p), l)
		}
		p = filepath.Clean(l)
	}
	for _, d := range fresh {
		if !within(p, d) || p == d {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("create %s for %s: %w", filepath.Dir(p), path, err)
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return fmt.Errorf("create %s for %s: %w", p, path, err)
		}
		return f.Close()
	}
	return nil // left to the mount, which names the missing target
}
