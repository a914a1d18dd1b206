package sandboxd

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/test/poll"
	"github.com/airlock-dev/airlock/test/roottest"
)

// cgroup2Root finds a cgroup2 mount: /sys/fs/cgroup on a unified host,
// /sys/fs/cgroup/unified on a v1-hybrid one (this machine), else a cgroup2
// instance mounted for the test under a temp dir.
func cgroup2Root(t *testing.T) string {
	t.Helper()
	roottest.Require(t)
	for _, p := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(p, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return p
		}
	}
	d := filepath.Join(t.TempDir(), "airlock-cg2")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("airlock-cg2", d, "cgroup2", 0, ""); err != nil {
		t.Fatalf("no cgroup2 mount and cannot mount one: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(d, unix.MNT_DETACH) })
	return d
}

// v2TestManager is a manager on the real cgroup2 hierarchy with a parent of its
// own, removed at the end, running without whatever limit controllers it lacks.
func v2TestManager(t *testing.T) *cgroupManager {
	t.Helper()
	root := cgroup2Root(t)
	parent := randName(fmt.Sprintf("airlock-test-%d-", os.Getpid()))
	m, err := newCgroupManager(root, CgroupV2, parent, LimitControllers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, name := range m.list() {
			cg := m.open(name)
			_ = cg.kill()
			_ = cg.waitEmpty(5 * time.Second)
			_ = cg.remove()
		}
		if err := os.Remove(m.dirs[""]); err != nil && !os.IsNotExist(err) {
			t.Errorf("remove cgroup parent: %v", err)
		}
	})
	return m
}

// cgroupOf returns pid's path in the cgroup2 hierarchy ("0::" line).
func cgroupOf(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p
		}
	}
	return ""
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

func TestCgroupV2MissingControllerIsAnError(t *testing.T) {
	root := cgroup2Root(t)
	avail, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		t.Fatal(err)
	}
	parent := randName(fmt.Sprintf("airlock-test-%d-", os.Getpid()))
	t.Cleanup(func() { _ = os.Remove(filepath.Join(root, parent)) })
	_, err = New(Config{CgroupRoot: root, CgroupMode: CgroupV2, CgroupParent: parent, StateDir: t.TempDir(), PoolSize: -1}, &audittest.Log{}, nil)
	hasMem := strings.Contains(" "+strings.TrimSpace(string(avail))+" ", " memory ")
	switch {
	case hasMem && err != nil:
		t.Errorf("memory controller available (%q): New: %v", avail, err)
	case !hasMem && (err == nil || !strings.Contains(err.Error(), "no memory controller")):
		t.Errorf("cgroup.controllers %q: got %v, want an error naming the memory controller", avail, err)
	}
}

