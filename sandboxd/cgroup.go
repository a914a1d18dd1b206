package sandboxd

import (
	"bufio"
	"bytes"
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
// dies through cgroup.kill.
//
// v1: memory.limit_in_bytes plus memory.memsw.limit_in_bytes at the same value, so
// swap is no escape; where the kernel lacks memsw (swap accounting off) swappiness is
// set to 0, which keeps anonymous memory out of swap except under global pressure,
// and the log says so. cpu.cfs_quota_us, pids.max, blkio.throttle.*. There is no v1
// io weight file on kernels built without CFQ/BFQ weights, so only throttles are
// offered. The init process is moved in before it receives its configuration, so it
// has done nothing yet. The tree dies by freezer FROZEN, SIGKILL to every task, THAWED.

var v1Controllers = []string{"memory", "cpu", "cpuacct", "pids", "freezer", "blkio"}

// v2Controllers are enabled in the parent's subtree_control when available.
var v2Controllers = []string{"memory", "cpu", "pids", "io"}

type cgroupManager struct {
	v2     bool
	dirs   map[string]string // controller (v1) or "" (v2) -> parent dir
	parent string
}

type cgroup struct {
	v2   bool
	name string
	dirs map[string]string // controller or "" -> cgroup dir
	uniq []string          // distinct dirs, for mkdir/rmdir
}

func newCgroupManager(root string, mode CgroupMode, parent string) (*cgroupManager, error) {
	m := &cgroupManager{dirs: map[string]string{}, parent: parent}
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
				}
			}
		}
		if len(enable) > 0 {
			line := strings.Join(enable, " ")
			for _, d := range []string{root, dir} {
				if err := writeFile(filepath.Join(d, "cgroup.subtree_control"), line); err != nil {
					return nil, fmt.Errorf("sandboxd: enable cgroup controllers %q in %s: %w", line, d, err)
				}
			}
		}
		m.dirs[""] = dir
		return m, nil
	}
	for _, c := range v1Controllers {
		mnt := filepath.Join(root, c)
		real, err := filepath.EvalSymlinks(mnt)
		if err != nil {
			if c == "blkio" {
				continue // io is best effort
			}
			return nil, fmt.Errorf("sandboxd: cgroup v1 controller %s not mounted at %s: %w", c, mnt, err)
		}
		dir := filepath.Join(real, parent)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("sandboxd: create cgroup parent %s: %w", dir, err)
		}
		m.dirs[c] = dir
	}
	return m, nil
}

func (m *cgroupManager) create(name string) (*cgroup, error) {
	cg := &cgroup{v2: m.v2, name: name, dirs: map[string]string{}}
	seen := map[string]bool{}
	for c, p := range m.dirs {
		d := filepath.Join(p, name)
		cg.dirs[c] = d
		if !seen[d] {
			seen[d] = true
			cg.uniq = append(cg.uniq, d)
		}
	}
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

func (m *cgroupManager) open(name string) *cgroup {
	cg := &cgroup{v2: m.v2, name: name, dirs: map[string]string{}}
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

func (cg *cgroup) dir(ctrl string) string {
	if cg.v2 {
		return cg.dirs[""]
	}
	return cg.dirs[ctrl]
}

// apply writes the limits.
func (cg *cgroup) apply(l Limits) (warnings []string, err error) {
	pids := strconv.FormatInt(l.Pids+initPidsOverhead, 10)
	const period = 100000
	quota := int64(l.CPUs * period)
	if quota < 1000 {
		quota = 1000
	}
	mem := strconv.FormatInt(l.Memory, 10)
	if cg.v2 {
		d := cg.dirs[""]
		w := []struct{ f, v string }{
			{"memory.max", mem},
			{"memory.swap.max", "0"},
			{"cpu.max", fmt.Sprintf("%d %d", quota, period)},
			{"pids.max", pids},
		}
		for _, x := range w {
			p := filepath.Join(d, x.f)
			if err := writeFile(p, x.v); err != nil {
				if errors.Is(err, os.ErrNotExist) && x.f == "memory.swap.max" {
					warnings = append(warnings, "memory.swap.max missing (no swap accounting): swap cannot be limited separately")
					continue
				}
				return warnings, fmt.Errorf("sandboxd: cgroup %s=%s: %w", p, x.v, err)
			}
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
			if err := writeFile(filepath.Join(d, "io.max"), line); err != nil {
				return warnings, fmt.Errorf("sandboxd: cgroup io.max %q: %w", line, err)
			}
		}
		return warnings, nil
	}
	md := cg.dirs["memory"]
	if err := writeFile(filepath.Join(md, "memory.limit_in_bytes"), mem); err != nil {
		return nil, fmt.Errorf("sandboxd: cgroup memory.limit_in_bytes=%s: %w", mem, err)
	}
	if err := writeFile(filepath.Join(md, "memory.memsw.limit_in_bytes"), mem); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("sandboxd: cgroup memory.memsw.limit_in_bytes=%s: %w", mem, err)
		}
		warnings = append(warnings, "memory.memsw.limit_in_bytes missing (swapaccount off): using swappiness=0, swap can still absorb memory under global pressure")
		if err := writeFile(filepath.Join(md, "memory.swappiness"), "0"); err != nil {
			return warnings, fmt.Errorf("sandboxd: cgroup memory.swappiness=0: %w", err)
		}
	}
	cd := cg.dirs["cpu"]
	if err := writeFile(filepath.Join(cd, "cpu.cfs_period_us"), strconv.Itoa(period)); err != nil {
		return warnings, fmt.Errorf("sandboxd: cgroup cpu.cfs_period_us: %w", err)
	}
	if err := writeFile(filepath.Join(cd, "cpu.cfs_quota_us"), strconv.FormatInt(quota, 10)); err != nil {
		return warnings, fmt.Errorf("sandboxd: cgroup cpu.cfs_quota_us=%d: %w", quota, err)
	}
	if err := writeFile(filepath.Join(cg.dirs["pids"], "pids.max"), pids); err != nil {
		return warnings, fmt.Errorf("sandboxd: cgroup pids.max=%s: %w", pids, err)
	}
	if len(l.IO) > 0 {
		bd, ok := cg.dirs["blkio"]
		if !ok {
			return warnings, errors.New("sandboxd: limits.io set but the blkio controller is not mounted")
		}
		for _, io := range l.IO {
			for _, kv := range []struct {
				f string
				v uint64
			}{{"blkio.throttle.read_bps_device", io.ReadBPS}, {"blkio.throttle.write_bps_device", io.WriteBPS},
				{"blkio.throttle.read_iops_device", io.ReadIOPS}, {"blkio.throttle.write_iops_device", io.WriteIOPS}} {
				if kv.v == 0 {
					continue
				}
				if err := writeFile(filepath.Join(bd, kv.f), fmt.Sprintf("%s %d", io.Device, kv.v)); err != nil {
					return warnings, fmt.Errorf("sandboxd: cgroup %s %s: %w", kv.f, io.Device, err)
				}
			}
		}
	}
	return warnings, nil
}

