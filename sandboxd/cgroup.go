package sandboxd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Cgroups, v1 and v2: the lifecycle of a sandbox's cgroup (the manager that
// prepares the parent, create, membership, remove). Limits and counters are in
// cgroup_limits.go, killing the tree and waiting for it to be gone in
// cgroup_kill.go.
//
// v2: the child is born in the cgroup (clone3 CLONE_INTO_CGROUP via
// SysProcAttr.CgroupFD).
//
// v1: the init process is moved in while it builds the filesystem view (the
// first migration after a quiet spell waits for an RCU grace period, 5-15 ms) and
// starts the command only after the move is checked, so every process of the
// command is born inside.
//
// Missing controllers. The limit controllers are memory, cpu, pids and io (v1
// blkio). One that a limit needs and the hierarchy lacks is an error naming it (at
// New for memory, cpu and pids; at Run for io when Limits.IO is set), unless
// Config.AllowMissingControllers lists it: then the limit is not enforced, New logs
// that once and every run logs it again as a weakened limit. Memory is never
// silently unlimited. On a v1-hybrid host the cgroup2 mount (/sys/fs/cgroup/unified)
// has the core files (cgroup.procs, cgroup.kill, cgroup.events, cgroup.freeze) but
// the limit controllers are bound to v1, so v2 mode there only runs with all of them
// allowed missing; the tests use exactly that to exercise the v2 process paths.

var v1Controllers = []string{"memory", "cpu", "cpuacct", "pids", "freezer", "blkio"}

// v2Controllers are enabled in the parent's subtree_control when available.
var v2Controllers = []string{"memory", "cpu", "pids", "io"}

// LimitControllers are the names Config.AllowMissingControllers accepts.
var LimitControllers = []string{"memory", "cpu", "pids", "io"}

// v1Name maps a limit controller to its v1 hierarchy.
func v1Name(c string) string {
	if c == "io" {
		return "blkio"
	}
	return c
}

type cgroupManager struct {
	// none: no cgroup at all (a rootless executor without a delegated
	// subtree, rootless.go). Every cgroup of it has no directory: limits
	// are rlimits, the tree dies with init's PID namespace, usage is 0.
	none   bool
	v2     bool
	root   string
	dirs   map[string]string // controller (v1) or "" (v2) -> parent dir
	parent string
	// have holds the limit controllers (memory, cpu, pids, io) present for the
	// per-sandbox cgroups; allowMissing those that may be absent.
	have         map[string]bool
	allowMissing map[string]bool
	// swapActive: some swap device is on (/proc/swaps), so memory without a swap
	// limit could escape into it.
	swapActive bool
	// write writes one control file; writeFile outside tests.
	write func(path, v string) error
}

type cgroup struct {
	m    *cgroupManager
	v2   bool
	name string
	dirs map[string]string // controller or "" -> cgroup dir
	uniq []string          // distinct dirs, for mkdir/rmdir
	// jobs is, on v1 with a pids controller, the child of the pids cgroup
	// every job's process is born in (init moves the job's thread there
	// before it forks): the sandbox's pids limit binds there, and init, in
	// the parent, keeps initPidsOverhead tasks no job can take. "" otherwise.
	jobs string
}

// jobsCgroup names the jobs child (v1 pids hierarchy).
const jobsCgroup = "jobs"

func newCgroupManager(root string, mode CgroupMode, parent string, allowMissing []string) (*cgroupManager, error) {
	m := &cgroupManager{root: root, dirs: map[string]string{}, parent: parent, have: map[string]bool{},
		allowMissing: map[string]bool{}, swapActive: swapOn(), write: writeFile}
	for _, c := range allowMissing {
		m.allowMissing[c] = true
	}
	switch mode {
	case CgroupV2:
		m.v2 = true
	case CgroupV1:
	default:
		var st unix.Statfs_t
		if err := unix.Statfs(root, &st); err != nil {
			return nil, fmt.Errorf("sandboxd: cgroup_root %s: %w", root, err)
		}
		m.v2 = st.Type == unix.CGROUP2_SUPER_MAGIC
	}
	if m.v2 {
		return m, m.prepareV2()
	}
	return m, m.prepareV1()
}

