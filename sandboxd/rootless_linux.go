package sandboxd

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The rootless init's side (rootless.go): the island, the wait for id maps
// newuidmap writes, the host view, devices and workspace cloned without
// idmapping.

// mapWait bounds how long init waits for its id maps.
const mapWait = 10 * time.Second

// awaitMaps makes a rootless init whose maps the executor writes after the
// clone (newuidmap) root of its user namespace: it waits for the maps, then
// executes itself again, since the capabilities of an execve are decided by
// the uid at the time (an unmapped process has none). It returns at once
// when the maps are there (root mode, or maps written before the execve).
func awaitMaps() error {
	deadline := time.Now().Add(mapWait)
	for {
		b, err := os.ReadFile("/proc/self/uid_map")
		if err != nil {
			return fmt.Errorf("read uid_map: %w", err)
		}
		if len(strings.TrimSpace(string(b))) > 0 {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("no uid map written within " + mapWait.String())
		}
		time.Sleep(200 * time.Microsecond)
	}
	if unix.Geteuid() != 0 {
		return nil // not mapped to root: a root-mode init has uid 0 anyway
	}
	var hdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if data[0].Effective&(1<<unix.CAP_SYS_ADMIN) != 0 {
		return nil
	}
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return err
	}
	return unix.Exec("/proc/self/exe", append([]string{exe}, os.Args[1:]...), os.Environ())
}

// buildIsland runs the island hook of a rootless init whose config has an
// island, and returns the files as fds for the ready reply.
func (s *initServer) buildIsland() ([]int, error) {
	if len(s.cfg.Island) == 0 {
		return nil, nil
	}
	if s.hooks.Island == nil {
		return nil, errors.New("this init binary cannot build a network island (InitMainWith without InitHooks.Island)")
	}
	files, err := s.hooks.Island(s.cfg.Island)
	if err != nil {
		return nil, fmt.Errorf("island: %w", err)
	}
	fds := make([]int, 0, len(files))
	for _, f := range files {
		fd, err := unix.Dup(int(f.Fd()))
		f.Close()
		if err != nil {
			closeFDs(fds)
			return nil, fmt.Errorf("island: dup: %w", err)
		}
		fds = append(fds, fd)
	}
	if len(fds) != islandFDs {
		closeFDs(fds)
		return nil, fmt.Errorf("island: the hook returned %d files, want %d", len(fds), islandFDs)
	}
	return fds, nil
}

// rootlessDevices are the host's device nodes a rootless sandbox's /dev
// gets by bind mount (a user namespace may not mknod).
var rootlessDevices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// cloneRootless clones what a rootless init needs from the host before it
// leaves the host's root: the root, recursively, read-only, nosuid and nodev
// (its locked submounts cannot be left out one by one), the device nodes,
// and the workspace (read-write, nosuid, nodev).
func (f *fsState) cloneRootless(src string) (*hostView, error) {
	root, err := cloneTree(src, true, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return nil, fmt.Errorf("clone %s: %w", src, err)
	}
	f.devs = map[string]int{}
	for _, d := range rootlessDevices {
		fd, err := cloneTree("/dev/"+d, false, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC)
		if err != nil {
			unix.Close(root)
			f.closeRootless()
			return nil, fmt.Errorf("clone /dev/%s: %w", d, err)
		}
		f.devs[d] = fd
	}
	if f.cfg.Workspace != "" {
		if f.wsClone, err = cloneTree(f.cfg.Workspace, true, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV); err != nil {
			unix.Close(root)
			f.closeRootless()
			return nil, fmt.Errorf("clone workspace %s: %w", f.cfg.Workspace, err)
		}
	}
	return &hostView{root: root}, nil
}

// closeRootless closes the device clones that were not mounted.
func (f *fsState) closeRootless() {
	for d, fd := range f.devs {
		unix.Close(fd)
		delete(f.devs, d)
	}
}

// mountDevice puts the cloned host device d at p (an empty file).
func (f *fsState) mountDevice(d, p string) error {
	fd, ok := f.devs[d]
	if !ok {
		return fmt.Errorf("no clone of /dev/%s", d)
	}
	if err := os.WriteFile(p, nil, 0o666); err != nil {
		return err
	}
	err := unix.MoveMount(fd, "", unix.AT_FDCWD, p, unix.MOVE_MOUNT_F_EMPTY_PATH)
	unix.Close(fd)
	delete(f.devs, d)
	if err != nil {
		return fmt.Errorf("mount /dev/%s: %w", d, err)
	}
	return nil
}

// hideHome covers each of the user's directories with an empty tmpfs,
// keeping the path to the workspace (made as empty directories, covered by
// the workspace at start), then seals it read-only.
func (f *fsState) hideHome() error {
	for _, h := range f.cfg.HideHome {
		if st, err := os.Stat(h); err != nil || !st.IsDir() {
			continue
		}
		if err := unix.Mount("airlock-mask", h, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=64k,nr_inodes=256,mode=755"); err != nil {
			return fmt.Errorf("hide %s: %w", h, err)
		}
		if ws := f.cfg.Workspace; ws != "" && within(ws, h) && ws != h {
			if err := os.MkdirAll(ws, 0o755); err != nil {
				return fmt.Errorf("hide %s: keep the workspace's path: %w", h, err)
			}
		}
		if err := unix.MountSetattr(unix.AT_FDCWD, h, 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			return fmt.Errorf("hide %s: seal: %w", h, err)
		}
	}
	return nil
}

// rootlessWorkspaceFD is the workspace tree a rootless init cloned, handed
// over once to attachWorkspace.
func (f *fsState) rootlessWorkspaceFD() (int, error) {
	if f.wsClone < 0 {
		return -1, errors.New("no workspace was cloned at config")
	}
	fd := f.wsClone
	f.wsClone = -1
	return fd, nil
}
