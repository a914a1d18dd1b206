package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/test/poll"
	"github.com/airlock-dev/airlock/test/roottest"
)

// The test binary run as another user (TestMain) in floodModeEnv's mode:
// "idle" or "slowloris" opens floodConnsEnv connections to floodSocketEnv
// and holds them until its stdin closes; "egress" creates a sandbox and
// fetches from the allowed pypi.org three times.
const (
	floodModeEnv   = "ALK_TEST_FLOOD_MODE"
	floodSocketEnv = "ALK_TEST_FLOOD_SOCKET"
	floodConnsEnv  = "ALK_TEST_FLOOD_CONNS"
	// floodWait bounds how long the flooder waits for each connection's
	// answer: a refused one is answered at accept.
	floodWait = 5 * time.Second
)

// fetchPypi is the command a sandbox reaches the allowed host with; it
// prints the status.
var fetchPypi = []string{"curl", "-sS", "--max-time", "20", "-o", "/dev/null", "-w", "%{http_code}", "https://pypi.org/simple/"}

// floodReport is what a flooder saw: connections answered (idle: 200) or
// left waiting (slowloris: an unfinished header is not answered), refused
// (429 then closed), and any other outcome; or the egress mode's fetches.
type floodReport struct {
	Held    int    `json:"held"`
	Refused int    `json:"refused"`
	Failed  int    `json:"failed"`
	Egress  int    `json:"egress"`
	Err     string `json:"error,omitempty"`
}

func floodClient() int {
	sock := os.Getenv(floodSocketEnv)
	var rep floodReport
	if os.Getenv(floodModeEnv) == "egress" {
		rep = egressClient(sock)
		_ = json.NewEncoder(os.Stdout).Encode(rep)
		return 0
	}
	n, _ := strconv.Atoi(os.Getenv(floodConnsEnv))
	slow := os.Getenv(floodModeEnv) == "slowloris"
	var mu sync.Mutex
	var wg sync.WaitGroup
	var held []net.Conn
	for range n {
		c, err := net.DialTimeout("unix", sock, time.Second)
		if err != nil {
			rep.Failed++
			continue
		}
		held = append(held, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := floodOne(c, slow)
			mu.Lock()
			defer mu.Unlock()
			switch out {
			case "held":
				rep.Held++
			case "refused":
				rep.Refused++
			default:
				rep.Failed++
			}
		}()
	}
	wg.Wait()
	_ = json.NewEncoder(os.Stdout).Encode(rep)
	_, _ = io.Copy(io.Discard, os.Stdin) // hold them until the test is done
	for _, c := range held {
		c.Close()
	}
	return 0
}

// floodOne sends a request (slow: a header that never ends) and says what
// came back within floodWait.
func floodOne(c net.Conn, slow bool) string {
	_ = c.SetDeadline(time.Now().Add(floodWait))
	req := "GET /v1/health HTTP/1.1\r\nHost: airlock\r\n\r\n"
	if slow {
		req = "GET /v1/health HTTP/1.1\r\nHost: airlock\r\nX-Slow: "
	}
	// A connection refused at accept may be closed before the request is
	// written (EPIPE): its answer is still there to read.
	_, _ = c.Write([]byte(req))
	line, err := bufio.NewReader(c).ReadString('\n')
	var ne net.Error
	switch {
	case strings.HasPrefix(line, "HTTP/1.1 429 "):
		return "refused"
	case !slow && strings.HasPrefix(line, "HTTP/1.1 200 "):
		return "held"
	case slow && err != nil && line == "" && errors.As(err, &ne) && ne.Timeout():
		return "held"
	}
	return fmt.Sprintf("unexpected: %q, %v", line, err)
}

// egressClient creates a sandbox and fetches from pypi.org three times.
func egressClient(sock string) floodReport {
	var rep floodReport
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := client.New(sock)
	defer c.Close()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		rep.Err = "create: " + err.Error()
		return rep
	}
	defer func() { _, _ = c.DeleteSandbox(context.Background(), sb.ID) }()
	for i := range 3 {
		var out, errb strings.Builder
		res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Argv: fetchPypi}, client.ExecIO{Stdout: &out, Stderr: &errb})
		if err == nil && out.String() == "200" {
			rep.Egress++
			continue
		}
		rep.Err += fmt.Sprintf("fetch %d: %q %q %+v %v; ", i, out.String(), errb.String(), res, err)
	}
	return rep
}

// lowerNOFILE sets the test process's soft RLIMIT_NOFILE to what it has
// open plus room, until the test ends.
func lowerNOFILE(t *testing.T, room uint64) uint64 {
	t.Helper()
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	lowered := rl
	lowered.Cur = min(uint64(len(fds))+room, rl.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl) })
	return lowered.Cur
}

// userBinary copies the test binary where the test's users can run it.
func userBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(searchableTempDir(t), "daemon.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// startAs starts bin as uid in group gid in floodModeEnv's mode and returns
// the first line of its report; its stdin closes at the end of the test.
func startAs(t *testing.T, bin string, uid, gid int, env ...string) floodReport {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Dir = "/"
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	lines := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- l
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(3 * time.Minute):
		t.Fatalf("uid %d's run gave no report; stderr %q", uid, stderr.String())
	}
	var rep floodReport
	if err := json.Unmarshal([]byte(line), &rep); err != nil {
		t.Fatalf("uid %d's report %q: %v; stderr %q", uid, line, err, stderr.String())
	}
	return rep
}

