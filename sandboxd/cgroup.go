package sandboxd

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Cgroups, v1 and v2.
//
// v2: memory.max with memory.swap.max=0, cpu.max, pids.max, io.max; the child is
// born in the cgroup (clone3 CLONE_INTO_CGROUP via SysProcAttr.CgroupFD); the tree
// dies through cgroup.kill (freeze, kill, thaw on kernels before 5.14); emptiness is
// cgroup.events "populated 0".
//
// v1: memory.limit_in_bytes plus memory.memsw.limit_in_bytes at the same value, so
// swap is no escape; where the kernel lacks memsw (swap accounting off) swappiness is
// set to 0, which keeps anonymous memory out of swap except under global pressure,
// and the log says so. cpu.cfs_quota_us, pids.max, blkio.throttle.*. There is no v1
// io weight file on kernels built without CFQ/BFQ weights, so only throttles are
// offered. The init process is moved in while it builds the filesystem view (the
// first migration after a quiet spell waits for an RCU grace period, 5-15 ms) and
// starts the command only after the move is checked, so every process of the
// command is born inside. The tree dies by freezer FROZEN, SIGKILL to every task,
// THAWED; emptiness is an empty cgroup.procs in every hierarchy.
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
}

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
		avail, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
		if err != nil {
			return nil, fmt.Errorf("sandboxd: cgroup v2 at %s: %w", root, err)
		}
		dir := filepath.Join(root, parent)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("sandboxd: create cgroup parent: %w", err)
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
			for _, d := range []string{root, dir} {
				if err := m.write(filepath.Join(d, "cgroup.subtree_control"), line); err != nil {
					return nil, fmt.Errorf("sandboxd: enable cgroup controllers %q in %s: %w", line, d, err)
				}
			}
		}
		m.dirs[""] = dir
		return m, m.checkMissing(fmt.Sprintf("cgroup v2 at %s (cgroup.controllers: %q)", root, strings.TrimSpace(string(avail))))
	}
	for _, c := range v1Controllers {
		mnt := filepath.Join(root, c)
		real, err := filepath.EvalSymlinks(mnt)
		if err != nil {
			switch c {
			case "blkio", "memory", "cpu", "pids":
				continue // checkMissing decides
			}
			return nil, fmt.Errorf("sandboxd: cgroup v1 controller %s not mounted at %s: %w", c, mnt, err)
		}
		dir := filepath.Join(real, parent)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("sandboxd: create cgroup parent %s: %w", dir, err)
		}
		m.dirs[c] = dir
	}
	for _, c := range LimitControllers {
		_, m.have[c] = m.dirs[v1Name(c)]
	}
	return m, m.checkMissing("cgroup v1 at " + root)
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
	for _, d := range cg.uniq {
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
	return cg
}