// prepareV2 creates the parent in the unified hierarchy and enables the limit
// controllers the root offers in its subtree.
func (m *cgroupManager) prepareV2() error {
	avail, err := os.ReadFile(filepath.Join(m.root, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("sandboxd: cgroup v2 at %s: %w", m.root, err)
	}
	dir := filepath.Join(m.root, m.parent)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sandboxd: create cgroup parent: %w", err)
	}
	have := strings.Fields(string(avail))
	var enable []string
	for _, c := range v2Controllers {
		for _, h := range have {
			if h == c {
				enable = append(enable, "+"+c)
				m.have[c] = true
			}
		}
	}
	if len(enable) > 0 {
		line := strings.Join(enable, " ")
		for _, d := range []string{m.root, dir} {
			if err := m.write(filepath.Join(d, "cgroup.subtree_control"), line); err != nil {
				return fmt.Errorf("sandboxd: enable cgroup controllers %q in %s: %w", line, d, err)
			}
		}
	}
	m.dirs[""] = dir
	return m.checkMissing(fmt.Sprintf("cgroup v2 at %s (cgroup.controllers: %q)", m.root, strings.TrimSpace(string(avail))))
}

// prepareV1 creates the parent in each controller's hierarchy.
func (m *cgroupManager) prepareV1() error {
	for _, c := range v1Controllers {
		mnt := filepath.Join(m.root, c)
		real, err := filepath.EvalSymlinks(mnt)
		if err != nil {
			switch c {
			case "blkio", "memory", "cpu", "pids":
				continue // checkMissing decides
			}
			return fmt.Errorf("sandboxd: cgroup v1 controller %s not mounted at %s: %w", c, mnt, err)
		}
		dir := filepath.Join(real, m.parent)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("sandboxd: create cgroup parent %s: %w", dir, err)
		}
		m.dirs[c] = dir
	}
	for _, c := range LimitControllers {
		_, m.have[c] = m.dirs[v1Name(c)]
	}
	return m.checkMissing("cgroup v1 at " + m.root)
}

// checkMissing fails for a missing memory, cpu or pids controller that is not
// allowed missing. io is checked per run, only when a limit needs it.
func (m *cgroupManager) checkMissing(where string) error {
	for _, c := range []string{"memory", "cpu", "pids"} {
		if !m.have[c] && !m.allowMissing[c] {
			hint := ""
			if m.v2 {
				hint = " (on a v1-hybrid host it is bound to a v1 hierarchy: use cgroup_mode v1)"
			}
			return fmt.Errorf("sandboxd: %s has no %s controller%s; list %q in allow_missing_controllers only to run without the %s limit",
				where, c, hint, c, c)
		}
	}
	return nil
}

// missing returns the limit controllers that are absent (and so allowed missing).
func (m *cgroupManager) missing() []string {
	var out []string
	for _, c := range LimitControllers {
		if !m.have[c] {
			out = append(out, c)
		}
	}
	return out
}

// swapOn reports whether /proc/swaps lists a swap device. Unreadable counts as on.
func swapOn() bool {
	b, err := os.ReadFile("/proc/swaps")
	if err != nil {
		return true
	}
	return len(strings.Split(strings.TrimSpace(string(b)), "\n")) > 1
}

func (m *cgroupManager) create(name string) (*cgroup, error) {
	cg := m.open(name)
	dirs := cg.uniq
	if cg.jobs != "" {
		dirs = append(append([]string{}, dirs...), cg.jobs)
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			cg.remove()
			return nil, fmt.Errorf("sandboxd: create cgroup %s: %w", d, err)
		}
	}
	return cg, nil
}

// list returns the names of the per-sandbox cgroups under the parent.
func (m *cgroupManager) list() []string {
	seen := map[string]bool{}
	var names []string
	for _, p := range m.dirs {
		ents, _ := os.ReadDir(p)
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), "airlock-") && !seen[e.Name()] {
				seen[e.Name()] = true
				names = append(names, e.Name())
			}
		}
	}
	return names
}