// TestCgroupV2KillTree: processes born in a cgroup2 cgroup (CgroupFD), including a
// daemon in its own session and SIGTERM-ignoring ones, all die through cgroup.kill
// and through the freeze/kill/thaw fallback; populated goes from 1 to 0.
func TestCgroupV2KillTree(t *testing.T) {
	m := v2TestManager(t)
	script := `setsid sh -c 'trap "" TERM HUP; while :; do sleep 1; done' </dev/null >/dev/null 2>&1 &
	(trap "" TERM HUP; while :; do sleep 1; done) &
	nohup sleep 1000 >/dev/null 2>&1 &
	trap "" TERM; echo ready; wait`
	for _, method := range []string{"cgroup.kill", "freeze-kill-thaw"} {
		t.Run(method, func(t *testing.T) {
			cg, err := m.create(randName("airlock-"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if _, err := os.Stat(cg.dirs[""]); err == nil {
					_ = cg.kill()
					_ = cg.waitEmpty(5 * time.Second)
					_ = cg.remove()
				}
			})
			fd, err := cg.openFD()
			if err != nil {
				t.Fatal(err)
			}
			defer fd.Close()
			var out bytes.Buffer
			cmd := exec.Command("/bin/sh", "-c", script)
			cmd.Stdout = &out
			cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd()), Pdeathsig: unix.SIGKILL}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var ps []int
			for i := 0; i < 500; i++ { // up to ~5s for the tree to appear
				ps, _ = cg.pids()
				if len(ps) >= 6 { // sh, setsid'd sh + sleep, subshell + sleep, nohup sleep
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if len(ps) < 6 {
				t.Fatalf("tree did not start: procs %v", ps)
			}
			rel := strings.TrimPrefix(cg.dirs[""], m.root)
			if got := cgroupOf(cmd.Process.Pid); got != rel {
				t.Errorf("child born in %q, want %q", got, rel)
			}
			if pop, err := cg.populated(); !pop || err != nil {
				t.Errorf("populated: got %v %v, want true", pop, err)
			}
			// SIGTERM to all: the trap "" TERM processes survive it (the kill must
			// do more than ask).
			for _, p := range ps {
				_ = unix.Kill(p, unix.SIGTERM)
			}
			time.Sleep(50 * time.Millisecond)
			if left, _ := cg.pids(); len(left) < 4 {
				t.Fatalf("SIGTERM alone ended the tree (%v): the test would prove nothing", left)
			}
			if method == "cgroup.kill" {
				err = cg.kill()
			} else {
				err = cg.freezeKill()
			}
			if err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if err := cg.waitEmpty(5 * time.Second); err != nil {
				t.Fatal(err)
			}
			if pop, err := cg.populated(); pop || err != nil {
				t.Errorf("after kill: populated %v %v, want false", pop, err)
			}
			for _, p := range ps {
				for i := 0; i < 200 && alive(p) && cgroupOf(p) == rel; i++ {
					time.Sleep(10 * time.Millisecond)
				}
				if alive(p) && cgroupOf(p) == rel {
					t.Errorf("pid %d survives", p)
				}
			}
			if err := cg.remove(); err != nil {
				t.Errorf("remove: %v", err)
			}
			if _, err := os.Stat(cg.dirs[""]); !os.IsNotExist(err) {
				t.Errorf("cgroup dir after remove: %v", err)
			}
		})
	}
}

// lineWatch is a live writer that closes seen when a line equal to want passes.
type lineWatch struct {
	mu   sync.Mutex
	buf  []byte
	want string
	seen chan struct{}
	once sync.Once
}

func (w *lineWatch) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	if bytes.Contains(w.buf, []byte(w.want+"\n")) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(b), nil
}