// apply writes the limits. warnings name each limit that is not enforced because
// its controller is missing and allowed missing, or weakened (v1 without memsw).
func (cg *cgroup) apply(l Limits) (warnings []string, err error) {
	m := cg.m
	unenforced := func(c, what string) error {
		if !m.allowMissing[c] {
			return fmt.Errorf("sandboxd: cgroup %s controller missing: cannot enforce %s", c, what)
		}
		warnings = append(warnings, fmt.Sprintf("%s controller missing: %s NOT enforced (allow_missing_controllers)", c, what))
		return nil
	}
	pids := strconv.FormatInt(l.Pids+initPidsOverhead, 10)
	const period = 100000
	quota := int64(l.CPUs * period)
	if quota < 1000 {
		quota = 1000
	}
	mem := strconv.FormatInt(l.Memory, 10)
	set := func(dir, file, v string) error {
		p := filepath.Join(dir, file)
		if err := m.write(p, v); err != nil {
			return fmt.Errorf("sandboxd: cgroup %s=%s: %w", p, v, err)
		}
		return nil
	}
	if cg.v2 {
		d := cg.dirs[""]
		if m.have["memory"] {
			if err := set(d, "memory.max", mem); err != nil {
				return warnings, err
			}
			if err := set(d, "memory.swap.max", "0"); err != nil {
				if !errors.Is(err, os.ErrNotExist) {
					return warnings, err
				}
				if m.swapActive {
					return warnings, fmt.Errorf("sandboxd: cgroup memory.swap.max missing (swap accounting off) while swap is on: "+
						"memory would escape into swap; enable swap accounting or turn swap off: %w", err)
				}
				warnings = append(warnings, "memory.swap.max missing (no swap accounting), harmless while no swap device is on")
			}
		} else if err := unenforced("memory", "memory limit "+mem); err != nil {
			return warnings, err
		}
		if m.have["cpu"] {
			if err := set(d, "cpu.max", fmt.Sprintf("%d %d", quota, period)); err != nil {
				return warnings, err
			}
		} else if err := unenforced("cpu", fmt.Sprintf("cpu quota %g", l.CPUs)); err != nil {
			return warnings, err
		}
		if m.have["pids"] {
			if err := set(d, "pids.max", pids); err != nil {
				return warnings, err
			}
		} else if err := unenforced("pids", "pids limit "+pids+" (RLIMIT_NPROC stays as a backstop)"); err != nil {
			return warnings, err
		}
		if len(l.IO) > 0 && !m.have["io"] {
			return warnings, unenforced("io", "limits.io")
		}
		for _, io := range l.IO {
			line := io.Device
			for _, kv := range []struct {
				k string
				v uint64
			}{{"rbps", io.ReadBPS}, {"wbps", io.WriteBPS}, {"riops", io.ReadIOPS}, {"wiops", io.WriteIOPS}} {
				if kv.v > 0 {
					line += fmt.Sprintf(" %s=%d", kv.k, kv.v)
				}
			}
			if err := set(d, "io.max", line); err != nil {
				return warnings, err
			}
		}
		return warnings, nil
	}
	if m.have["memory"] {
		md := cg.dirs["memory"]
		if err := set(md, "memory.limit_in_bytes", mem); err != nil {
			return warnings, err
		}
		if err := set(md, "memory.memsw.limit_in_bytes", mem); err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				return warnings, err
			}
			warnings = append(warnings, "memory.memsw.limit_in_bytes missing (swapaccount off): using swappiness=0, swap can still absorb memory under global pressure")
			if err := set(md, "memory.swappiness", "0"); err != nil {
				return warnings, err
			}
		}
	} else if err := unenforced("memory", "memory limit "+mem); err != nil {
		return warnings, err
	}
	if m.have["cpu"] {
		cd := cg.dirs["cpu"]
		if err := set(cd, "cpu.cfs_period_us", strconv.Itoa(period)); err != nil {
			return warnings, err
		}
		if err := set(cd, "cpu.cfs_quota_us", strconv.FormatInt(quota, 10)); err != nil {
			return warnings, err
		}
	} else if err := unenforced("cpu", fmt.Sprintf("cpu quota %g", l.CPUs)); err != nil {
		return warnings, err
	}
	if m.have["pids"] {
		if err := set(cg.dirs["pids"], "pids.max", pids); err != nil {
			return warnings, err
		}
	} else if err := unenforced("pids", "pids limit "+pids+" (RLIMIT_NPROC stays as a backstop)"); err != nil {
		return warnings, err
	}
	if len(l.IO) > 0 {
		if !m.have["io"] {
			return warnings, unenforced("io", "limits.io (v1 blkio)")
		}
		bd := cg.dirs["blkio"]
		for _, io := range l.IO {
			for _, kv := range []struct {
				f string
				v uint64
			}{{"blkio.throttle.read_bps_device", io.ReadBPS}, {"blkio.throttle.write_bps_device", io.WriteBPS},
				{"blkio.throttle.read_iops_device", io.ReadIOPS}, {"blkio.throttle.write_iops_device", io.WriteIOPS}} {
				if kv.v == 0 {
					continue
				}
				if err := set(bd, kv.f, fmt.Sprintf("%s %d", io.Device, kv.v)); err != nil {
					return warnings, err
				}
			}
		}
	}
	return warnings, nil
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
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
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
// moves a process into each separately).
func (cg *cgroup) pids() ([]int, error) {
	seen := map[int]bool{}
	var out []int
	var errs []error
	for _, d := range cg.uniq {
		ps, err := procs(d)
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

// kill ends every process in the cgroup, including ones that fork while it runs.
func (cg *cgroup) kill() error {
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
	ps, err := cg.pids()
	for _, p := range ps {
		_ = unix.Kill(p, unix.SIGKILL)
	}
	// SIGKILL is delivered to frozen tasks once they thaw.
	if terr := thaw(); terr != nil {
		return fmt.Errorf("sandboxd: thaw cgroup %s: %w", cg.name, terr)
	}
	if err != nil {
		return fmt.Errorf("sandboxd: list cgroup %s: %w", cg.name, err)
	}
	return nil
}

// cgroupStats are the counters read at the end of a run. A counter whose
// controller is missing reads 0.
type cgroupStats struct {
	OOMKills  int64
	PidsMax   int64
	Peak      int64
	CPU       time.Duration
	readError error
}

func (cg *cgroup) stats() cgroupStats {
	var s cgroupStats
	var errs []error
	get := func(path, key string) int64 {
		v, err := readKeyed(path, key)
		if err != nil {
			errs = append(errs, err)
		}
		return v
	}
	m := cg.m
	if cg.v2 {
		d := cg.dirs[""]
		if m.have["memory"] {
			s.OOMKills = get(filepath.Join(d, "memory.events"), "oom_kill")
			s.Peak, _ = readInt(filepath.Join(d, "memory.peak")) // Linux >= 5.19
		}
		if m.have["pids"] {
			s.PidsMax = get(filepath.Join(d, "pids.events"), "max")
		}
		s.CPU = time.Duration(get(filepath.Join(d, "cpu.stat"), "usage_usec")) * time.Microsecond
	} else {
		if m.have["memory"] {
			s.OOMKills = get(filepath.Join(cg.dirs["memory"], "memory.oom_control"), "oom_kill")
			var err error
			if s.Peak, err = readInt(filepath.Join(cg.dirs["memory"], "memory.max_usage_in_bytes")); err != nil {
				errs = append(errs, err)
			}
		}
		if m.have["pids"] {
			s.PidsMax = get(filepath.Join(cg.dirs["pids"], "pids.events"), "max")
		}
		ns, err := readInt(filepath.Join(cg.dirs["cpuacct"], "cpuacct.usage"))
		if err != nil {
			errs = append(errs, err)
		}
		s.CPU = time.Duration(ns)
	}
	s.readError = errors.Join(errs...)
	return s
}

// remove deletes the cgroup directories, waiting briefly for exiting tasks.
func (cg *cgroup) remove() error {
	var errs []error
	for _, d := range cg.uniq {
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

func writeFile(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// readKeyed reads "key value" lines; a missing key is 0.
func readKeyed(path, key string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, sc.Err()
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