// open returns the handle of the per-sandbox cgroup name (existing or not yet
// made): its directory in every hierarchy, each distinct one listed once.
func (m *cgroupManager) open(name string) *cgroup {
	cg := &cgroup{m: m, v2: m.v2, name: name, dirs: map[string]string{}}
	seen := map[string]bool{}
	for c, p := range m.dirs {
		d := filepath.Join(p, name)
		cg.dirs[c] = d
		if !seen[d] {
			seen[d] = true
			cg.uniq = append(cg.uniq, d)
		}
	}
	if d, ok := cg.dirs["pids"]; ok && !m.v2 {
		cg.jobs = filepath.Join(d, jobsCgroup)
	}
	return cg
}

// addProc moves a whole process into the cgroup (v1; v2 children are born in it).
func (cg *cgroup) addProc(pid int) error {
	for _, d := range cg.uniq {
		if err := cg.m.write(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("sandboxd: move pid %d into %s: %w", pid, d, err)
		}
	}
	return nil
}

// openFD opens the v2 cgroup directory for SysProcAttr.CgroupFD.
func (cg *cgroup) openFD() (*os.File, error) {
	f, err := os.OpenFile(cg.dirs[""], unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandboxd: open cgroup dir: %w", err)
	}
	return f, nil
}

// procs lists every task group in one cgroup directory.
func procs(dir string) ([]int, error) {
	b, err := readSmall(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out, nil
}

// holds checks that pid is a member of the cgroup in every hierarchy.
func (cg *cgroup) holds(pid int) error {
	for _, d := range cg.uniq {
		ps, err := procs(d)
		if err != nil {
			return fmt.Errorf("sandboxd: read %s/cgroup.procs: %w", d, err)
		}
		found := false
		for _, p := range ps {
			found = found || p == pid
		}
		if !found {
			return fmt.Errorf("sandboxd: init (pid %d) is not in cgroup %s: its limits would not apply", pid, d)
		}
	}
	return nil
}

// pids lists every task group in the cgroup: the union over its hierarchies (v1
// moves a process into each separately) and the v1 jobs child.
func (cg *cgroup) pids() ([]int, error) {
	seen := map[int]bool{}
	var out []int
	var errs []error
	dirs := cg.uniq
	if cg.jobs != "" {
		dirs = append(append([]string{}, dirs...), cg.jobs)
	}
	for _, d := range dirs {
		ps, err := procs(d)
		if d == cg.jobs && errors.Is(err, os.ErrNotExist) {
			err = nil // a stale cgroup made before the jobs child
		}
		if err != nil {
			errs = append(errs, err)
		}
		for _, p := range ps {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out, errors.Join(errs...)
}

// remove deletes the cgroup directories (the jobs child first), waiting
// briefly for exiting tasks.
func (cg *cgroup) remove() error {
	var errs []error
	dirs := cg.uniq
	if cg.jobs != "" {
		dirs = append([]string{cg.jobs}, dirs...)
	}
	for _, d := range dirs {
		var err error
		for i := 0; i < 200; i++ {
			err = unix.Rmdir(d)
			if err == nil || errors.Is(err, unix.ENOENT) {
				err = nil
				break
			}
			if !errors.Is(err, unix.EBUSY) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("sandboxd: remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// openJobsTasks opens the jobs child's tasks file for init (nil without one).
func (cg *cgroup) openJobsTasks() (*os.File, error) {
	if cg.jobs == "" {
		return nil, nil
	}
	f, err := os.OpenFile(filepath.Join(cg.jobs, "tasks"), os.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandboxd: open the jobs cgroup: %w", err)
	}
	return f, nil
}

// Control files are read and written with plain system calls: through an
// *os.File each one is also added to and removed from the runtime's poller
// (cgroup files can be polled), two more system calls for a few bytes, and
// a sandbox's life reads and writes dozens.

// writeFile writes v to the control file path in one write.
func writeFile(path, v string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	n, err := unix.Write(fd, []byte(v))
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		return &os.PathError{Op: "close", Path: path, Err: cerr}
	}
	if err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	if n != len(v) {
		return &os.PathError{Op: "write", Path: path, Err: io.ErrShortWrite}
	}
	return nil
}

// readSmall reads the whole control file path.
func readSmall(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

func readInt(path string) (int64, error) {
	b, err := readSmall(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// readKeyed reads "key value" lines; a missing key is 0.
func readKeyed(path, key string) (int64, error) {
	b, err := readSmall(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimRight(line, "\n"), " ")
		if ok && k == key {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, nil
}
