package sandboxd

import (
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit/audittest"
)

// uidProcs lists host processes whose real or effective uid is uid.
func uidProcs(t *testing.T, uid int) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == "Uid:" && (f[1] == strconv.Itoa(uid) || f[2] == strconv.Itoa(uid)) {
				out = append(out, e.Name())
			}
		}
	}
	return out
}

func TestForkBombStoppedByPids(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	bomb := "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
	res := mustRun(t, e, Spec{Argv: []string{"python3", "-c", bomb}, Limits: Limits{Pids: 32, Timeout: 3 * time.Second}})
	if !res.PidsLimitHit {
		t.Errorf("PidsLimitHit: got false, want true")
	}
	if !res.TimedOut || res.ExitStatus() != 124 {
		t.Errorf("got timed_out=%v status=%d, want true 124", res.TimedOut, res.ExitStatus())
	}
	if left := uidProcs(t, res.UID); len(left) > 0 {
		t.Errorf("processes of uid %d survive: %v", res.UID, left)
	}
}

func TestMemoryBombOOMKilled(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	bomb := "a = []\nwhile True:\n    a.append(bytearray(8 << 20))\n"
	res := mustRun(t, e, Spec{Argv: []string{"python3", "-c", bomb}, Limits: Limits{Memory: 64 << 20, Timeout: 20 * time.Second}})
	if !res.OOMKilled {
		t.Errorf("OOMKilled: got false, want true (exit %d signal %d)", res.ExitCode, res.Signal)
	}
	if res.ExitStatus() != 137 || res.TimedOut {
		t.Errorf("status: got %d timed_out=%v, want 137 false", res.ExitStatus(), res.TimedOut)
	}
	if res.PeakMemory < 32<<20 || res.PeakMemory > 80<<20 {
		t.Errorf("peak memory: got %d, want about the 64MiB limit", res.PeakMemory)
	}
	// The test process (airlock) lives: we are here. A normal run is not OOM.
	ok := mustRun(t, e, Spec{Argv: []string{"true"}, Limits: Limits{Memory: 64 << 20}})
	if ok.OOMKilled || ok.ExitCode != 0 {
		t.Errorf("control run: got oom=%v exit=%d", ok.OOMKilled, ok.ExitCode)
	}
}

// TestTimeoutKillsWholeTree: a CPU spinner, a SIGTERM-ignoring daemon in its own
// session and a sleeper are all gone after the deadline.
func TestTimeoutKillsWholeTree(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	script := `setsid sh -c 'trap "" TERM HUP; while :; do :; done' >/dev/null 2>&1 &
	nohup sleep 1000 >/dev/null 2>&1 &
	(trap "" TERM; sleep 1000) &
	echo started; while :; do :; done`
	start := time.Now()
	res := mustRun(t, e, Spec{Argv: sh(script), Limits: Limits{Timeout: 2 * time.Second}})
	if !res.TimedOut || res.ExitStatus() != 124 {
		t.Errorf("got timed_out=%v status=%d, want true 124", res.TimedOut, res.ExitStatus())
	}
	if !strings.Contains(string(res.Stdout), "started") {
		t.Errorf("stdout: got %q", res.Stdout)
	}
	if left := uidProcs(t, res.UID); len(left) > 0 {
		t.Errorf("processes of uid %d survive: %v", res.UID, left)
	}
	if res.CPU <= 0 { // the amount depends on how loaded the shared machine is
		t.Errorf("cpu: got %v, want the spinners' time", res.CPU)
	}
	t.Logf("wall %v (run took %v), cpu %v", res.Wall, time.Since(start), res.CPU)
}

func TestTmpfsFillENOSPC(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	script := `for d in /tmp $HOME; do dd if=/dev/zero of=$d/fill bs=64k count=64 2>&1 | grep -o 'No space left on device' | head -n1; done
	i=0; while [ $i -lt 100 ]; do touch /tmp/n$i 2>/dev/null || { echo inodes-exhausted; break; }; i=$((i+1)); done`
	res := mustRun(t, e, Spec{Argv: sh(script), Limits: Limits{TmpSize: 1 << 20, TmpInodes: 32}})
	want := "No space left on device\nNo space left on device\ninodes-exhausted"
	if got := strings.TrimSpace(string(res.Stdout)); got != want {
		t.Errorf("got %q, want %q (stderr %q)", got, want, res.Stderr)
	}
}

