package sandboxd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The user's workspace, made by the executor in its own mount namespace at
// Start: the host directory is opened once, checked against the hidden paths
// by what it resolved to (so a symlink swapped in after the check changes
// nothing), cloned whole (open_tree OPEN_TREE_CLONE|AT_RECURSIVE from that
// fd), made nosuid, nodev, private and idmapped to the sandbox uid while
// still detached, and sent to init, which attaches it with move_mount.

// workspaceTree is a detached workspace tree ready for init, and the hidden
// paths to mask below its target.
type workspaceTree struct {
	fd    int
	masks []string
}

// openWorkspace makes the tree of host directory path for a sandbox running
// as uid, to be attached at target. hostHidden are the hidden host paths
// (and what they resolve to).
func openWorkspace(path, target string, uid int, hostHidden []string, idmaps *idmapCache) (*workspaceTree, error) {
	dir, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandboxd: workspace %s: %w", path, err)
	}
	defer unix.Close(dir)
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(dir))
	if err != nil {
		return nil, fmt.Errorf("sandboxd: workspace %s: resolve: %w", path, err)
	}
	// The workspace is a second view of host files: it must not be or lie
	// inside a hidden path, and a hidden path inside it is hidden at its place
	// under the target too.
	var masks []string
	for _, h := range hostHidden {
		if within(real, h) {
			return nil, fmt.Errorf("sandboxd: workspace %s is inside hidden path %s", path, h)
		}
		if within(h, real) {
			rel, _ := filepath.Rel(real, h)
			masks = append(masks, filepath.Join(target, rel))
		}
	}
	fd, err := unix.OpenTree(dir, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) {
			return nil, fmt.Errorf("sandboxd: workspace %s: open_tree: kernel too old (need Linux >= 5.12): %w", path, err)
		}
		return nil, fmt.Errorf("sandboxd: workspace %s: open_tree: %w", path, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Propagation: unix.MS_PRIVATE}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sandboxd: workspace %s: mount_setattr: %w", path, err)
	}
	var owner unix.Stat_t
	if err := unix.Fstat(fd, &owner); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sandboxd: workspace %s: stat: %w", path, err)
	}
	if err := idmapWorkspace(fd, real, int(owner.Uid), int(owner.Gid), uid, uid, idmaps); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sandboxd: %w", err)
	}
	return &workspaceTree{fd: fd, masks: masks}, nil
}

// idmapWorkspace makes the detached workspace tree fd an idmapped mount in which
// files owned by ownerUID/ownerGID on disk appear as uid/gid, and files uid/gid
// creates land on disk as ownerUID/ownerGID. Other on-disk owners appear as the
// overflow id (nobody) and cannot be written through ownership. It runs in the
// executor, before the tree is sent to init and attached (an attached mount
// cannot be idmapped).
func idmapWorkspace(treeFD int, path string, ownerUID, ownerGID, uid, gid int, idmaps *idmapCache) error {
	var setErr error
	err := idmaps.with([4]int{ownerUID, ownerGID, uid, gid}, func(nsFD int) {
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(nsFD)}
		setErr = unix.MountSetattr(treeFD, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr)
	})
	if err != nil {
		return fmt.Errorf("workspace %s: user namespace for the idmapped mount: %w", path, err)
	}
	if err := setErr; err != nil {
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

// idmapCache keeps the user namespaces workspaces are idmapped through, by
// (owner uid, owner gid, sandbox uid, sandbox gid): making one costs a helper
// process (3-5 ms, more from a large executor, which cannot vfork it), and a
// namespace without processes is only a mapping, the same for every sandbox
// that gets the same uid. At most idmapCacheSize are kept (least recently
// used goes first).
//
// A sandbox uid is new to the cache nearly every time (the pool hands the
// uids out in turn), so the pool's refill makes each new slot's entry ahead
// (warm), for the owner whose workspace was bound last: the next create of
// that owner finds it, off the create's path.
type idmapCache struct {
	mu     sync.Mutex
	max    int
	byKey  map[[4]int]*idmapEntry
	tick   uint64
	owner  [2]int // the owner uid, gid of the last workspace bound
	seen   bool   // owner is set
	closed bool
}

type idmapEntry struct {
	f    *os.File
	used uint64
}

const idmapCacheSize = 256

func newIdmapCache() *idmapCache {
	return &idmapCache{max: idmapCacheSize, byKey: map[[4]int]*idmapEntry{}}
}

// with runs fn with the namespace for key, made when missing. fn runs under
// the cache's lock, so the fd is never closed (evicted) while in use.
func (c *idmapCache) with(key [4]int, fn func(nsFD int)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tick++
	c.owner, c.seen = [2]int{key[0], key[1]}, true
	e, ok := c.byKey[key]
	if !ok {
		fd, err := idmapUserns(key[0], key[1], key[2], key[3])
		if err != nil {
			return err
		}
		e = c.addLocked(key, fd)
	}
	e.used = c.tick
	fn(int(e.f.Fd()))
	return nil
}

// warm makes the entry of sandbox uid (gid = uid) for the owner of the last
// workspace bound, when there is one and the entry is missing. The helper
// process runs outside the lock: a create's lookup does not wait for it.
// A failure is left for the create, which reports it.
func (c *idmapCache) warm(uid int) {
	c.mu.Lock()
	key := [4]int{c.owner[0], c.owner[1], uid, uid}
	_, have := c.byKey[key]
	skip := !c.seen || have || c.closed
	c.mu.Unlock()
	if skip {
		return
	}
	fd, err := idmapUserns(key[0], key[1], key[2], key[3])
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, have := c.byKey[key]; have || c.closed {
		unix.Close(fd)
		return
	}
	c.tick++
	c.addLocked(key, fd).used = c.tick
}

// addLocked adds the namespace fd under key, evicting the least recently
// used entry when the cache is full.
func (c *idmapCache) addLocked(key [4]int, fd int) *idmapEntry {
	if len(c.byKey) >= c.max {
		var oldest [4]int
		least := ^uint64(0)
		for k, e := range c.byKey {
			if e.used < least {
				oldest, least = k, e.used
			}
		}
		c.byKey[oldest].f.Close()
		delete(c.byKey, oldest)
	}
	e := &idmapEntry{f: os.NewFile(uintptr(fd), "airlock-idmap-userns")}
	c.byKey[key] = e
	return e
}

func (c *idmapCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for k, e := range c.byKey {
		e.f.Close()
		delete(c.byKey, k)
	}
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
