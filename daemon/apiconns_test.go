package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/sandboxd"
)

func TestDeriveConnCaps(t *testing.T) {
	tests := []struct {
		name    string
		api     config.API
		nofile  uint64
		want    connCaps
		wantErr string
	}{
		{name: "kernel default", nofile: 1024, want: connCaps{total: 128, perUID: 16, rootReserve: 16, streamsPerUID: 8}},
		{name: "this host's", nofile: 20000, want: connCaps{total: 2500, perUID: 64, rootReserve: 312, streamsPerUID: 32}},
		{name: "systemd hard limit", nofile: 524288, want: connCaps{total: 4096, perUID: 64, rootReserve: 512, streamsPerUID: 32}},
		{name: "tiny limit", nofile: 40, want: connCaps{total: 8, perUID: 2, rootReserve: 1, streamsPerUID: 1}},
		{name: "configured", api: config.API{MaxConns: 100, MaxConnsPerUID: 10, MaxStreamsPerUID: 3}, nofile: 1024,
			want: connCaps{total: 100, perUID: 10, rootReserve: 12, streamsPerUID: 3}},
		{name: "configured over a quarter", api: config.API{MaxConns: 300}, nofile: 1024, wantErr: "api.max_conns: 300"},
		{name: "per-uid over the derived total", api: config.API{MaxConnsPerUID: 200}, nofile: 1024, wantErr: "api.max_conns_per_uid: 200"},
		{name: "streams over the derived per-uid", api: config.API{MaxStreamsPerUID: 20}, nofile: 1024, wantErr: "api.max_streams_per_uid: 20"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := deriveConnCaps(tt.api, tt.nofile)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %+v, %v; want an error naming %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// TestAPIConnsAdmit: one uid stops at its own cap, every other uid together
// at the total less root's reserve, and root gets in up to the total; a
// closed connection gives its place back.
func TestAPIConnsAdmit(t *testing.T) {
	a := newAPIConns(connCaps{total: 6, perUID: 2, rootReserve: 2, streamsPerUID: 1}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	steps := []struct {
		uid  int
		want string
	}{
		{1000, ""}, {1000, ""}, {1000, refusedPerUID},
		{1001, ""}, {1001, ""},
		{1002, refusedTotal}, // four of six: the rest is root's
		{-1, refusedTotal},   // an unidentified peer is not root
		{0, ""}, {0, ""},
		{0, refusedTotal},
	}
	for i, s := range steps {
		if got := a.admit(s.uid); got != s.want {
			t.Fatalf("step %d: admit uid %d: got %q, want %q", i, s.uid, got, s.want)
		}
	}
	a.release(1000)
	if got := a.admit(1002); got != "" {
		t.Fatalf("uid 1002 after uid 1000 closed one: got %q, want admitted", got)
	}
	if got := a.admit(1000); got != refusedTotal {
		t.Fatalf("uid 1000 again: got %q, want %q", got, refusedTotal)
	}
}

// openStream starts a GET whose body streams (events) and returns its
// response once the header is in.
func openStream(t *testing.T, ctx context.Context, c *apiClient, path string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestAttackEventsStreamsAcrossSandboxes: a caller opening an events stream
// on each of many sandboxes of its own (each under the per-sandbox cap of
// four) is stopped at api.max_streams_per_uid; another caller's streams and
// execs, and root's, go on working; a stream closed gives its place back.
func TestAttackEventsStreamsAcrossSandboxes(t *testing.T) {
	w := newFakeWorld(t, func(c *config.Config) { c.API.MaxConnsPerUID, c.API.MaxStreamsPerUID = 8, 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	attacker, other, root := w.client(1000), w.client(1001), w.client(0)
	var held []*http.Response
	for i := range 3 {
		sb := attacker.create(t, "")
		resp := openStream(t, ctx, attacker, "/v1/sandboxes/"+sb.ID+"/events")
		want := http.StatusOK
		if i == 2 {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Fatalf("events stream %d of uid 1000: got %d, want %d", i, resp.StatusCode, want)
		}
		held = append(held, resp)
	}
	for _, c := range []struct {
		name string
		c    *apiClient
	}{{"uid 1001", other}, {"root", root}} {
		sb := c.c.create(t, "")
		if resp := openStream(t, ctx, c.c, "/v1/sandboxes/"+sb.ID+"/events"); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s's events stream: got %d, want 200", c.name, resp.StatusCode)
		}
		if out := output(c.c.exec(t, sb.ID, api.ExecRequest{Argv: []string{"echo", "ok"}}), api.FrameStdout); out != "ok\n" {
			t.Fatalf("%s's exec: got %q, want ok", c.name, out)
		}
	}
	held[0].Body.Close()
	sb := attacker.create(t, "")
	poll := time.Now().Add(10 * time.Second)
	for {
		resp := openStream(t, ctx, attacker, "/v1/sandboxes/"+sb.ID+"/events")
		if resp.StatusCode == http.StatusOK {
			break
		}
		resp.Body.Close()
		if time.Now().After(poll) {
			t.Fatalf("uid 1000 after closing a stream: got %d, want 200", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAttackSlowExecStreams: a caller holding execs that never end (each an
// open NDJSON stream) is refused a third at api.max_streams_per_uid before
// anything runs; another caller's exec runs.
func TestAttackSlowExecStreams(t *testing.T) {
	w := newFakeWorld(t, func(c *config.Config) { c.API.MaxConnsPerUID, c.API.MaxStreamsPerUID = 8, 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	attacker, other := w.client(1000), w.client(1001)
	sb := attacker.create(t, "")
	for i := range 2 {
		s := attacker.startExec(t, ctx, sb.ID, api.ExecRequest{Argv: []string{"sleep", "60"}})
		t.Cleanup(func() { s.resp.Body.Close() })
		if f := s.next(t); s.status != http.StatusOK || f == nil || f.Type != api.FrameStarted {
			t.Fatalf("slow exec %d: got %d %+v, want 200 and started", i, s.status, f)
		}
	}
	s := attacker.startExec(t, ctx, sb.ID, api.ExecRequest{Argv: []string{"sleep", "60"}})
	s.resp.Body.Close()
	if s.status != http.StatusTooManyRequests {
		t.Fatalf("third exec stream: got %d, want 429", s.status)
	}
	var got api.Sandbox
	attacker.json(t, "GET", "/v1/sandboxes/"+sb.ID, "").decode(t, &got)
	if got.ExecsTotal != 2 {
		t.Fatalf("the sandbox ran %d execs, want 2 (the refused one never started)", got.ExecsTotal)
	}
	osb := other.create(t, "")
	if out := output(other.exec(t, osb.ID, api.ExecRequest{Argv: []string{"echo", "ok"}}), api.FrameStdout); out != "ok\n" {
		t.Fatalf("uid 1001's exec: got %q, want ok", out)
	}
}

// TestCallerLimits: what one caller's sandboxes book together is held under
// api.caller_limits, the request refused naming the limit (4xx, nothing
// built); root is exempt; a sandbox deleted gives its share back.
func TestCallerLimits(t *testing.T) {
	tests := []struct {
		name, first, second, field string
	}{
		{"memory", `{"limits":{"memory":"600M"}}`, `{"limits":{"memory":"500M"}}`, "limits.memory"},
		{"cpus", `{"limits":{"cpus":1.5}}`, `{"limits":{"cpus":1}}`, "limits.cpus"},
		{"pids", `{"limits":{"pids":600}}`, `{"limits":{"pids":500}}`, "limits.pids"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newFakeWorld(t, func(c *config.Config) {
				c.API.CallerLimits = config.CallerLimits{Memory: 1 << 30, CPUs: 2, Pids: 1000}
			})
			user, root := w.client(1000), w.client(0)
			first := user.create(t, tt.first)
			built := len(w.exe.all())
			r := user.json(t, "POST", "/v1/sandboxes", tt.second)
			if e := r.apiError(t); r.status != http.StatusTooManyRequests || e.Code != api.CodeLimit || e.Field != tt.field {
				t.Fatalf("second create: got %d %+v, want 429 naming %s", r.status, e, tt.field)
			}
			if got := len(w.exe.all()); got != built {
				t.Fatalf("the refused create built %d sandboxes, want none", got-built)
			}
			// /v1/run books the same way.
			r = user.json(t, "POST", "/v1/run", fmt.Sprintf(`{"argv":["true"],%s`, strings.TrimPrefix(tt.second, "{")))
			if e := r.apiError(t); r.status != http.StatusTooManyRequests || e.Field != tt.field {
				t.Fatalf("run: got %d %+v, want 429 naming %s", r.status, e, tt.field)
			}
			for range 2 {
				root.create(t, tt.second)
			}
			if r := user.json(t, "DELETE", "/v1/sandboxes/"+first.ID, ""); r.status != http.StatusOK {
				t.Fatalf("delete: %d %s", r.status, r.body)
			}
			user.create(t, tt.second)
		})
	}
}

// TestAttackSandboxFloodBooksPids: many small sandboxes each asking for
// pids add up: the caller is stopped at the default ceiling, a quarter of
// pid_max, before it books the host's pid table, and another caller still
// creates.
func TestAttackSandboxFloodBooksPids(t *testing.T) {
	w := newFakeWorld(t, func(c *config.Config) { c.Sandbox.MaxSandboxesPerOwner = 64 })
	w.d.host.pidMax, w.d.host.pids = 32768, 32768
	user, other := w.client(1000), w.client(1001)
	n := 0
	for ; n < 64; n++ {
		r := user.json(t, "POST", "/v1/sandboxes", `{"limits":{"pids":1000}}`)
		if r.status == http.StatusCreated {
			continue
		}
		if e := r.apiError(t); r.status != http.StatusTooManyRequests || e.Field != "limits.pids" {
			t.Fatalf("create %d: got %d %+v, want 429 naming limits.pids", n, r.status, e)
		}
		break
	}
	if n != 8 {
		t.Fatalf("uid 1000 created %d sandboxes of 1000 pids, want 8 (pid_max 32768 / 4)", n)
	}
	other.create(t, `{"limits":{"pids":1000}}`)
}

// TestPidsBoundedByHost: limits.pids above the host's bound (pid_max, and
// what RLIMIT_NPROC lets a job set) is a 400 naming it, never a 500 from
// the exec that cannot set its rlimit.
func TestPidsBoundedByHost(t *testing.T) {
	w := newFakeWorld(t)
	w.d.host.pids = 32768
	c := w.client(1000)
	for _, tt := range []struct {
		pids int
		want int
	}{{32768, http.StatusCreated}, {32769, http.StatusBadRequest}, {1_000_000, http.StatusBadRequest}} {
		r := c.json(t, "POST", "/v1/sandboxes", fmt.Sprintf(`{"limits":{"pids":%d}}`, tt.pids))
		if r.status != tt.want {
			t.Fatalf("pids %d: got %d %s, want %d", tt.pids, r.status, r.body, tt.want)
		}
		if tt.want == http.StatusBadRequest {
			if e := r.apiError(t); e.Field != "limits.pids" || !strings.Contains(e.Message, "pid_max") {
				t.Fatalf("pids %d: got %+v, want limits.pids naming pid_max", tt.pids, e)
			}
		}
	}
}

// TestKernelRefusedLimitIs400: a create whose limit the kernel refuses in
// the cgroup (sandboxd.LimitError) is a 400 naming the field, once a 500
// carrying the cgroup error; any other start failure stays a 500.
func TestKernelRefusedLimitIs400(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		status int
		field  string
	}{
		{"memory under use", &sandboxd.LimitError{Limit: "memory", File: "/sys/fs/cgroup/memory/x/memory.limit_in_bytes", Value: "4194304", Err: syscall.EBUSY}, http.StatusBadRequest, "limits.memory"},
		{"cpus out of range", &sandboxd.LimitError{Limit: "cpus", File: "/sys/fs/cgroup/x/cpu.max", Value: "500 100000", Err: syscall.EINVAL}, http.StatusBadRequest, "limits.cpus"},
		{"pids out of range", &sandboxd.LimitError{Limit: "pids", File: "/sys/fs/cgroup/x/pids.max", Value: "5000000", Err: syscall.EINVAL}, http.StatusBadRequest, "limits.pids"},
		{"host failure", errors.New("fake: no cgroup"), http.StatusInternalServerError, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newFakeWorld(t)
			err := fmt.Errorf("sandboxd: start: %w", tt.err)
			w.exe.startErr.Store(&err)
			r := w.client(1000).json(t, "POST", "/v1/sandboxes", "")
			if e := r.apiError(t); r.status != tt.status || e.Field != tt.field {
				t.Fatalf("got %d %+v, want %d naming %q", r.status, e, tt.status, tt.field)
			}
		})
	}
}

// TestRaiseNOFILE: the limit RaiseNOFILE returns is the one in force, never
// lower than before, and at least the hard limit it found (wantNOFILE, at
// most fs.nr_open, where the process may raise the hard limit too).
func TestRaiseNOFILE(t *testing.T) {
	var before unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &before); err != nil {
		t.Fatal(err)
	}
	got, err := RaiseNOFILE()
	if err != nil {
		t.Fatal(err)
	}
	var after unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &after); err != nil {
		t.Fatal(err)
	}
	if got != after.Cur {
		t.Fatalf("returned %d, want the soft limit in force, %d", got, after.Cur)
	}
	if after.Cur < before.Max {
		t.Fatalf("soft limit %d after, want at least the hard limit before, %d", after.Cur, before.Max)
	}
	if want := min(wantNOFILE, nrOpen()); after.Max < want && unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: want, Max: want}) == nil {
		t.Fatalf("hard limit %d although the process may raise it to %d", after.Max, want)
	}
}
