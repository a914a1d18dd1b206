package sandboxd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/test/poll"
)

// newSandbox creates a started sandbox destroyed at the end of the test, and
// checks then that nothing of it is left: no process of its uid, no cgroup.
func newSandbox(t *testing.T, e *Executor, ps PrepareSpec, ss StartSpec) *Sandbox {
	t.Helper()
	s, err := e.Create(t.Context(), ps, ss)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { destroyAndCheck(t, s) })
	return s
}

// destroyAndCheck destroys s and fails if a process of its uid or its cgroup
// survives.
func destroyAndCheck(t *testing.T, s *Sandbox) {
	t.Helper()
	if _, err := s.Destroy(context.Background()); err != nil {
		t.Errorf("Destroy: %v", err)
	}
	if left := uidProcs(t, s.UID()); len(left) > 0 {
		t.Errorf("processes of uid %d survive Destroy: %v", s.UID(), left)
	}
	for _, d := range s.slot.cg.uniq {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s after Destroy: %v, want removed", d, err)
		}
	}
	select {
	case <-s.Done():
	default:
		t.Errorf("Done not closed after Destroy")
	}
}

func mustExec(t *testing.T, s *Sandbox, x ExecSpec) *ExecResult {
	t.Helper()
	p, err := s.Exec(t.Context(), x)
	if err != nil {
		t.Fatalf("Exec(%q): %v", x.Argv, err)
	}
	res, err := p.Wait()
	if err != nil {
		t.Fatalf("Wait(%q): %v", x.Argv, err)
	}
	return res
}

// TestSandboxExecStreamsOutput: a line written before a long sleep reaches
// the Stdout writer while the command still runs; Signal then ends it.
func TestSandboxExecStreamsOutput(t *testing.T) {
	e, au := newTestExecutor(t, nil)
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{ID: "alk-stream"})
	w := &lineWatch{want: "first", seen: make(chan struct{})}
	p, err := s.Exec(t.Context(), ExecSpec{Argv: sh("echo first; exec sleep 60"), Stdout: w})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.seen:
	case <-time.After(20 * time.Second):
		t.Fatal("the first line did not arrive while the command ran")
	}
	select {
	case <-p.exited:
		t.Fatal("the command ended before its sleep: the test proves nothing")
	default:
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	res, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if res.Signal != int(syscall.SIGTERM) || res.ExitStatus() != 128+15 || string(res.Stdout) != "first\n" {
		t.Errorf("got signal %d status %d stdout %q, want SIGTERM 143 %q", res.Signal, res.ExitStatus(), res.Stdout, "first\n")
	}
	if err := p.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Signal after the end: got %v, want os.ErrProcessDone", err)
	}
	recs := au.Records()
	if len(recs) != 2 || recs[0].ID != "alk-stream/"+p.ID()+"/start" || recs[1].ID != "alk-stream/"+p.ID()+"/end" ||
		recs[1].Exec.Signal != "SIGTERM" || recs[0].Sandbox != "alk-stream" {
		t.Errorf("audit records: got %+v", recs)
	}
}

// TestSandboxConcurrentExecs: execs started at once run at once in the same
// sandbox, each with its own output and status.
func TestSandboxConcurrentExecs(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{})
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each waits for all the others to have started: they overlap.
			script := fmt.Sprintf("touch /tmp/started-%d; while [ $(ls /tmp | grep -c started-) -lt %d ]; do sleep 0.05; done; echo out-%d; echo err-%d >&2; exit %d", i, n, i, i, i)
			p, err := s.Exec(context.Background(), ExecSpec{Argv: sh(script), Timeout: 30 * time.Second})
			if err != nil {
				errs <- err
				return
			}
			res, err := p.Wait()
			switch {
			case err != nil:
				errs <- err
			case res.ExitCode != i || string(res.Stdout) != fmt.Sprintf("out-%d\n", i) || string(res.Stderr) != fmt.Sprintf("err-%d\n", i):
				errs <- fmt.Errorf("exec %d: got exit %d stdout %q stderr %q timed_out %v", i, res.ExitCode, res.Stdout, res.Stderr, res.TimedOut)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d overlapping execs in %v", n, time.Since(start))
}