// TestRootAPIConnFlood pins the review's finding that idle keep-alive
// connections of one unprivileged user in the socket's group took the
// daemon to its descriptor limit, after which root's sandbox reached an
// allowed host 0 times in 3. The daemon runs under a lowered RLIMIT_NOFILE
// (its caps derived from it); a user opens more connections than that
// limit, idle after one request or each stuck in a header that never ends
// (slowloris). Past api.max_conns_per_uid each is answered 429 and closed
// (counted); root's sandboxes and another user's then create and reach the
// allowed fake-internet host 3 times of 3, and the API answers root.
func TestRootAPIConnFlood(t *testing.T) {
	roottest.Require(t)
	for _, mode := range []string{"idle", "slowloris"} {
		t.Run(mode, func(t *testing.T) {
			limit := lowerNOFILE(t, 600)
			a := newAPIRoot(t)
			caps := a.d.conns.caps
			if want := int(min(max(limit/apiShare, minDerivedConns), maxDerivedConns)); caps.total != want {
				t.Fatalf("api.max_conns derived from RLIMIT_NOFILE %d: got %d, want %d", limit, caps.total, want)
			}
			bin := userBinary(t)
			pid := strconv.Itoa(os.Getpid())
			flooder := systemUser(t, "alk-f"+pid, a.gid)
			other := systemUser(t, "alk-e"+pid, a.gid)
			n := int(limit)
			rep := startAs(t, bin, flooder, a.gid, floodModeEnv+"="+mode, floodSocketEnv+"="+a.sock, floodConnsEnv+"="+strconv.Itoa(n))
			if rep.Held != caps.perUID || rep.Refused != n-caps.perUID || rep.Failed != 0 {
				t.Fatalf("the flooder's %d connections: got %+v, want %d held and the rest refused", n, rep, caps.perUID)
			}
			if got := a.metric(t, `airlock_api_conns_refused_total{reason="per_uid"}`); got < float64(n-caps.perUID) {
				t.Fatalf("refusals counted: got %v, want at least %d", got, n-caps.perUID)
			}
			p0 := a.n.pypi.Requests()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			if _, err := a.c.Health(ctx); err != nil {
				t.Fatalf("root's health call: %v", err)
			}
			reached := 0
			for range 3 {
				sb, err := a.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
				if err != nil {
					t.Fatalf("root's create: %v", err)
				}
				out, _, _ := a.run(t, sb.ID, fetchPypi...)
				if out == "200" {
					reached++
				}
				if _, err := a.c.DeleteSandbox(ctx, sb.ID); err != nil {
					t.Fatalf("root's delete: %v", err)
				}
			}
			if reached != 3 {
				t.Fatalf("root's sandboxes reached pypi.org %d times of 3", reached)
			}
			if rep := startAs(t, bin, other, a.gid, floodModeEnv+"=egress", floodSocketEnv+"="+a.sock); rep.Egress != 3 || rep.Err != "" {
				t.Fatalf("uid %d's sandbox: %+v, want pypi.org reached 3 times of 3", other, rep)
			}
			if got := a.n.pypi.Requests() - p0; got != 6 {
				t.Fatalf("pypi.org saw %d requests, want 6", got)
			}
		})
	}
}

// TestRootKernelRefusedLimits pins limits the kernel refused when they were
// written into the sandbox's cgroup or rlimits, each once a 500 carrying
// the cgroup error: a memory limit below what the pooled sandbox's init
// already uses (cgroup v1: EBUSY), and pids past what a job's RLIMIT_NPROC
// may be raised to (the exec failed). Each is now a 400 naming the field,
// or (where this kernel takes it) a sandbox that works; cpus 0.01, a CFS
// quota under the kernel's 1ms minimum, is raised to it and works.
func TestRootKernelRefusedLimits(t *testing.T) {
	a := newAPIRoot(t, func(c *config.Config) { c.Sandbox.PoolSize = 1 })
	bound := a.d.host.pids
	tests := []struct {
		name   string
		limits api.Limits
		field  string // "" when the sandbox must work
		maybe  bool   // the kernel may take it (cgroup v2 reclaims instead of EBUSY)
	}{
		{name: "memory under init's use", limits: api.Limits{Memory: 4 << 20}, field: "limits.memory", maybe: true},
		{name: "cpus under the cfs minimum", limits: api.Limits{CPUs: 0.01}},
		{name: "pids at the host's bound", limits: api.Limits{Pids: bound}},
		{name: "pids past the host's bound", limits: api.Limits{Pids: bound + 1}, field: "limits.pids"},
		{name: "pids past RLIMIT_NPROC", limits: api.Limits{Pids: 1_000_000}, field: "limits.pids"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			poll.Until(t, time.Minute, "a pooled sandbox", func() bool { return a.d.pool.depth() >= 1 })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sb, err := a.c.CreateSandbox(ctx, api.CreateSandboxRequest{Limits: tt.limits})
			if err == nil {
				t.Cleanup(func() { _, _ = a.c.DeleteSandbox(context.Background(), sb.ID) })
				switch {
				case tt.field == "":
					a.mustRun(t, sb.ID, "true")
				case !tt.maybe:
					t.Fatalf("limits %+v: created, want 400 naming %s", tt.limits, tt.field)
				}
				return
			}
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Code != api.CodeInvalidField || ae.Field != tt.field || tt.field == "" {
				t.Fatalf("limits %+v: got %v, want a sandbox or 400 naming %q", tt.limits, err, tt.field)
			}
		})
	}
}