// TestOutputFloodTruncated: 200 MB of output keeps 64 KiB, counts every byte and
// never grows the executor's heap by more than a few MiB.
func TestOutputFloodTruncated(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	var stopOnce sync.Once
	stopMonitor := func() {
		stopOnce.Do(func() { close(stop) })
		<-done
	}
	t.Cleanup(stopMonitor) // also when the run fails the test early
	go func() {
		defer close(done)
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	const n = 200 << 20
	res := mustRun(t, e, Spec{Argv: sh("head -c " + strconv.Itoa(n) + " /dev/zero; head -c 100000 /dev/zero >&2"),
		Limits: Limits{OutputCap: 64 << 10}})
	stopMonitor()
	if res.StdoutBytes != n || len(res.Stdout) != 64<<10 || !res.Truncated {
		t.Errorf("stdout: got bytes=%d kept=%d truncated=%v, want %d %d true", res.StdoutBytes, len(res.Stdout), res.Truncated, n, 64<<10)
	}
	if res.StderrBytes != 100000 || len(res.Stderr) != 64<<10 {
		t.Errorf("stderr: got bytes=%d kept=%d", res.StderrBytes, len(res.Stderr))
	}
	if grew := int64(peak.Load()) - int64(before.HeapInuse); grew > 16<<20 {
		t.Errorf("heap grew %d bytes during a %d byte flood", grew, n)
	}
}

// TestStaleCgroupsReaped: a sandbox cgroup whose owner is gone (no lock held) is
// removed when an executor starts; one whose lock is held is left alone.
func TestStaleCgroupsReaped(t *testing.T) {
	e, _ := newTestExecutor(t, func(c *Config) { c.PoolSize = -1 })
	stale, err := e.cgm.create("airlock-stale0001")
	if err != nil {
		t.Fatal(err)
	}
	live, err := e.pool.make()
	if err != nil {
		t.Fatal(err)
	}
	defer live.destroy()
	e2, err := New(e.cfg, &audittest.Log{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	for _, d := range stale.uniq {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("stale cgroup %s: got %v, want removed", d, err)
		}
	}
	for _, d := range live.cg.uniq {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("live cgroup %s removed: %v", d, err)
		}
	}
}

// TestCgroupLimitFailureNeverRuns: a limit the kernel refuses (an io throttle on a
// device that does not exist) fails the run before anything starts.
func TestCgroupLimitFailureNeverRuns(t *testing.T) {
	e, au := newTestExecutor(t, nil)
	ws := hostDir(t, 0o755)
	_, err := e.Run(t.Context(), Spec{Argv: sh("touch " + ws + "/ran"), Workspace: ws,
		Limits: Limits{IO: []IOLimit{{Device: "1:250", ReadBPS: 1 << 20}}}})
	if err == nil || !strings.Contains(err.Error(), "1:250") {
		t.Errorf("got %v, want an error naming the io device", err)
	}
	if _, err := os.Stat(ws + "/ran"); err == nil {
		t.Errorf("the command ran")
	}
	if n := len(au.Records()); n != 0 {
		t.Errorf("audit records: got %d, want none (nothing started)", n)
	}
}

// TestCgroupMoveFailureNeverRuns: init builds the filesystem while it is moved
// into its v1 cgroup; when the move fails, the go message is never sent and the
// command never runs.
func TestCgroupMoveFailureNeverRuns(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	if e.cgm.v2 {
		t.Skip("v2 children are born in their cgroup; there is no move (v1-only path)")
	}
	write := e.cgm.write
	e.cgm.write = func(path, v string) error {
		if strings.HasSuffix(path, "/cgroup.procs") {
			return errors.New("refused by the test")
		}
		return write(path, v)
	}
	ws := hostDir(t, 0o755)
	_, err := e.Run(t.Context(), Spec{Argv: sh("touch " + ws + "/ran"), Workspace: ws})
	if err == nil || !strings.Contains(err.Error(), "refused by the test") {
		t.Errorf("got %v, want the move's error", err)
	}
	if _, err := os.Stat(ws + "/ran"); err == nil {
		t.Errorf("the command ran")
	}
}