// TestSandboxEnvDirStdin: the base environment (Start's env, proxy, the
// allow-listed host variables) with an exec's own on top, the default working
// directory (the empty workspace, owned by the sandbox), and stdin.
func TestSandboxEnvDirStdin(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	t.Setenv("TZ", "UTC")
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{Env: []string{"A=start", "B=start"}, Proxy: "http://127.0.0.1:3128"})
	res := mustExec(t, s, ExecSpec{Argv: sh(`echo "$A $B $C $TZ $HTTPS_PROXY $no_proxy"; pwd; stat -c %u .; cat; echo x > f && echo wrote`),
		Env: []string{"B=exec", "C=exec"}, Stdin: strings.NewReader("from-stdin\n")})
	want := fmt.Sprintf("start exec exec UTC http://127.0.0.1:3128 localhost,127.0.0.1,::1\n%s\n%d\nfrom-stdin\nwrote\n", DefaultWorkspaceDir, s.UID())
	if string(res.Stdout) != want {
		t.Errorf("got %q, want %q (stderr %q)", res.Stdout, want, res.Stderr)
	}
	res = mustExec(t, s, ExecSpec{Argv: []string{"pwd"}, Dir: "/tmp"})
	if string(res.Stdout) != "/tmp\n" {
		t.Errorf("dir: got %q, want /tmp", res.Stdout)
	}
	// The file written in the workspace is still there for the next exec.
	res = mustExec(t, s, ExecSpec{Argv: []string{"cat", "f"}})
	if string(res.Stdout) != "x\n" {
		t.Errorf("workspace across execs: got %q", res.Stdout)
	}
}

// TestSandboxExecTimeoutKillsItsDescendants: a timeout kills the exec's
// process group and the processes that left it (a setsid daemon, a double
// fork), found by the exec's audit session; another exec's background process
// lives on.
func TestSandboxExecTimeoutKillsItsDescendants(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{})
	// Another exec leaves a process behind: it must survive the timeout below.
	mustExec(t, s, ExecSpec{Argv: sh("setsid sleep 991 >/dev/null 2>&1 < /dev/null &")})
	res := mustExec(t, s, ExecSpec{Argv: sh(`setsid sh -c 'trap "" TERM HUP; sleep 992' >/dev/null 2>&1 < /dev/null &
		(sh -c 'sleep 993' >/dev/null 2>&1 &) ; echo started; exec sleep 994`), Timeout: 2 * time.Second})
	if !res.TimedOut || res.ExitStatus() != 124 || string(res.Stdout) != "started\n" {
		t.Errorf("got timed_out=%v status=%d stdout %q, want true 124 started", res.TimedOut, res.ExitStatus(), res.Stdout)
	}
	out := string(mustExec(t, s, ExecSpec{Argv: sh("ps -eo args | grep -c '^sleep 99[1-4]'; ps -eo args | grep '^sleep 99'")}).Stdout)
	if out != "1\nsleep 991\n" {
		t.Errorf("sleepers left: got %q, want only the other exec's sleep 991", out)
	}
}

