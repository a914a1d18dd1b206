package sandboxd

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/audit"
)

// Rootless sandboxes (Config.Rootless). An unprivileged executor cannot
// join a network namespace it did not make, make cgroups, clone mounts or
// switch uids, so init is cloned into a user namespace of its own
// (CLONE_NEWUSER with the mount, PID, UTS, IPC and network namespaces),
// where it is root with every capability over its own namespaces and none
// over the host's:
//
//   - The user's uid and gid map to 0 inside, so init (and with it the
//     files the sandbox writes in the workspace) are the user's on the host.
//     With a subordinate range (/etc/subuid, /etc/subgid, mapped by
//     newuidmap and newgidmap) the sandbox's processes run as
//     RootlessSandboxUID inside, the range's first id outside: another uid
//     than the gateway's, which cannot signal, ptrace or read it. Without a
//     range they run as 0 inside, the user outside, with no capability at all
//     (bounding set emptied, no_new_privs, seccomp refusing ptrace, setns,
//     unshare, mount), in a PID namespace where the gateway has no pid and
//     with a /proc of their own; the gateway is not dumpable.
//   - The network namespace is born with init: the island hook
//     (InitHooks.Island, netns.BuildIsland in the airlock binary) makes it
//     the island from inside and returns the listeners' files, which ride
//     init's ready reply to the executor (PrepareSpec.OnIsland).
//   - The host view is a recursive read-only clone of the root (nosuid,
//     nodev), not idmapped (an idmapped mount needs root): the host's unix
//     sockets in the trees the sandbox sees are only as reachable as their
//     modes let the sandbox's uid; /run, /var/run, /tmp, /var/tmp, $HOME's
//     parent and the hidden paths are covered as in root mode, and the
//     invoking user's home and runtime directory are hidden too.
//   - Devices are the host's /dev/null, zero, full, random, urandom and tty
//     bound into the sandbox's /dev (a user namespace may not mknod).
//   - No cgroup: limits are rlimits (RLIMIT_NPROC counts the user's tasks
//     when the sandbox runs as the user: the limit is the user's count at
//     start plus Limits.Pids), the timeout kills init and with it the PID
//     namespace, and usage counters are zero. Memory, CPU and I/O are not
//     bounded.
type Rootless struct {
	// UID and GID are the invoking user's: 0 inside maps to them.
	UID, GID int
	// SubUID and SubGID are subordinate ranges of the user's; the sandbox's
	// processes run as their first id. Count 0: none (they run as the user).
	SubUID, SubGID IDRange
	// HideHome lists the user's directories the sandbox must not see
	// (their home and $XDG_RUNTIME_DIR: a same-uid sandbox could read them).
	HideHome []string
	// Cgroup is a cgroup v2 directory delegated to the user (their systemd
	// user service, DelegatedCgroup): sandboxes get
	// Config.CgroupParent/airlock-<id> below it with their limits, as root
	// mode's do; controllers it lacks leave their limits to rlimits (named
	// in AllowMissingControllers by the caller). Empty: no cgroup.
	Cgroup string
}

// IDRange is a subordinate id range: Count ids from Start.
type IDRange struct{ Start, Count int }

// RootlessSandboxUID is the sandbox's uid (and gid) inside its user
// namespace when a subordinate range is mapped.
const RootlessSandboxUID = 1000

// subordinate reports whether the sandbox runs as a subordinate id.
func (r *Rootless) subordinate() bool { return r.SubUID.Count > 0 && r.SubGID.Count > 0 }

// sandboxUID is the sandbox's uid inside its user namespace.
func (r *Rootless) sandboxUID() int {
	if r.subordinate() {
		return RootlessSandboxUID
	}
	return 0
}

// Mode names how the sandbox's processes are kept from the gateway, for
// airlock run's one line.
func (r *Rootless) Mode() string {
	if r.subordinate() {
		return fmt.Sprintf("sandbox uid %d (subordinate, from /etc/subuid)", r.SubUID.Start)
	}
	return "sandbox runs as you without capabilities (no /etc/subuid range)"
}

// cloneFlags are init's namespaces: its own user and network namespace too.
func (r *Rootless) cloneFlags() uintptr {
	return unix.CLONE_NEWUSER | unix.CLONE_NEWNET | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWCGROUP
}