// addProc moves a whole process into the cgroup (v1; v2 children are born in it).
func (cg *cgroup) addProc(pid int) error {
	for _, d := range cg.uniq {
		if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
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

// pids lists every task group in the cgroup.
func (cg *cgroup) pids() []int {
	d := cg.dir("freezer")
	if cg.v2 {
		d = cg.dirs[""]
	}
	if d == "" {
		d = cg.dir("pids")
	}
	b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// kill ends every process in the cgroup, including ones that fork while it runs.
func (cg *cgroup) kill() error {
	if cg.v2 {
		err := writeFile(filepath.Join(cg.dirs[""], "cgroup.kill"), "1")
		if err == nil {
			return nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("sandboxd: cgroup.kill: %w", err)
		}
		// Kernels before 5.14: freeze, kill, thaw.
		freeze := filepath.Join(cg.dirs[""], "cgroup.freeze")
		if err := writeFile(freeze, "1"); err != nil {
			return fmt.Errorf("sandboxd: cgroup.freeze: %w", err)
		}
		waitFor(func() bool {
			b, _ := os.ReadFile(filepath.Join(cg.dirs[""], "cgroup.events"))
			return bytes.Contains(b, []byte("frozen 1"))
		})
		for _, p := range cg.pids() {
			_ = unix.Kill(p, unix.SIGKILL)
		}
		return writeFile(freeze, "0")
	}
	fd, ok := cg.dirs["freezer"]
	if !ok {
		return errors.New("sandboxd: freezer controller missing")
	}
	state := filepath.Join(fd, "freezer.state")
	if err := writeFile(state, "FROZEN"); err != nil {
		return fmt.Errorf("sandboxd: freeze: %w", err)
	}
	waitFor(func() bool {
		b, _ := os.ReadFile(state)
		return strings.TrimSpace(string(b)) == "FROZEN"
	})
	for _, p := range cg.pids() {
		_ = unix.Kill(p, unix.SIGKILL)
	}
	if err := writeFile(state, "THAWED"); err != nil {
		return fmt.Errorf("sandboxd: thaw: %w", err)
	}
	return nil
}

// cgroupStats are the counters read at the end of a run.
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
	if cg.v2 {
		d := cg.dirs[""]
		s.OOMKills = get(filepath.Join(d, "memory.events"), "oom_kill")
		s.PidsMax = get(filepath.Join(d, "pids.events"), "max")
		s.Peak, _ = readInt(filepath.Join(d, "memory.peak"))
		s.CPU = time.Duration(get(filepath.Join(d, "cpu.stat"), "usage_usec")) * time.Microsecond
	} else {
		s.OOMKills = get(filepath.Join(cg.dirs["memory"], "memory.oom_control"), "oom_kill")
		s.PidsMax = get(filepath.Join(cg.dirs["pids"], "pids.events"), "max")
		var err error
		if s.Peak, err = readInt(filepath.Join(cg.dirs["memory"], "memory.max_usage_in_bytes")); err != nil {
			errs = append(errs, err)
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
	f, err := os.OpenFile(path, os.O_WRONLY|unix.O_CLOEXEC, 0)
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

// waitFor polls cond for up to a second.
func waitFor(cond func() bool) {
	for i := 0; i < 1000 && !cond(); i++ {
		time.Sleep(time.Millisecond)
	}
}