// TestSandboxExecCannotStart: a missing command is 127, a non-executable
// file 126, both an *ExecError with the reason on the command's stderr; a bad
// working directory is an error; nothing runs.
func TestSandboxExecCannotStart(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{})
	for _, tc := range []struct {
		name string
		x    ExecSpec
		code int
	}{
		{"not found", ExecSpec{Argv: []string{"airlock-no-such-command"}}, 127},
		{"not executable", ExecSpec{Argv: []string{"/etc/passwd"}}, 126},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			tc.x.Stderr = &stderr
			p, err := s.Exec(t.Context(), tc.x)
			var ee *ExecError
			if p != nil || !errors.As(err, &ee) || ee.Code != tc.code {
				t.Fatalf("got %v %v, want an *ExecError with code %d", p, err, tc.code)
			}
			if !strings.Contains(stderr.String(), "airlock: exec") {
				t.Errorf("stderr: got %q, want the reason", stderr.String())
			}
		})
	}
	_, err := s.Exec(t.Context(), ExecSpec{Argv: sh("touch /tmp/ran"), Dir: "/airlock-no-such-dir"})
	if err == nil || !strings.Contains(err.Error(), "chdir /airlock-no-such-dir") {
		t.Errorf("bad dir: got %v, want an error naming the chdir", err)
	}
	if out := mustExec(t, s, ExecSpec{Argv: sh("ls /tmp")}).Stdout; len(out) != 0 {
		t.Errorf("something ran: /tmp holds %q", out)
	}
	for _, x := range []ExecSpec{{}, {Argv: []string{"true"}, Dir: "rel"}, {Argv: []string{"true"}, Env: []string{"NOEQUALS"}}, {Argv: []string{"a\x00b"}}} {
		if _, err := s.Exec(t.Context(), x); err == nil {
			t.Errorf("Exec(%+v): got no error", x)
		}
	}
}