// writeMaps maps 0 to the user in pid's user namespace, and with a
// subordinate range RootlessSandboxUID to its first id (through the setuid
// helpers newuidmap and newgidmap). The maps are written after init's
// execve, never by the clone (SysProcAttr.UidMappings): the gateway is not
// dumpable, so a child it forked has /proc files only root may write until
// it executes. The uid map comes last: init waits for it and executes itself again (awaitMaps).
func (r *Rootless) writeMaps(pid int) error {
	p := strconv.Itoa(pid)
	if !r.subordinate() {
		for _, w := range [][2]string{{"setgroups", "deny"}, {"gid_map", "0 " + strconv.Itoa(r.GID) + " 1"},
			{"uid_map", "0 " + strconv.Itoa(r.UID) + " 1"}} {
			if err := os.WriteFile("/proc/"+p+"/"+w[0], []byte(w[1]), 0); err != nil {
				return fmt.Errorf("sandboxd: init's %s: %w", w[0], err)
			}
		}
		return nil
	}
	for _, m := range []struct {
		bin        string
		own, first int
	}{{"newgidmap", r.GID, r.SubGID.Start}, {"newuidmap", r.UID, r.SubUID.Start}} {
		out, err := exec.Command(m.bin, p, "0", strconv.Itoa(m.own), "1",
			strconv.Itoa(RootlessSandboxUID), strconv.Itoa(m.first), "1").CombinedOutput()
		if err != nil {
			return fmt.Errorf("sandboxd: %s: %w: %s", m.bin, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// newRootless is New for a rootless executor: no cgroup, no host-view user
// namespace, slots that are ids and lock files only.
func newRootless(cfg Config, log audit.Logger, lg *slog.Logger) (*Executor, error) {
	if r := cfg.Rootless; r.UID == 0 && !r.subordinate() {
		// 0 inside would be the host's root: fail closed.
		return nil, errors.New("sandboxd: rootless: uid 0 would map the sandbox to the host's root; root runs sandboxes with a uid of their own (leave Rootless unset)")
	}
	cgm := &cgroupManager{none: true, dirs: map[string]string{}, have: map[string]bool{}, allowMissing: map[string]bool{}}
	if r := cfg.Rootless; r.Cgroup != "" {
		var err error
		if cgm, err = newCgroupManager(r.Cgroup, CgroupV2, cfg.CgroupParent, cfg.AllowMissingControllers); err != nil {
			return nil, fmt.Errorf("%w (the delegated cgroup %s)", err, r.Cgroup)
		}
	}
	p, err := newPool(&cfg, cgm)
	if err != nil {
		return nil, err
	}
	none := &usernsFuture{done: make(chan struct{})}
	close(none.done)
	return &Executor{cfg: cfg, cgm: cgm, pool: p, log: log, lg: lg, rootNS: none, idmaps: newIdmapCache()}, nil
}

// rootlessConfig fills what a rootless init needs in icfg; nothing in root
// mode.
func (s *Sandbox) rootlessConfig(icfg *initConfig) error {
	r := s.e.cfg.Rootless
	if r == nil {
		return nil
	}
	icfg.Rootless = true
	icfg.Island = s.spec.Island
	icfg.HideHome = r.HideHome
	if s.rootlessWS != "" {
		real, err := filepath.EvalSymlinks(s.rootlessWS)
		if err != nil {
			return fmt.Errorf("sandboxd: workspace %s: %w", s.rootlessWS, err)
		}
		icfg.Workspace = real
	}
	return nil
}

// rootlessWorkspace checks the workspace a rootless sandbox starts with (the
// one its init cloned) and returns the hidden paths to mask below target.
func (s *Sandbox) rootlessWorkspace(path, target string) ([]string, error) {
	if s.rootlessWS != path {
		return nil, errors.New("sandboxd: a rootless sandbox's workspace is given when it is created (Create, Run), not at a later Start")
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, fmt.Errorf("sandboxd: workspace %s: %w", path, err)
	}
	var masks []string
	for _, h := range append(append([]string{}, s.hostHidden...), s.e.cfg.Rootless.HideHome...) {
		if within(real, h) && !isHome(h, s.e.cfg.Rootless.HideHome) {
			return nil, fmt.Errorf("sandboxd: workspace %s is inside hidden path %s", path, h)
		}
		if within(h, real) && h != real {
			rel, _ := filepath.Rel(real, h)
			masks = append(masks, filepath.Join(target, rel))
		}
	}
	return masks, nil
}

// isHome reports whether h is one of the user's hidden directories, inside
// which a workspace may lie (it is mounted over the mask).
func isHome(h string, homes []string) bool {
	for _, d := range homes {
		if h == d {
			return true
		}
	}
	return false
}

// takeIsland hands the island's files from init's ready reply to OnIsland.
func (s *Sandbox) takeIsland(fds []int) error {
	if s.spec.OnIsland == nil {
		closeFDs(fds)
		if len(fds) > 0 {
			return errors.New("sandboxd: init sent island files nobody asked for")
		}
		return nil
	}
	if len(fds) != islandFDs {
		closeFDs(fds)
		return fmt.Errorf("sandboxd: init's island: got %d files, want %d", len(fds), islandFDs)
	}
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		unix.CloseOnExec(fd)
		files[i] = os.NewFile(uintptr(fd), "airlock-island")
	}
	return s.spec.OnIsland(files)
}

// userTasks counts the tasks (threads) uid has on the host: RLIMIT_NPROC
// counts them all, so a sandbox running as the user gets its pids limit
// above them.
func userTasks(uid int) int64 {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Stat("/proc/"+e.Name(), &st) != nil || int(st.Uid) != uid {
			continue
		}
		if ts, err := os.ReadDir("/proc/" + e.Name() + "/task"); err == nil {
			n += int64(len(ts))
		}
	}
	return n
}

// UsernsError says this host does not let an unprivileged user make a user
// namespace, and what to change.
type UsernsError struct {
	Setting string // the sysctl
	Value   string // its value here
	Fix     string // the command that changes it
}

func (e *UsernsError) Error() string {
	return fmt.Sprintf("unprivileged user namespaces are disabled on this host (%s = %s): %s, or run airlock as root",
		e.Setting, e.Value, e.Fix)
}

// CheckUserNamespaces reports whether an unprivileged user may make the user
// namespace a rootless sandbox needs: Debian's and Ubuntu's
// kernel.unprivileged_userns_clone, user.max_user_namespaces, and
// Ubuntu's AppArmor restriction (kernel.apparmor_restrict_unprivileged_userns),
// each with the sysctl that lifts it. procSys is /proc/sys.
func CheckUserNamespaces(procSys string) error {
	for _, c := range []struct {
		key, bad, fix string
	}{
		{"kernel/unprivileged_userns_clone", "0", "sudo sysctl -w kernel.unprivileged_userns_clone=1"},
		{"user/max_user_namespaces", "0", "sudo sysctl -w user.max_user_namespaces=15000"},
		{"kernel/apparmor_restrict_unprivileged_userns", "1",
			"sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (or an AppArmor profile granting airlock `userns,`)"},
	} {
		b, err := os.ReadFile(filepath.Join(procSys, c.key))
		if err != nil {
			continue // the kernel has no such setting
		}
		if v := strings.TrimSpace(string(b)); v == c.bad {
			return &UsernsError{Setting: strings.ReplaceAll(c.key, "/", "."), Value: v, Fix: c.fix}
		}
	}
	return nil
}

// LookupSubIDs returns the user's first subordinate uid and gid ranges from
// the subuid and subgid files (/etc/subuid, /etc/subgid), matched by name or
// uid; a zero IDRange when the user has none.
func LookupSubIDs(subuid, subgid string, name string, uid int) (IDRange, IDRange) {
	find := func(path string) IDRange {
		f, err := os.Open(path)
		if err != nil {
			return IDRange{}
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			parts := strings.Split(strings.TrimSpace(sc.Text()), ":")
			if len(parts) != 3 || (parts[0] != name && parts[0] != strconv.Itoa(uid)) {
				continue
			}
			start, err1 := strconv.Atoi(parts[1])
			count, err2 := strconv.Atoi(parts[2])
			if err1 == nil && err2 == nil && start > 0 && count > 0 {
				return IDRange{Start: start, Count: count}
			}
		}
		return IDRange{}
	}
	return find(subuid), find(subgid)
}

// DelegatedCgroup finds the cgroup v2 subtree delegated to this process's
// user: the highest ancestor of its own cgroup (selfCgroup, the content of
// /proc/self/cgroup) whose cgroup.procs and subtree_control it may write,
// under the cgroup2 mount mnt. Under systemd that is the user's
// user@UID.service. "" when there is none (cgroup v1 only, or nothing
// writable).
func DelegatedCgroup(mnt, selfCgroup string) string {
	var own string
	for _, line := range strings.Split(strings.TrimSpace(selfCgroup), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			own = p
		}
	}
	if own == "" || mnt == "" {
		return ""
	}
	found := ""
	for dir := filepath.Clean(own); dir != "/" && dir != "."; dir = filepath.Dir(dir) {
		full := filepath.Join(mnt, dir)
		if unix.Access(filepath.Join(full, "cgroup.procs"), unix.W_OK) != nil ||
			unix.Access(filepath.Join(full, "cgroup.subtree_control"), unix.W_OK) != nil ||
			unix.Access(full, unix.W_OK) != nil {
			break
		}
		found = full
	}
	return found
}

// Cgroup2Mount returns the cgroup2 mount point from a mountinfo text
// (/proc/self/mountinfo): /sys/fs/cgroup on a unified host,
// /sys/fs/cgroup/unified on a hybrid one; "" for none.
func Cgroup2Mount(mountinfo string) string {
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		if f := strings.Fields(pre); len(f) >= 5 {
			return unescapeMountinfo(f[4])
		}
	}
	return ""
}
