package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/test/poll"
)

// proc identifies a process across pid reuse: pid and start time.
type proc struct {
	pid   int
	start string
}

// procStat returns a process's parent pid and start time from /proc/PID/stat.
func procStat(pid int) (ppid int, start string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, "", false
	}
	f := strings.Fields(s[i+1:])
	// After the command: state(0) ppid(1) ... starttime is field 22 of stat, index 19 here.
	if len(f) < 20 {
		return 0, "", false
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, f[19], true
}

// descendants lists every live process below root.
func descendants(root int) []proc {
	children := map[int][]int{}
	starts := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, start, ok := procStat(pid); ok {
			children[ppid] = append(children[ppid], pid)
			starts[pid] = start
		}
	}
	var out []proc
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, proc{c, starts[c]})
			queue = append(queue, c)
		}
	}
	return out
}

func (p proc) alive() bool {
	_, start, ok := procStat(p.pid)
	return ok && start == p.start
}

// TestRootKilledAirlockLeavesNoEgress: SIGKILL to airlock while its sandbox
// loops over curl. The sandbox's processes die (parent-death signal), the
// namespace left behind has no way out (nothing listens behind its rules), and
// the next `airlock run` removes it.
func TestRootKilledAirlockLeavesNoEgress(t *testing.T) {
	e := newEnv(t, "")
	id := sandboxID("kill")
	nsPath := "/run/netns/airlock-" + id
	before := snap(w.pypi)
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := e.airlockCmd(ctx, []string{"--id", id}, []string{"/bin/sh", "-c",
		`i=0; while [ $i -lt 3000 ]; do curl -s -o /dev/null --max-time 5 https://pypi.org/simple/; i=$((i+1)); done`})
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = exec.Command("ip", "netns", "delete", "airlock-"+id).Run()
	})
	poll.Until(t, time.Minute, "the sandbox's curls to reach pypi.org", func() bool {
		return snap(w.pypi).sub(before).requests >= 2
	})
	procs := descendants(cmd.Process.Pid)
	if len(procs) == 0 {
		t.Fatal("airlock has no child processes while its sandbox runs")
	}
	if _, err := os.Stat(nsPath); err != nil {
		t.Fatalf("sandbox namespace: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("airlock: got %v, want killed by SIGKILL\n%s", err, out.String())
	}
	poll.Until(t, 30*time.Second, "every sandbox process to die", func() bool {
		for _, p := range procs {
			if p.alive() {
				return false
			}
		}
		return true
	})

	// The namespace outlives airlock; probe it from inside: through the proxy
	// address, transparently by name and by IP, and DNS. Nothing may arrive.
	if _, err := os.Stat(nsPath); err == nil {
		after := snap(w.pypi)
		queries := w.net.Queries("pypi.org")
		ip := w.pypi.IP.String()
		probe := exec.Command("ip", "netns", "exec", "airlock-"+id, "sh", "-c", `
curl -s -o /dev/null --max-time 5 -x http://127.0.0.1:3128 https://pypi.org/simple/; echo "proxy=$?"
curl -s -o /dev/null --max-time 5 --noproxy '*' --resolve pypi.org:443:`+ip+` https://pypi.org/simple/; echo "tls=$?"
curl -s -o /dev/null --max-time 5 --noproxy '*' http://`+ip+`/; echo "http=$?"
dig +time=2 +tries=1 @`+w.net.DNSAddr.Addr().String()+` pypi.org >/dev/null; echo "dns=$?"
`)
		b, err := probe.CombinedOutput()
		if err != nil {
			t.Fatalf("probe in the orphaned namespace: %v\n%s", err, b)
		}
		m := kv(string(b))
		for _, k := range []string{"proxy", "tls", "http", "dns"} {
			if m[k] == "0" || m[k] == "" {
				t.Errorf("orphaned namespace: %s probe got exit %q, want a failure\n%s", k, m[k], b)
			}
		}
		if d := snap(w.pypi).sub(after); d.conns != 0 {
			t.Errorf("pypi.org got %d connections from the orphaned namespace, want 0", d.conns)
		}
		if q := w.net.Queries("pypi.org") - queries; q != 0 {
			t.Errorf("the fake resolver got %d queries from the orphaned namespace, want 0", q)
		}
	} else {
		// Another airlock run on this machine may already have cleaned it up.
		t.Logf("namespace %s already removed by another airlock run: %v", nsPath, err)
	}

	// The next run removes what the dead one left.
	next := newEnv(t, "")
	wantCode(t, next.run(nil, []string{"/bin/true"}), 0)
	if _, err := os.Stat(nsPath); !os.IsNotExist(err) {
		t.Errorf("stale namespace %s after the next airlock run: got %v, want it removed", nsPath, err)
	}
	if _, err := os.Stat(filepath.Join("/run/airlock", "run-"+strconv.Itoa(cmd.Process.Pid))); !os.IsNotExist(err) {
		t.Errorf("stale run dir of pid %d: got %v, want it removed", cmd.Process.Pid, err)
	}
}

// TestRootBrokenPolicyExits2: a policy directory that does not compile stops
// airlock run before anything runs, with exit 2 and the file named.
func TestRootBrokenPolicyExits2(t *testing.T) {
	e := newEnv(t, "")
	pol := filepath.Join(e.dir, "policy")
	ws := filepath.Join(e.dir, "ws")
	for _, d := range []string{pol, ws} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pol, "broken.rego"), []byte("package airlock.egress\n\nallow if {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(ws, "ran")
	res := e.run([]string{"--policy", pol, "--workspace", ws}, []string{"/bin/sh", "-c", "touch " + marker})
	wantCode(t, res, 2)
	if !strings.Contains(res.stderr, "broken.rego") {
		t.Errorf("stderr does not name broken.rego\n%s", res)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the command ran despite the broken policy (%s: %v)", marker, err)
	}
	if _, err := os.Stat(e.audit); err == nil {
		mustNotFind(t, e.records(), match{kind: audit.KindExec})
	}
}

// execEnd returns the exec end record.
func execEnd(t *testing.T, recs []audit.Record) audit.Record {
	t.Helper()
	for _, r := range recs {
		if r.Kind == audit.KindExec && r.Exec != nil && r.Exec.Phase == audit.ExecEnd {
			return r
		}
	}
	t.Fatalf("no exec end record\n%s", dump(recs))
	return audit.Record{}
}

// TestRootTimeoutExits124: the wall-clock limit kills the command.
func TestRootTimeoutExits124(t *testing.T) {
	e := newEnv(t, "")
	res := e.run([]string{"--timeout", "1s"}, []string{"sleep", "30"})
	wantCode(t, res, 124)
	if end := execEnd(t, e.records()); !end.Exec.TimedOut {
		t.Errorf("exec end record: got %+v, want timed_out", end.Exec)
	}
}

// TestRootMemoryBombExits137: a process that grows past --memory is OOM-killed
// and airlock reports it (from the cgroup's counters) and exits 137.
func TestRootMemoryBombExits137(t *testing.T) {
	e := newEnv(t, "")
	res := e.run([]string{"--memory", "64M"}, []string{"python3", "-c",
		"b = []\nfor _ in range(100000):\n    b.append('x' * (8 << 20))\n"})
	wantCode(t, res, 137)
	if end := execEnd(t, e.records()); !end.Exec.OOMKilled {
		t.Errorf("exec end record: got %+v, want oom_killed", end.Exec)
	}
}