// TestSandboxLifecycleErrors: Exec before Start, a second Start, anything
// after Destroy.
func TestSandboxLifecycleErrors(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	s, err := e.Prepare(t.Context(), PrepareSpec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyAndCheck(t, s) })
	if _, err := s.Exec(t.Context(), ExecSpec{Argv: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "prepared, want started") {
		t.Errorf("Exec before Start: got %v", err)
	}
	if err := s.Start(t.Context(), StartSpec{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context(), StartSpec{}); err == nil || !strings.Contains(err.Error(), "want prepared") {
		t.Errorf("second Start: got %v", err)
	}
	u1, err := s.Destroy(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	u2, err := s.Destroy(t.Context())
	if err != nil || u1 != u2 {
		t.Errorf("second Destroy: got %+v %v, want %+v", u2, err, u1)
	}
	if _, err := s.Exec(t.Context(), ExecSpec{Argv: []string{"true"}}); !errors.Is(err, ErrSandboxGone) {
		t.Errorf("Exec after Destroy: got %v, want ErrSandboxGone", err)
	}
}

// TestSandboxInitDeath: when init dies on its own, Done closes, a running
// exec's Wait returns an error, new execs are refused, and Destroy still
// cleans up.
func TestSandboxInitDeath(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{})
	p, err := s.Exec(t.Context(), ExecSpec{Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(s.init.Pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after init died")
	}
	if _, err := p.Wait(); !errors.Is(err, ErrSandboxGone) || !strings.Contains(err.Error(), "init exited unexpectedly") {
		t.Errorf("Wait: got %v, want ErrSandboxGone saying init exited", err)
	}
	if _, err := s.Exec(t.Context(), ExecSpec{Argv: []string{"true"}}); !errors.Is(err, ErrSandboxGone) {
		t.Errorf("Exec after init died: got %v, want ErrSandboxGone", err)
	}
}

// TestSandboxDestroyWhileWaiting: Destroy at once with Wait and with another
// Destroy: all return, the exec's Wait with ErrSandboxGone.
func TestSandboxDestroyWhileWaiting(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{})
	w := &lineWatch{want: "up", seen: make(chan struct{})}
	p, err := s.Exec(t.Context(), ExecSpec{Argv: sh("(sleep 600 &); echo up; sleep 600"), Stdout: w})
	if err != nil {
		t.Fatal(err)
	}
	<-w.seen
	var wg sync.WaitGroup
	var waitErr error
	wg.Add(3)
	go func() { defer wg.Done(); _, waitErr = p.Wait() }()
	for i := 0; i < 2; i++ {
		go func() {
			defer wg.Done()
			if _, err := s.Destroy(context.Background()); err != nil {
				t.Errorf("Destroy: %v", err)
			}
		}()
	}
	wg.Wait()
	if !errors.Is(waitErr, ErrSandboxGone) {
		t.Errorf("Wait: got %v, want ErrSandboxGone", waitErr)
	}
}

// TestSandboxUsage: the cgroup's counters while it runs and at the end.
func TestSandboxUsage(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	s, err := e.Create(t.Context(), PrepareSpec{}, StartSpec{})
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, s, ExecSpec{Argv: sh("i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; head -c 20000000 /dev/zero > /tmp/f")})
	u, err := s.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if u.CPU <= 0 || u.Pids < 1 || u.Memory <= 0 || u.PeakMemory < 20<<20 {
		t.Errorf("usage: got %+v, want cpu, init's task, memory and a peak past the 20 MB file", u)
	}
	final := destroyUsage(t, s)
	if final.CPU < u.CPU {
		t.Errorf("final usage %+v before %+v", final, u)
	}
}

func destroyUsage(t *testing.T, s *Sandbox) Usage {
	t.Helper()
	u, err := s.Destroy(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestSandboxExecOOM: an exec killed by the OOM killer is reported as such;
// the sandbox (and init) live on and run the next exec.
func TestSandboxExecOOM(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	if !e.cgm.have["memory"] {
		t.Skip("no memory controller")
	}
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{Limits: Limits{Memory: 96 << 20}})
	res := mustExec(t, s, ExecSpec{Argv: []string{"python3", "-c", "a = []\nwhile True:\n    a.append(bytearray(8 << 20))\n"}})
	if !res.OOMKilled || res.ExitStatus() != 137 {
		t.Errorf("got oom=%v status=%d signal=%d, want true 137", res.OOMKilled, res.ExitStatus(), res.Signal)
	}
	if res.PeakMemory < 32<<20 || res.CPU <= 0 {
		t.Errorf("peak %d cpu %v: want the rusage of the grown process", res.PeakMemory, res.CPU)
	}
	ok := mustExec(t, s, ExecSpec{Argv: []string{"true"}})
	if ok.OOMKilled || ok.ExitCode != 0 {
		t.Errorf("next exec: got oom=%v exit=%d", ok.OOMKilled, ok.ExitCode)
	}
}

// TestSandboxPrepareThenStart: a prepared sandbox gets its user's limits
// (tmpfs sizes remounted), an idmapped workspace from the executor's mount
// namespace (hidden paths inside masked), and its id in audit records.
func TestSandboxPrepareThenStart(t *testing.T) {
	ws := hostDir(t, 0o755)
	secret := filepath.Join(ws, "secret")
	if err := os.Mkdir(secret, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secret, "key"), []byte("TOPSECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	e, au := newTestExecutor(t, func(c *Config) { c.HiddenPaths = []string{secret} })
	s, err := e.Prepare(t.Context(), PrepareSpec{TmpSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyAndCheck(t, s) })
	if err := s.Start(t.Context(), StartSpec{ID: "alk-started", Workspace: ws, Limits: Limits{TmpSize: 3 << 20, TmpInodes: 100}}); err != nil {
		t.Fatal(err)
	}
	if got := s.WorkDir(); got != ws {
		t.Errorf("WorkDir: got %q, want %q", got, ws)
	}
	script := `df -k /tmp /dev/shm /workspace $HOME | tail -n +2 | awk '{print $2}' | tr '\n' ' '; echo
	pwd; echo made > new; ls -A secret | wc -l; cat secret/key 2>&1 | grep -c TOPSECRET`
	res := mustExec(t, s, ExecSpec{Argv: sh(script)})
	want := fmt.Sprintf("3072 3072 3072 3072 \n%s\n0\n0\n", ws)
	if string(res.Stdout) != want {
		t.Errorf("got %q, want %q (stderr %q)", res.Stdout, want, res.Stderr)
	}
	if u, _, _ := ownerOf(t, filepath.Join(ws, "new")); u != 0 {
		t.Errorf("host owner of a file the sandbox made: got %d, want 0 (the workspace's owner)", u)
	}
	if recs := au.Records(); len(recs) != 2 || recs[0].Sandbox != "alk-started" {
		t.Errorf("audit records: got %+v", recs)
	}
}

// TestInitLeaderKeepsItsIdentity (regression: a job goroutine could run on
// init's main thread and drop its privileges there, leaving init's leader
// with the sandbox uid and the job's audit session, so a timeout killed init
// and the sandbox could signal it). In fresh sandboxes (the first job is the
// likeliest to be scheduled on the main thread) and after concurrent execs,
// init's leader is root with its own audit session.
func TestInitLeaderKeepsItsIdentity(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	check := func(s *Sandbox, before uint32) {
		t.Helper()
		st, err := os.ReadFile("/proc/" + strconv.Itoa(s.init.Pid) + "/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(st), "\n") {
			if f := strings.Fields(l); len(f) == 5 && (f[0] == "Uid:" || f[0] == "Gid:") && strings.Join(f[1:], " ") != "0 0 0 0" {
				t.Errorf("init's leader: got %q, want root", l)
			}
		}
		if after, _ := auditSession(s.init.Pid); after != before {
			t.Errorf("init's audit session: got %d, want %d (unchanged)", after, before)
		}
	}
	for i := 0; i < 10; i++ {
		s := newSandbox(t, e, PrepareSpec{}, StartSpec{})
		before, _ := auditSession(s.init.Pid)
		mustExec(t, s, ExecSpec{Argv: []string{"true"}})
		check(s, before)
		if i < 9 {
			destroyAndCheck(t, s)
			continue
		}
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 10; j++ {
					if _, err := s.Exec(context.Background(), ExecSpec{Argv: []string{"true"}}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		check(s, before)
	}
}

// TestInitMemoryNotWritableFromSandbox: while execs start (their job threads
// briefly run as the sandbox uid inside init), code in the sandbox running as
// that uid tries to open init's memory through every /proc/1/task/TID/mem;
// it must never succeed. It counts the job threads it saw as its own uid, so
// the test shows the window was there to attack.
func TestInitMemoryNotWritableFromSandbox(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{})
	attacker := `import os, time
uid, seen, opened, end = os.getuid(), 0, 0, time.time() + 8
while time.time() < end and not os.path.exists('/tmp/stop'):
    try:
        tids = os.listdir('/proc/1/task')
    except OSError:
        continue
    for t in tids:
        try:
            st = open('/proc/1/task/%s/status' % t).read()
        except OSError:
            continue
        if ('\nUid:\t%d\t' % uid) not in st:
            continue
        seen += 1
        try:
            os.close(os.open('/proc/1/task/%s/mem' % t, os.O_RDWR)); opened += 1
        except OSError:
            pass
print(seen, opened)
`
	p, err := s.Exec(t.Context(), ExecSpec{Argv: []string{"python3", "-c", attacker}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 60; i++ {
		if _, err := s.Exec(t.Context(), ExecSpec{Argv: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
	}
	mustExec(t, s, ExecSpec{Argv: []string{"touch", "/tmp/stop"}})
	res, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	var seen, opened int
	if _, err := fmt.Sscan(string(res.Stdout), &seen, &opened); err != nil {
		t.Fatalf("attacker output %q (stderr %q): %v", res.Stdout, res.Stderr, err)
	}
	if opened != 0 {
		t.Errorf("the sandbox opened init's memory %d times", opened)
	}
	t.Logf("job threads seen as the sandbox uid: %d, init memory opened: %d", seen, opened)
}

// TestSandboxNoLeaks: Create, execs (one timed out, one not found, one
// killed by ctx), Destroy: the executor's process ends with the fds and
// goroutines it started with.
func TestSandboxNoLeaks(t *testing.T) {
	e, _ := newTestExecutor(t, func(c *Config) { c.PoolSize = -1 })
	cycle := func() {
		s, err := e.Create(t.Context(), PrepareSpec{}, StartSpec{})
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, s, ExecSpec{Argv: sh("echo hi; cat"), Stdin: strings.NewReader("in")})
		mustExec(t, s, ExecSpec{Argv: []string{"sleep", "60"}, Timeout: 100 * time.Millisecond})
		if _, err := s.Exec(t.Context(), ExecSpec{Argv: []string{"airlock-no-such-command"}}); err == nil {
			t.Error("missing command started")
		}
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		p, err := s.Exec(ctx, ExecSpec{Argv: []string{"sleep", "60"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Wait(); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Wait after ctx: got %v", err)
		}
		cancel()
		if _, err := s.Exec(t.Context(), ExecSpec{Argv: sh("sleep 60 & echo bg")}); err != nil {
			t.Fatal(err)
		}
		destroyAndCheck(t, s)
	}
	cycle() // warm up: lazily opened fds and long-lived goroutines of the runtime
	fds, gs := len(openFDs(t)), runtime.NumGoroutine()
	cycle()
	assertNoFDGrowth(t, fds, "create, exec, destroy")
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > gs && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > gs {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: got %d, want at most %d\n%s", n, gs, buf[:runtime.Stack(buf, true)])
	}
}

// TestSandboxAtItsPidsLimit: while a fork bomb of the sandbox's own holds
// its pids limit, an exec is refused with an error saying so (init, which
// needs a thread to start one, lives on); once the bomb's timeout killed it,
// execs run again.
func TestSandboxAtItsPidsLimit(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	if !e.cgm.have["pids"] {
		t.Skip("no pids controller")
	}
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{Limits: Limits{Pids: 16}})
	bomb := "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)\n"
	p, err := s.Exec(t.Context(), ExecSpec{Argv: []string{"python3", "-c", bomb}, Timeout: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, "the bomb to fill the limit", func() bool { cur, max, _, _ := s.slot.cg.jobsPids(); return cur >= max })
	// Refused before anything is sent to init (ErrPidsLimit), or, if a task
	// of the bomb ended meanwhile and another took its place as the job
	// forked, by the failed fork.
	_, err = s.Exec(t.Context(), ExecSpec{Argv: []string{"true"}})
	if !errors.Is(err, ErrPidsLimit) && (err == nil || !strings.Contains(err.Error(), "process limit")) {
		t.Errorf("exec at the limit: got %v, want a refusal naming the pids limit", err)
	}
	if res, err := p.Wait(); err != nil || !res.TimedOut {
		t.Fatalf("bomb: got %+v %v, want timed out", res, err)
	}
	select {
	case <-s.Done():
		t.Fatal("init died")
	default:
	}
	// The killed bomb's tasks leave within moments.
	poll.Until(t, 5*time.Second, "an exec to run after the bomb", func() bool {
		_, err := s.Exec(t.Context(), ExecSpec{Argv: []string{"true"}})
		return err == nil
	})
}

// TestSandboxReapsOrphans: processes an exec left behind that end are
// reaped by init (no zombies), while the sandbox lives on.
func TestSandboxReapsOrphans(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{})
	mustExec(t, s, ExecSpec{Argv: sh("for i in 1 2 3 4 5; do (sleep 0.1 &) ; done")})
	poll.Until(t, 5*time.Second, "no zombie and no sleeper left", func() bool {
		out := mustExec(t, s, ExecSpec{Argv: sh("ps -eo stat=,args= | grep -c '^Z' ; ps -eo args= | grep -c '^sleep 0.1'")}).Stdout
		return string(out) == "0\n0\n"
	})
}

// TestInitSurvivesSignalsFromSandbox: while execs start (their job threads
// briefly run as the sandbox uid, so the sandbox may signal them), code in
// the sandbox sends every signal 1-31 to those threads; init catches them
// all (SIGKILL and SIGSTOP from inside its namespace the kernel drops) and
// lives on. Regression: a Go program dies of an unexpected SIGABRT, SIGILL,
// SIGTRAP, SIGSYS..., and init caught only a few.
func TestInitSurvivesSignalsFromSandbox(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{})
	attacker := `import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
uid, sent, end = os.getuid(), 0, time.time() + 8
sigs = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31]
while time.time() < end and not os.path.exists('/tmp/stop'):
    try:
        tids = os.listdir('/proc/1/task')
    except OSError:
        continue
    for t in tids:
        try:
            st = open('/proc/1/task/%s/status' % t).read()
        except OSError:
            continue
        if ('\nUid:\t%d\t' % uid) in st:
            for sig in sigs:
                if libc.syscall(234, 1, int(t), sig) == 0:
                    sent += 1
print(sent)
`
	p, err := s.Exec(t.Context(), ExecSpec{Argv: []string{"python3", "-c", attacker}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 60; i++ {
		if _, err := s.Exec(t.Context(), ExecSpec{Argv: []string{"true"}}); err != nil {
			t.Fatalf("exec %d: %v", i, err)
		}
	}
	mustExec(t, s, ExecSpec{Argv: []string{"touch", "/tmp/stop"}})
	res, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
		t.Fatal("init died")
	default:
	}
	t.Logf("signals delivered to init's job threads: %s", strings.TrimSpace(string(res.Stdout)))
}

// TestInitKeepsPidsHeadroom (regression: init shared the pids limit with the
// sandbox's processes, so a fork bomb that filled it left init unable to make
// the thread the next job or its own runtime needed, and a Go program that
// cannot make a thread aborts: the sandbox died, and Run's fork bomb test
// failed with "init exited unexpectedly"). On v1 every job is born in the
// jobs child of the pids cgroup, whose limit is the sandbox's; init, in the
// parent, keeps initPidsOverhead tasks. While a bomb holds the jobs' limit,
// init still starts a job's thread (the fork fails, with an error saying
// why) and lives.
func TestInitKeepsPidsHeadroom(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	if e.cgm.v2 || !e.cgm.have["pids"] {
		t.Skip("the jobs child is a v1 pids hierarchy's (v2: RLIMIT_NPROC is the sandbox's limit)")
	}
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{Limits: Limits{Pids: 16}})
	bomb := "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)\n"
	p, err := s.Exec(t.Context(), ExecSpec{Argv: []string{"python3", "-c", bomb}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got := cgroupV1Of(p, s); got != filepath.Join(strings.TrimPrefix(s.slot.cg.dirs["pids"], e.cgm.root+"/pids"), jobsCgroup) {
		t.Errorf("the exec's pids cgroup: got %q, want the jobs child", got)
	}
	poll.Until(t, 5*time.Second, "the bomb to fill the jobs' limit", func() bool {
		cur, max, _, _ := s.slot.cg.jobsPids()
		return cur >= max
	})
	for i := 0; i < 10; i++ {
		r, err := s.sendJob(&message{Type: msgExec, Exec: &execRequest{ID: "h" + strconv.Itoa(i), Argv: []string{"/bin/true"}, Dir: "/"}},
			s.newJob("h"), devNull(t), devNull(t), devNull(t))
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.await(t.Context(), r)
		if err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
		if m.Type != msgError || !strings.Contains(m.Error, "process limit") {
			t.Errorf("job %d at the limit: got %+v, want a refusal naming the process limit", i, m)
		}
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

// cgroupV1Of returns the v1 pids cgroup of an exec's process, found among
// the sandbox's processes by its audit session.
func cgroupV1Of(p *Process, s *Sandbox) string {
	ps, _ := s.slot.cg.pids()
	for _, pid := range ps {
		if n, ok := auditSession(pid); ok && n == p.session {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
			for _, l := range strings.Split(string(b), "\n") {
				if f := strings.SplitN(l, ":", 3); len(f) == 3 && f[1] == "pids" {
					return f[2]
				}
			}
		}
	}
	return ""
}

// TestSandboxKillStopsEveryProcess pins what Kill promises before the
// teardown: when it returns, no process of the sandbox runs any more. Writers
// left in the background by an exec (not init's direct job) append to host
// files through the workspace; after Kill the files never grow again. (The
// kernel kills the rest of a PID namespace only once its init's address space
// is torn down, milliseconds after init's SIGKILL: Kill must not count on
// that.)
func TestSandboxKillStopsEveryProcess(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	ws := hostDir(t, 0o777)
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{Workspace: ws})
	files := []string{"w1", "w2", "w3"}
	// Nothing holds the exec's output: Kill's wait for it is no help.
	script := "exec </dev/null >/dev/null 2>&1; "
	for _, f := range files {
		script += "(while :; do echo x >> " + f + "; done) & "
	}
	p, err := s.Exec(t.Context(), ExecSpec{Argv: sh(script + "sleep 60")})
	if err != nil {
		t.Fatal(err)
	}
	size := func(f string) int64 {
		st, err := os.Stat(filepath.Join(ws, f))
		if err != nil {
			return -1
		}
		return st.Size()
	}
	if !poll.Within(10*time.Second, func() bool {
		for _, f := range files {
			if size(f) < 64 {
				return false
			}
		}
		return true
	}) {
		t.Fatal("the background writers did not start")
	}
	u, err := s.Kill(t.Context())
	if err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if u.Pids != 0 {
		t.Errorf("final usage after Kill: got %d pids, want 0", u.Pids)
	}
	before := map[string]int64{}
	for _, f := range files {
		before[f] = size(f)
	}
	res, werr := p.Wait() // settled by Kill: returns at once
	if !errors.Is(werr, ErrSandboxGone) && (res == nil || res.Signal == 0) {
		t.Errorf("Wait after Kill: got %+v, %v; want killed or ErrSandboxGone", res, werr)
	}
	time.Sleep(200 * time.Millisecond)
	for _, f := range files {
		if got := size(f); got != before[f] {
			t.Errorf("%s grew after Kill returned: got %d bytes, want %d", f, got, before[f])
		}
	}
}

// TestSpareJobThreadWaitsInJobsCgroup: init makes each job's thread ahead of
// the job, in the v1 jobs cgroup, so a job's start waits for neither a new
// thread nor a cgroup move: from the moment it is configured (a pooled
// sandbox waits with it, before Start), and again after every job is
// forked, one thread of init waits in the jobs child. Every exec, the first
// and one after a quiet spell, is born in the jobs child (its pids cgroup
// seen from the host while it runs). Regression: the first thread was made
// at Start, and the first exec of a pooled sandbox waited for its move (an
// RCU grace period, 10-15 ms).
func TestSpareJobThreadWaitsInJobsCgroup(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	if e.cgm.v2 || !e.cgm.have["pids"] {
		t.Skip("the jobs child is a v1 pids hierarchy's")
	}
	s, err := e.Prepare(t.Context(), PrepareSpec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyAndCheck(t, s) })
	initThreadsInJobs := func() int {
		b, err := os.ReadFile(filepath.Join(s.slot.cg.jobs, "tasks"))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range strings.Fields(string(b)) {
			if _, err := os.Stat("/proc/" + strconv.Itoa(s.init.Pid) + "/task/" + f); err == nil {
				n++
			}
		}
		return n
	}
	wantJobs := filepath.Join(strings.TrimPrefix(s.slot.cg.dirs["pids"], e.cgm.root+"/pids"), jobsCgroup)
	poll.Until(t, 10*time.Second, "a spare job thread in the jobs cgroup of a prepared sandbox", func() bool { return initThreadsInJobs() == 1 })
	if err := s.Start(t.Context(), StartSpec{}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		poll.Until(t, 10*time.Second, "a spare job thread in the jobs cgroup", func() bool { return initThreadsInJobs() == 1 })
		if i == 2 {
			time.Sleep(150 * time.Millisecond) // a quiet spell
		}
		p, err := s.Exec(t.Context(), ExecSpec{Argv: []string{"sleep", "60"}})
		if err != nil {
			t.Fatal(err)
		}
		if got := cgroupV1Of(p, s); got != wantJobs {
			t.Errorf("exec %d: pids cgroup: got %q, want the jobs child %q", i, got, wantJobs)
		}
		if err := p.Signal(unix.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Wait(); err != nil {
			t.Fatal(err)
		}
	}
}
