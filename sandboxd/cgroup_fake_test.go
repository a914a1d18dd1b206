package sandboxd

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// A fake cgroup filesystem: plain files in a temp dir. The kernel would create a
// cgroup's control files at mkdir; the tests create the ones they expect.

type writeLog struct {
	mu     sync.Mutex
	root   string
	writes []string // "relative/path=value"
}

func (w *writeLog) write(path, v string) error {
	w.mu.Lock()
	rel, _ := filepath.Rel(w.root, path)
	w.writes = append(w.writes, rel+"="+v)
	w.mu.Unlock()
	return writeFile(path, v)
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, v := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readFileT(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return string(b)
}

// fakeV2 makes a cgroup2-like root offering controllers and returns a manager on it
// whose writes are logged.
func fakeV2(t *testing.T, controllers string, allow []string) (*cgroupManager, *writeLog, error) {
	t.Helper()
	root := t.TempDir()
	writeFiles(t, root, map[string]string{"cgroup.controllers": controllers + "\n", "cgroup.subtree_control": ""})
	if err := os.Mkdir(filepath.Join(root, "airlock"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, filepath.Join(root, "airlock"), map[string]string{"cgroup.subtree_control": ""})
	m, err := newCgroupManager(root, CgroupV2, "airlock", allow)
	if err != nil {
		return nil, nil, err
	}
	wl := &writeLog{root: root}
	m.write, m.swapActive = wl.write, false
	return m, wl, nil
}

func fakeCgroup(t *testing.T, m *cgroupManager, files ...string) *cgroup {
	t.Helper()
	cg, err := m.create("airlock-fake")
	if err != nil {
		t.Fatal(err)
	}
	fs := map[string]string{}
	for _, f := range files {
		fs[f] = ""
	}
	writeFiles(t, cg.dirs[""], fs)
	return cg
}

var v2LimitFiles = []string{"memory.max", "memory.swap.max", "cpu.max", "pids.max", "io.max"}

func TestCgroupV2FakeLimits(t *testing.T) {
	m, wl, err := fakeV2(t, "cpuset cpu io memory hugetlb pids rdma", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(readFileT(t, filepath.Join(m.root, "cgroup.subtree_control"))); got != "+memory +cpu +pids +io" {
		t.Errorf("root subtree_control: got %q, want %q", got, "+memory +cpu +pids +io")
	}
	if got := strings.TrimSpace(readFileT(t, filepath.Join(m.root, "airlock/cgroup.subtree_control"))); got != "+memory +cpu +pids +io" {
		t.Errorf("parent subtree_control: got %q", got)
	}
	cg := fakeCgroup(t, m, v2LimitFiles...)
	warns, err := cg.apply(Limits{Memory: 64 << 20, CPUs: 1.5, Pids: 100, IO: []IOLimit{
		{Device: "8:0", ReadBPS: 1 << 20, WriteIOPS: 100}, {Device: "259:0", WriteBPS: 2 << 20}}})
	if err != nil || len(warns) != 0 {
		t.Fatalf("apply: got warnings %v err %v, want none", warns, err)
	}
	want := []string{
		"airlock/airlock-fake/memory.max=67108864",
		"airlock/airlock-fake/memory.swap.max=0",
		"airlock/airlock-fake/cpu.max=150000 100000",
		"airlock/airlock-fake/pids.max=" + itoa(100+initPidsOverhead),
		"airlock/airlock-fake/io.max=8:0 rbps=1048576 wiops=100",
		"airlock/airlock-fake/io.max=259:0 wbps=2097152",
	}
	if strings.Join(wl.writes, "\n") != strings.Join(want, "\n") {
		t.Errorf("writes:\ngot  %q\nwant %q", wl.writes, want)
	}
	if got := readFileT(t, filepath.Join(cg.dirs[""], "memory.swap.max")); got != "0" {
		t.Errorf("memory.swap.max: got %q, want 0", got)
	}
	// A small CPU share still gets a 1ms quota, never 0 (which the kernel rejects).
	if _, err := cg.apply(Limits{Memory: 64 << 20, CPUs: 0.001, Pids: 1}); err != nil {
		t.Fatal(err)
	}
	if got := readFileT(t, filepath.Join(cg.dirs[""], "cpu.max")); got != "1000 100000" {
		t.Errorf("cpu.max: got %q, want %q", got, "1000 100000")
	}
}

func TestCgroupV2FakeCounters(t *testing.T) {
	m, _, err := fakeV2(t, "cpu memory pids", nil)
	if err != nil {
		t.Fatal(err)
	}
	cg := fakeCgroup(t, m)
	writeFiles(t, cg.dirs[""], map[string]string{
		"memory.events":  "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 7\n",
		"pids.events":    "max 5\n",
		"memory.peak":    "67104768\n",
		"memory.current": "1048576\n",
		"pids.current":   "3\n",
		"cpu.stat":       "usage_usec 250000\nuser_usec 200000\nsystem_usec 50000\n",
	})
	u, err := cg.usage()
	if err != nil {
		t.Fatalf("usage: %v", err)
	}
	want := Usage{CPU: 250 * time.Millisecond, Memory: 1 << 20, PeakMemory: 67104768, Pids: 3, OOMKills: 1, PidsLimitHits: 5}
	if u != want {
		t.Errorf("got %+v, want %+v", u, want)
	}
	if n := cg.oomKills(); n != 1 {
		t.Errorf("oomKills: got %d, want 1", n)
	}
	// No jobs child on v2: a new job is checked against the shared count,
	// keeping room for init's thread.
	writeFiles(t, cg.dirs[""], map[string]string{"pids.max": "20\n"})
	if cur, max, reserve, ok := cg.jobsPids(); !ok || cur != 3 || max != 20 || reserve != pidsReserve || cg.jobs != "" {
		t.Errorf("jobsPids: got %d %d %d %v (jobs %q), want 3 20 %d true", cur, max, reserve, ok, cg.jobs, pidsReserve)
	}
	// A counter file that cannot be read is reported, not taken as zero silently.
	os.Remove(filepath.Join(cg.dirs[""], "memory.events"))
	if _, err := cg.usage(); err == nil || !strings.Contains(err.Error(), "memory.events") {
		t.Errorf("missing memory.events: got %v, want it named", err)
	}
}

func TestCgroupV2FakeMissingController(t *testing.T) {
	// memory and io bound elsewhere (a v1-hybrid host's cgroup2 mount offers neither).
	_, _, err := fakeV2(t, "cpu pids", nil)
	if err == nil || !strings.Contains(err.Error(), "no memory controller") || !strings.Contains(err.Error(), "allow_missing_controllers") {
		t.Fatalf("New without memory: got %v, want an error naming the memory controller", err)
	}
	m, wl, err := fakeV2(t, "cpu pids", []string{"memory"})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.missing(); strings.Join(got, ",") != "memory,io" {
		t.Errorf("missing: got %v, want [memory io]", got)
	}
	cg := fakeCgroup(t, m, "cpu.max", "pids.max")
	warns, err := cg.apply(Limits{Memory: 64 << 20, CPUs: 1, Pids: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "memory limit 67108864 NOT enforced") {
		t.Errorf("warnings: got %q, want one saying the memory limit is not enforced", warns)
	}
	for _, w := range wl.writes {
		if strings.Contains(w, "memory.") {
			t.Errorf("wrote %s without a memory controller", w)
		}
	}
	if _, err := os.Stat(filepath.Join(cg.dirs[""], "memory.max")); err == nil {
		t.Errorf("memory.max created in the fake")
	}
	// io is needed only when a limit asks for it, and then it is an error.
	_, err = cg.apply(Limits{Memory: 64 << 20, CPUs: 1, Pids: 10, IO: []IOLimit{{Device: "8:0", ReadBPS: 1}}})
	if err == nil || !strings.Contains(err.Error(), "io controller missing") {
		t.Errorf("io limit without io: got %v, want an error naming the io controller", err)
	}
	// Counters of a missing controller are not read (no error for memory.events).
	writeFiles(t, cg.dirs[""], map[string]string{"pids.events": "max 0\n", "pids.current": "1\n", "cpu.stat": "usage_usec 7\n"})
	if u, err := cg.usage(); err != nil || u.CPU != 7*time.Microsecond || u.Memory != 0 || u.OOMKills != 0 {
		t.Errorf("usage: got %+v %v, want cpu 7us and no memory counters", u, err)
	}
}

func TestCgroupV2FakeSwap(t *testing.T) {
	m, _, err := fakeV2(t, "cpu memory pids", nil)
	if err != nil {
		t.Fatal(err)
	}
	cg := fakeCgroup(t, m, "memory.max", "cpu.max", "pids.max") // no memory.swap.max
	warns, err := cg.apply(Limits{Memory: 64 << 20, CPUs: 1, Pids: 10})
	if err != nil || len(warns) != 1 || !strings.Contains(warns[0], "no swap device") {
		t.Errorf("no swap on: got %q %v, want one warning", warns, err)
	}
	m.swapActive = true
	if _, err := cg.apply(Limits{Memory: 64 << 20, CPUs: 1, Pids: 10}); err == nil || !strings.Contains(err.Error(), "escape into swap") {
		t.Errorf("swap on, no memory.swap.max: got %v, want an error", err)
	}
}

func TestCgroupV2FakePopulatedAndKill(t *testing.T) {
	m, wl, err := fakeV2(t, "cpu memory pids", nil)
	if err != nil {
		t.Fatal(err)
	}
	cg := fakeCgroup(t, m, "cgroup.kill", "cgroup.procs")
	d := cg.dirs[""]
	if pop, err := cg.populated(); !pop || err == nil {
		t.Errorf("no cgroup.events: got populated=%v err=%v, want true and an error", pop, err)
	}
	writeFiles(t, d, map[string]string{"cgroup.events": "populated 1\nfrozen 0\n"})
	if pop, err := cg.populated(); !pop || err != nil {
		t.Errorf("populated 1: got %v %v", pop, err)
	}
	if err := cg.waitEmpty(10 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "still holds processes") {
		t.Errorf("waitEmpty on a populated cgroup: got %v, want an error", err)
	}
	writeFiles(t, d, map[string]string{"cgroup.events": "populated 0\nfrozen 0\n"})
	if err := cg.waitEmpty(10 * time.Millisecond); err != nil {
		t.Errorf("waitEmpty on an empty cgroup: %v", err)
	}
	if err := cg.kill(); err != nil {
		t.Fatal(err)
	}
	// Before 5.14 there is no cgroup.kill (the attempt fails): freeze, kill every
	// listed task, thaw.
	os.Remove(filepath.Join(d, "cgroup.kill"))
	writeFiles(t, d, map[string]string{"cgroup.freeze": "", "cgroup.events": "populated 0\nfrozen 1\n"})
	if err := cg.kill(); err != nil {
		t.Fatal(err)
	}
	want := "airlock/airlock-fake/cgroup.kill=1,airlock/airlock-fake/cgroup.kill=1,airlock/airlock-fake/cgroup.freeze=1,airlock/airlock-fake/cgroup.freeze=0"
	if got := strings.Join(wl.writes, ","); got != want {
		t.Errorf("writes: got %q, want %q", got, want)
	}
}

// fakeV1 makes per-controller hierarchies as plain directories.
func fakeV1(t *testing.T, ctrls []string, allow []string) (*cgroupManager, *writeLog, error) {
	t.Helper()
	root := t.TempDir()
	for _, c := range ctrls {
		if err := os.Mkdir(filepath.Join(root, c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m, err := newCgroupManager(root, CgroupV1, "airlock", allow)
	if err != nil {
		return nil, nil, err
	}
	wl := &writeLog{root: root}
	m.write = wl.write
	return m, wl, nil
}

func TestCgroupV1FakeLimitsAndCounters(t *testing.T) {
	m, wl, err := fakeV1(t, v1Controllers, nil)
	if err != nil {
		t.Fatal(err)
	}
	cg, err := m.create("airlock-fake")
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, cg.dirs["memory"], map[string]string{"memory.limit_in_bytes": "", "memory.memsw.limit_in_bytes": "",
		"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "memory.max_usage_in_bytes": "1234\n",
		"memory.usage_in_bytes": "999\n"})
	writeFiles(t, cg.dirs["cpu"], map[string]string{"cpu.cfs_period_us": "", "cpu.cfs_quota_us": ""})
	writeFiles(t, cg.dirs["pids"], map[string]string{"pids.max": "", "pids.events": "max 2\n", "pids.current": "4\n"})
	writeFiles(t, cg.jobs, map[string]string{"pids.max": "", "pids.events": "max 5\n", "pids.current": "3\n"})
	writeFiles(t, cg.dirs["cpuacct"], map[string]string{"cpuacct.usage": "5000000\n"})
	writeFiles(t, cg.dirs["blkio"], map[string]string{"blkio.throttle.read_bps_device": "", "blkio.throttle.write_iops_device": ""})
	warns, err := cg.apply(Limits{Memory: 32 << 20, CPUs: 0.5, Pids: 8, IO: []IOLimit{{Device: "8:0", ReadBPS: 4096, WriteIOPS: 9}}})
	if err != nil || len(warns) != 0 {
		t.Fatalf("apply: %v %v", warns, err)
	}
	want := []string{"memory/airlock/airlock-fake/memory.limit_in_bytes=33554432",
		"memory/airlock/airlock-fake/memory.memsw.limit_in_bytes=33554432",
		"cpu/airlock/airlock-fake/cpu.cfs_period_us=100000", "cpu/airlock/airlock-fake/cpu.cfs_quota_us=50000",
		"pids/airlock/airlock-fake/pids.max=" + itoa(8+initPidsOverhead),
		"pids/airlock/airlock-fake/jobs/pids.max=9",
		"blkio/airlock/airlock-fake/blkio.throttle.read_bps_device=8:0 4096",
		"blkio/airlock/airlock-fake/blkio.throttle.write_iops_device=8:0 9"}
	if strings.Join(wl.writes, "\n") != strings.Join(want, "\n") {
		t.Errorf("writes:\ngot  %q\nwant %q", wl.writes, want)
	}
	u, err := cg.usage()
	if wantU := (Usage{CPU: 5 * time.Millisecond, Memory: 999, PeakMemory: 1234, Pids: 4, OOMKills: 3, PidsLimitHits: 2 + 5}); err != nil || u != wantU {
		t.Errorf("usage: got %+v %v, want %+v", u, err, wantU)
	}
	// Jobs are born in the jobs child of the pids hierarchy: its limit is the
	// sandbox's, its count what a new job is checked against.
	writeFileT := func(p, v string) { writeFiles(t, filepath.Dir(p), map[string]string{filepath.Base(p): v}) }
	writeFileT(filepath.Join(cg.jobs, "pids.max"), "8\n")
	if cur, max, reserve, ok := cg.jobsPids(); !ok || cur != 3 || max != 8 || reserve != 1 {
		t.Errorf("jobsPids: got %d %d %d %v, want 3 8 1 true", cur, max, reserve, ok)
	}
	if cg.jobs != filepath.Join(cg.dirs["pids"], jobsCgroup) {
		t.Errorf("jobs: got %q", cg.jobs)
	}
	// Without memsw, swappiness 0 and a warning.
	os.Remove(filepath.Join(cg.dirs["memory"], "memory.memsw.limit_in_bytes"))
	writeFiles(t, cg.dirs["memory"], map[string]string{"memory.swappiness": ""})
	warns, err = cg.apply(Limits{Memory: 32 << 20, CPUs: 0.5, Pids: 8})
	if err != nil || len(warns) != 1 || readFileT(t, filepath.Join(cg.dirs["memory"], "memory.swappiness")) != "0" {
		t.Errorf("no memsw: got %q %v", warns, err)
	}
}

func TestCgroupV1FakeMissingController(t *testing.T) {
	noMem := []string{"cpu", "cpuacct", "pids", "freezer"}
	if _, _, err := fakeV1(t, noMem, nil); err == nil || !strings.Contains(err.Error(), "no memory controller") {
		t.Fatalf("got %v, want an error naming memory", err)
	}
	m, _, err := fakeV1(t, noMem, []string{"memory"})
	if err != nil {
		t.Fatal(err)
	}
	cg, err := m.create("airlock-fake")
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, cg.dirs["cpu"], map[string]string{"cpu.cfs_period_us": "", "cpu.cfs_quota_us": ""})
	writeFiles(t, cg.dirs["pids"], map[string]string{"pids.max": ""})
	writeFiles(t, cg.jobs, map[string]string{"pids.max": ""})
	warns, err := cg.apply(Limits{Memory: 32 << 20, CPUs: 1, Pids: 8})
	if err != nil || len(warns) != 1 || !strings.Contains(warns[0], "NOT enforced") {
		t.Errorf("got %q %v", warns, err)
	}
	if _, err := cg.apply(Limits{Memory: 32 << 20, CPUs: 1, Pids: 8, IO: []IOLimit{{Device: "8:0", ReadBPS: 1}}}); err == nil || !strings.Contains(err.Error(), "io controller missing") {
		t.Errorf("io without blkio: got %v", err)
	}
	if _, _, err := fakeV1(t, []string{"memory", "cpu", "pids", "cpuacct"}, nil); err == nil || !strings.Contains(err.Error(), "freezer") {
		t.Errorf("no freezer: got %v, want an error naming freezer", err)
	}
}

func TestCgroupHolds(t *testing.T) {
	m, _, err := fakeV2(t, "cpu memory pids", nil)
	if err != nil {
		t.Fatal(err)
	}
	cg := fakeCgroup(t, m)
	writeFiles(t, cg.dirs[""], map[string]string{"cgroup.procs": "10\n20\n"})
	if err := cg.holds(20); err != nil {
		t.Errorf("holds(20): %v", err)
	}
	if err := cg.holds(30); err == nil || !strings.Contains(err.Error(), "not in cgroup") {
		t.Errorf("holds(30): got %v, want an error", err)
	}
}

// TestSlotKeepsUIDWhenCgroupRemains: a slot whose cgroup cannot be removed (a
// process may still run as its uid) keeps its uid and id locks, so no later sandbox
// gets that uid.
func TestSlotKeepsUIDWhenCgroupRemains(t *testing.T) {
	m, _, err := fakeV2(t, "cpu memory pids", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{StateDir: t.TempDir(), UIDBase: 300000, UIDCount: 1, PoolSize: -1}
	p, err := newPool(&cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.make()
	if err != nil {
		t.Fatal(err)
	}
	// A file in the fake cgroup makes rmdir fail like a live task would.
	writeFiles(t, s.cg.dirs[""], map[string]string{"cgroup.procs": "1\n"})
	if err := s.destroy(); err == nil || !strings.Contains(err.Error(), "stay reserved") {
		t.Fatalf("destroy: got %v, want an error saying the uid stays reserved", err)
	}
	if _, err := p.make(); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("make after a failed destroy: got %v, want all uids in use", err)
	}
	os.Remove(filepath.Join(s.cg.dirs[""], "cgroup.procs"))
	if err := s.destroy(); err != nil {
		t.Fatalf("second destroy: %v", err)
	}
	s2, err := p.make()
	if err != nil {
		t.Fatalf("make after cleanup: %v", err)
	}
	if s2.uid != s.uid {
		t.Errorf("uid: got %d, want %d", s2.uid, s.uid)
	}
	_ = s2.destroy()
	_ = p.close()
}