// TestCgroupV2Executor runs the executor in v2 mode on the real cgroup2 hierarchy:
// init is born in the sandbox's cgroup, a normal command reports its status and CPU
// from cpu.stat, a timeout kills the whole tree (daemonized and SIGTERM-ignoring
// processes included), and the cgroup is removed afterwards.
func TestCgroupV2Executor(t *testing.T) {
	root := cgroup2Root(t)
	e, au := newTestExecutor(t, func(c *Config) {
		c.CgroupRoot, c.CgroupMode, c.AllowMissingControllers = root, CgroupV2, LimitControllers
	})
	if !e.CgroupV2() {
		t.Fatal("executor not in v2 mode")
	}
	res := mustRun(t, e, Spec{Argv: sh("echo hi; exit 3")})
	if res.ExitCode != 3 || string(res.Stdout) != "hi\n" {
		t.Errorf("got exit %d stdout %q, want 3 %q", res.ExitCode, res.Stdout, "hi\n")
	}
	if n := len(au.Records()); n != 2 {
		t.Errorf("audit records: got %d, want 2", n)
	}

	w := &lineWatch{want: "started", seen: make(chan struct{})}
	script := `setsid sh -c 'trap "" TERM HUP; while :; do :; done' >/dev/null 2>&1 &
	nohup sleep 1000 >/dev/null 2>&1 &
	(trap "" TERM; sleep 1000) &
	echo started; while :; do :; done`
	type outcome struct {
		res *Result
		err error
	}
	done, finished := make(chan outcome, 1), make(chan struct{})
	// The run holds a slot in the executor's state directory and cgroup: it is
	// waited for (its timeout bounds it) before the executor and the temporary
	// directory are cleaned up, also when the test fails early.
	t.Cleanup(func() { <-finished })
	go func() {
		defer close(finished)
		r, err := e.Run(context.Background(), Spec{Argv: sh(script), Stdout: w, Limits: Limits{Timeout: 3 * time.Second}})
		done <- outcome{r, err}
	}()
	var sandboxCg string
	select {
	case <-w.seen:
		// Which cgroup holds the run: the populated one under the parent.
		for _, name := range e.cgm.list() {
			cg := e.cgm.open(name)
			if pop, _ := cg.populated(); pop {
				sandboxCg = cg.dirs[""]
				ps, _ := cg.pids()
				initFound := false
				for _, p := range ps {
					st, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/status")
					for _, l := range strings.Split(string(st), "\n") {
						if f := strings.Fields(l); len(f) >= 3 && f[0] == "NSpid:" && f[len(f)-1] == "1" {
							initFound = true
							if got, want := cgroupOf(p), strings.TrimPrefix(sandboxCg, root); got != want {
								t.Errorf("init in cgroup %q, want %q", got, want)
							}
						}
					}
				}
				if !initFound || len(ps) < 5 {
					t.Errorf("sandbox cgroup procs %v: want init (NSpid 1) and the command's tree", ps)
				}
			}
		}
	case o := <-done:
		t.Fatalf("run ended before starting: %+v %v", o.res, o.err)
	}
	if sandboxCg == "" {
		t.Fatal("no populated sandbox cgroup while the command ran")
	}
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	if !o.res.TimedOut || o.res.ExitStatus() != 124 {
		t.Errorf("got timed_out=%v status=%d, want true 124", o.res.TimedOut, o.res.ExitStatus())
	}
	if left := uidProcs(t, o.res.UID); len(left) > 0 {
		t.Errorf("processes of uid %d survive: %v", o.res.UID, left)
	}
	if o.res.CPU <= 0 {
		t.Errorf("cpu: got %v, want cpu.stat's usage", o.res.CPU)
	}
	if _, err := os.Stat(sandboxCg); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox cgroup %s after the run: %v, want removed", sandboxCg, err)
	}
}

// TestCgroupV2WaitEmptyWakesOnExit: waitEmpty on v2 sleeps in poll(2) on
// cgroup.events; it must return once the last process leaves by itself (no
// kill), and must not report an empty cgroup while one still lives.
func TestCgroupV2WaitEmptyWakesOnExit(t *testing.T) {
	m := v2TestManager(t)
	cg, err := m.create(randName("airlock-"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cg.kill()
		_ = cg.waitEmpty(5 * time.Second)
		_ = cg.remove()
	})
	fd, err := cg.openFD()
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	// A child that outlives its parent: the cgroup stays populated until it ends.
	cmd := exec.Command("/bin/sh", "-c", "sleep 0.3 &")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd()), Pdeathsig: unix.SIGKILL}
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if pop, err := cg.populated(); err != nil || !pop {
		t.Fatalf("populated after the parent exited: got %v (%v), want true (sleep still runs)", pop, err)
	}
	if err := cg.waitEmpty(10 * time.Second); err != nil {
		t.Fatalf("waitEmpty: %v", err)
	}
	if ps, _ := cg.pids(); len(ps) != 0 {
		t.Fatalf("got processes %v left after waitEmpty returned, want none", ps)
	}
	if err := cg.waitEmpty(0); err != nil {
		t.Fatalf("waitEmpty on an empty cgroup with no time left: %v", err)
	}
}

// TestCgroupV2Sandbox runs a long-lived sandbox in v2 mode on the real
// cgroup2 hierarchy: init born in its cgroup, an exec's timeout freezing the
// cgroup (cgroup.freeze) to kill the exec's session while another exec's
// process lives on, files in and out, usage from cpu.stat and the process
// count, and Destroy through cgroup.kill leaving no process or cgroup.
func TestCgroupV2Sandbox(t *testing.T) {
	root := cgroup2Root(t)
	e, _ := newTestExecutor(t, func(c *Config) {
		c.CgroupRoot, c.CgroupMode, c.AllowMissingControllers = root, CgroupV2, LimitControllers
	})
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{})
	if got, want := cgroupOf(s.init.Pid), strings.TrimPrefix(s.slot.cg.dirs[""], root); got != want {
		t.Errorf("init in cgroup %q, want %q", got, want)
	}
	mustExec(t, s, ExecSpec{Argv: sh("setsid sleep 981 >/dev/null 2>&1 < /dev/null &")})
	res := mustExec(t, s, ExecSpec{Argv: sh("setsid sleep 982 >/dev/null 2>&1 < /dev/null & exec sleep 983"), Timeout: time.Second})
	if !res.TimedOut {
		t.Errorf("got %+v, want timed out", res)
	}
	if out := string(mustExec(t, s, ExecSpec{Argv: sh("ps -eo args | grep '^sleep 98' | sort")}).Stdout); out != "sleep 981\n" {
		t.Errorf("sleepers: got %q, want only the other exec's", out)
	}
	if _, err := s.PutFiles(t.Context(), "/workspace", strings.NewReader(string(tarBytes(t)))); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := s.GetFiles(t.Context(), "/workspace/hello", &out); err != nil || !strings.Contains(out.String(), "hi there") {
		t.Errorf("get: %v %q", err, out.String())
	}
	u, err := s.Usage()
	if err != nil || u.CPU <= 0 || u.Pids < 2 {
		t.Errorf("usage: got %+v %v, want cpu and init plus the sleeper", u, err)
	}
}

func tarBytes(t *testing.T) []byte {
	return tarOf(t, []*tar.Header{file("hello")}, map[string]string{"hello": "hi there"}).Bytes()
}

// TestCgroupV2PidsLimitByRlimit: on v2 a job cannot be moved to a cgroup of
// its own apart from init, so the sandbox's task limit is RLIMIT_NPROC of
// its (unique) uid, exactly Limits.Pids, and init keeps the rest of
// pids.max. A fork bomb never holds more than Pids tasks, an exec meanwhile
// is refused with an error naming the limit, and init lives.
func TestCgroupV2PidsLimitByRlimit(t *testing.T) {
	root := cgroup2Root(t)
	e, _ := newTestExecutor(t, func(c *Config) {
		c.CgroupRoot, c.CgroupMode, c.AllowMissingControllers = root, CgroupV2, LimitControllers
	})
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{Limits: Limits{Pids: 16}})
	bomb := "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)\n"
	p, err := s.Exec(t.Context(), ExecSpec{Argv: []string{"python3", "-c", bomb}, Timeout: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tasks := func() int {
		n := 0
		for _, pid := range uidProcs(t, s.UID()) {
			b, _ := os.ReadFile("/proc/" + pid + "/status")
			for _, l := range strings.Split(string(b), "\n") {
				if f := strings.Fields(l); len(f) == 2 && f[0] == "Threads:" {
					k, _ := strconv.Atoi(f[1])
					n += k
				}
			}
		}
		return n
	}
	poll.Until(t, 5*time.Second, "the bomb to reach the limit", func() bool { return tasks() >= 15 })
	for i := 0; i < 20; i++ {
		if n := tasks(); n > 16 {
			t.Errorf("the sandbox holds %d tasks, more than its limit 16", n)
		}
	}
	if _, err := s.Exec(t.Context(), ExecSpec{Argv: []string{"/bin/true"}}); err == nil || !strings.Contains(err.Error(), "process limit") {
		t.Errorf("exec at the limit: got %v, want an error naming the process limit", err)
	}
	select {
	case <-s.Done():
		t.Fatal("init died")
	default:
	}
	if res, err := p.Wait(); err != nil || !res.TimedOut {
		t.Errorf("bomb: got %+v %v, want timed out", res, err)
	}
}
