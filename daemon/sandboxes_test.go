package daemon

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/test/poll"
)

const (
	alice = 1001
	bob   = 1002
)

func TestSandboxLifecycle(t *testing.T) {
	w := newFakeWorld(t)
	c := w.client(alice)
	sb := c.create(t, `{"labels": {"agent": "coder"}, "env": ["A=1"], "limits": {"memory": "256M", "cpus": 0.5, "exec_timeout": "30s"}, "idle_timeout": "5m", "max_lifetime": "1h"}`)
	if sb.State != api.StateRunning || sb.Owner != alice || sb.Labels["agent"] != "coder" || sb.WorkDir != "/workspace" {
		t.Fatalf("created %+v", sb)
	}
	if sb.Limits.MemoryBytes != 256<<20 || sb.Limits.CPUs != 0.5 || sb.Limits.ExecTimeoutMS != 30000 || sb.Limits.Pids != 256 {
		t.Fatalf("limits %+v, want the request's memory/cpus/exec_timeout and the config's pids", sb.Limits)
	}
	if sb.IdleTimeoutMS != 300000 || sb.MaxLifetimeMS != 3600000 {
		t.Fatalf("timeouts %d %d", sb.IdleTimeoutMS, sb.MaxLifetimeMS)
	}
	// The create is audited before anything is built, with the owner.
	created := w.audit.Wait(t, "the create record", func(r audit.Record) bool {
		return r.Kind == audit.KindSandbox && r.Sandbox == sb.ID && audittest.HasReason(r, ReasonCreated)
	})
	if created.Owner != strconv.Itoa(alice) {
		t.Fatalf("create record's owner %q, want %d", created.Owner, alice)
	}

	r := c.json(t, "GET", "/v1/sandboxes/"+sb.ID, "")
	var got api.Sandbox
	r.decode(t, &got)
	if r.status != 200 || got.ID != sb.ID || got.Usage.MemoryBytes != 1<<20 {
		t.Fatalf("inspect: %d %+v", r.status, got)
	}
	var list []api.Sandbox
	c.json(t, "GET", "/v1/sandboxes?label=agent=coder", "").decode(t, &list)
	if len(list) != 1 || list[0].ID != sb.ID {
		t.Fatalf("list by label: %+v", list)
	}
	c.json(t, "GET", "/v1/sandboxes?label=agent=other", "").decode(t, &list)
	if len(list) != 0 {
		t.Fatalf("list by another label: %+v, want none", list)
	}

	r = c.json(t, "DELETE", "/v1/sandboxes/"+sb.ID, "")
	var end api.Sandbox
	r.decode(t, &end)
	if r.status != 200 || end.State != api.StateStopped || end.EndReason != ReasonDeleted || end.Usage.MemoryPeakBytes != 3<<20 {
		t.Fatalf("delete: %d %+v", r.status, end)
	}
	w.d.reg.waitTeardowns()
	if n := w.net.tornDown(sb.ID); n != 1 {
		t.Fatalf("namespace torn down %d times, want 1", n)
	}
	if r := c.json(t, "GET", "/v1/sandboxes/"+sb.ID, ""); r.status != 404 {
		t.Fatalf("inspect after delete: %d, want 404", r.status)
	}
	rec := w.audit.Wait(t, "the end record", func(r audit.Record) bool {
		return r.Kind == audit.KindSandbox && r.Sandbox == sb.ID && audittest.HasReason(r, ReasonDeleted)
	})
	if rec.Decision != audit.DecisionAllow || rec.Owner != strconv.Itoa(alice) {
		t.Fatalf("end record %+v, want decision allow, owner %d", rec, alice)
	}
}

// TestOwnerIsolation: a caller other than root sees, uses and deletes only
// its own sandboxes; another's is 404 whatever it asks, and root sees all.
func TestOwnerIsolation(t *testing.T) {
	w := newFakeWorld(t)
	a, b, root := w.client(alice), w.client(bob), w.client(0)
	sa := a.create(t, `{}`)
	sb := b.create(t, `{}`)
	for _, req := range []struct{ method, path, body string }{
		{"GET", "/v1/sandboxes/" + sa.ID, ""},
		{"DELETE", "/v1/sandboxes/" + sa.ID, ""},
		{"POST", "/v1/sandboxes/" + sa.ID + "/exec", `{"argv": ["true"]}`},
		{"GET", "/v1/sandboxes/" + sa.ID + "/execs", ""},
		{"GET", "/v1/sandboxes/" + sa.ID + "/events", ""},
		{"GET", "/v1/sandboxes/" + sa.ID + "/files?path=/workspace/x", ""},
		{"PUT", "/v1/sandboxes/" + sa.ID + "/files?path=/workspace", ""},
		{"PUT", "/v1/sandboxes/" + sa.ID + "/execs/x1/stdin", ""},
		{"POST", "/v1/sandboxes/" + sa.ID + "/execs/x1/signal", `{"signal": "KILL"}`},
	} {
		r := b.json(t, req.method, req.path, req.body)
		if e := r.apiError(t); r.status != 404 || e.Code != api.CodeNotFound {
			t.Errorf("bob %s %s: got %d %+v, want 404 not_found", req.method, req.path, r.status, e)
		}
	}
	if w.exe.all()[0].running() != 0 {
		t.Fatal("bob's exec ran in alice's sandbox")
	}
	var list []api.Sandbox
	b.json(t, "GET", "/v1/sandboxes", "").decode(t, &list)
	if len(list) != 1 || list[0].ID != sb.ID {
		t.Fatalf("bob lists %+v, want only his", list)
	}
	var h api.Health
	b.json(t, "GET", "/v1/health", "").decode(t, &h)
	if len(h.Sandboxes) != 1 || h.Sandboxes[0] != sb.ID {
		t.Fatalf("bob's health lists %v", h.Sandboxes)
	}
	root.json(t, "GET", "/v1/sandboxes", "").decode(t, &list)
	if len(list) != 2 {
		t.Fatalf("root lists %d sandboxes, want 2", len(list))
	}
	if r := root.json(t, "GET", "/v1/sandboxes/"+sa.ID, ""); r.status != 200 {
		t.Fatalf("root inspects alice's: %d", r.status)
	}
	for _, req := range []struct{ method, path, body string }{
		{"POST", "/v1/attach", `{"id": "x", "netns": "/run/netns/x"}`},
		{"DELETE", "/v1/attach/x", ""},
		{"POST", "/v1/policy/reload", ""},
	} {
		r := b.json(t, req.method, req.path, req.body)
		if e := r.apiError(t); r.status != 403 || e.Code != api.CodeForbidden {
			t.Errorf("bob %s %s: got %d %+v, want 403", req.method, req.path, r.status, e)
		}
	}
	if r := a.json(t, "DELETE", "/v1/sandboxes/"+sa.ID, ""); r.status != 200 {
		t.Fatalf("alice deletes hers: %d %s", r.status, r.body)
	}
}

// TestUnidentifiedCallerRefused: a connection whose peer is unknown (not
// the unix socket) gets nothing.
func TestUnidentifiedCallerRefused(t *testing.T) {
	w := newFakeWorld(t)
	r, err := http.Get(w.srv.URL + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 403 {
		t.Fatalf("got %d, want 403", r.StatusCode)
	}
}

func TestCreateValidation(t *testing.T) {
	w := newFakeWorld(t, func(c *config.Config) { c.Sandbox.MaxLifetime = config.Duration(2 * time.Hour) })
	c := w.client(alice)
	tests := []struct {
		name, body, code, field string
	}{
		{"unknown field", `{"bogus": 1}`, api.CodeBadRequest, "bogus"},
		{"unknown nested field", `{"limits": {"memroy": "1G"}}`, api.CodeBadRequest, "limits.memroy"},
		{"trailing data", `{} {}`, api.CodeBadRequest, ""},
		{"not an object", `[1]`, api.CodeBadRequest, ""},
		{"bad size", `{"limits": {"memory": "12Q"}}`, api.CodeInvalidField, "limits.memory"},
		{"number for a string", `{"mode": 3}`, api.CodeInvalidField, "mode"},
		{"memory over the host", `{"limits": {"memory": "64G"}}`, api.CodeInvalidField, "limits.memory"},
		{"tiny memory", `{"limits": {"memory": "1K"}}`, api.CodeInvalidField, "limits.memory"},
		{"cpus over the host", `{"limits": {"cpus": 5}}`, api.CodeInvalidField, "limits.cpus"},
		{"negative cpus", `{"limits": {"cpus": -1}}`, api.CodeInvalidField, "limits.cpus"},
		{"pids over a million", `{"limits": {"pids": 1000001}}`, api.CodeInvalidField, "limits.pids"},
		{"negative pids", `{"limits": {"pids": -1}}`, api.CodeInvalidField, "limits.pids"},
		{"tmp over the host", `{"limits": {"tmp_size": "9G"}}`, api.CodeInvalidField, "limits.tmp_size"},
		{"exec timeout over a day", `{"limits": {"exec_timeout": "25h"}}`, api.CodeInvalidField, "limits.exec_timeout"},
		{"number duration", `{"limits": {"exec_timeout": 30}}`, api.CodeInvalidField, "limits.exec_timeout"},
		{"lifetime over the config", `{"max_lifetime": "3h"}`, api.CodeInvalidField, "max_lifetime"},
		{"idle over the config", `{"idle_timeout": "3h"}`, api.CodeInvalidField, "idle_timeout"},
		{"tiny idle", `{"idle_timeout": "10ms"}`, api.CodeInvalidField, "idle_timeout"},
		{"bad mode", `{"mode": "audit"}`, api.CodeInvalidField, "mode"},
		{"bad env", `{"env": ["NOEQUALS"]}`, api.CodeInvalidField, "env[0]"},
		{"empty label", `{"labels": {"": "x"}}`, api.CodeInvalidField, "labels"},
		{"bad allow", `{"allow": ["http://x/y"]}`, api.CodeInvalidField, "allow[0]"},
		{"bad allow port", `{"allow": ["pypi.org", "files.example:99999"]}`, api.CodeInvalidField, "allow[1]"},
		{"bad allow wildcard", `{"allow": ["pypi.org", "x*.example"]}`, api.CodeInvalidField, "allow[1]"},
		{"relative workspace", `{"workspace": "src"}`, api.CodeInvalidPath, "workspace"},
		{"dotdot workspace", `{"workspace": "/tmp/../etc"}`, api.CodeInvalidPath, "workspace"},
		{"missing workspace", `{"workspace": "/nonexistent/alk-ws"}`, api.CodeInvalidField, "workspace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := c.json(t, "POST", "/v1/sandboxes", tt.body)
			e := r.apiError(t)
			if r.status != api.StatusOf(tt.code) || e.Code != tt.code || e.Field != tt.field {
				t.Fatalf("got %d %+v, want %d %s naming %q", r.status, e, api.StatusOf(tt.code), tt.code, tt.field)
			}
		})
	}
	if n := w.exe.prepared.Load(); n != 0 {
		t.Fatalf("%d sandboxes prepared for refused requests, want 0", n)
	}
	big := `{"env": ["A=` + strings.Repeat("x", maxAPIBody) + `"]}`
	if r := c.json(t, "POST", "/v1/sandboxes", big); r.status != 413 || r.apiError(t).Code != api.CodeTooLarge {
		t.Fatalf("body over the limit: %d %s", r.status, r.body)
	}
}

func TestCreateLimits(t *testing.T) {
	w := newFakeWorld(t, func(c *config.Config) { c.Sandbox.MaxSandboxes, c.Sandbox.MaxSandboxesPerOwner = 3, 2 })
	a, b, root := w.client(alice), w.client(bob), w.client(0)
	a.create(t, `{}`)
	a.create(t, `{}`)
	if r := a.json(t, "POST", "/v1/sandboxes", `{}`); r.status != 429 || r.apiError(t).Code != api.CodeLimit {
		t.Fatalf("alice's third: %d %s, want 429 (per owner)", r.status, r.body)
	}
	b.create(t, `{}`)
	if r := root.json(t, "POST", "/v1/sandboxes", `{}`); r.status != 429 {
		t.Fatalf("the daemon's fourth: %d %s, want 429 (per daemon)", r.status, r.body)
	}
}

func TestCreateRefusedWhileUnavailable(t *testing.T) {
	w := newFakeWorld(t)
	c := w.client(alice)
	w.audit.Break(errAuditDown)
	if r := c.json(t, "POST", "/v1/sandboxes", `{}`); r.status != 503 || r.apiError(t).Code != api.CodeUnavailable {
		t.Fatalf("audit log down: %d %s, want 503", r.status, r.body)
	}
	w.audit.Break(nil)
	w.d.stopping.Store(true)
	if r := c.json(t, "POST", "/v1/sandboxes", `{}`); r.status != 503 {
		t.Fatalf("stopping: %d %s, want 503", r.status, r.body)
	}
	if n := w.exe.prepared.Load(); n != 0 {
		t.Fatalf("%d sandboxes prepared while unavailable, want 0", n)
	}
}

// TestCreateRecordRefusedNothingBuilt: when the audit log refuses the
// creation record, nothing is built.
func TestCreateRecordRefusedNothingBuilt(t *testing.T) {
	w := newFakeWorld(t)
	w.audit.Refuse(func(r *audit.Record) error {
		if r.Kind == audit.KindSandbox {
			return errAuditDown
		}
		return nil
	})
	if r := w.client(alice).json(t, "POST", "/v1/sandboxes", `{}`); r.status != 503 {
		t.Fatalf("got %d %s, want 503", r.status, r.body)
	}
	if n := w.exe.prepared.Load(); n != 0 || len(w.net.created) != 0 {
		t.Fatalf("built %d sandboxes and %d namespaces, want none", n, len(w.net.created))
	}
	if w.d.reg.len() != 0 {
		t.Fatal("a sandbox was registered")
	}
}

func TestStartFailureCleansUp(t *testing.T) {
	w := newFakeWorld(t)
	err := error(errStartBroken)
	w.exe.startErr.Store(&err)
	r := w.client(alice).json(t, "POST", "/v1/sandboxes", `{}`)
	if r.status != 500 || !strings.Contains(r.apiError(t).Message, "broken start") {
		t.Fatalf("got %d %s, want 500 naming the cause", r.status, r.body)
	}
	boxes := w.exe.all()
	if len(boxes) != 1 {
		t.Fatalf("%d boxes", len(boxes))
	}
	select {
	case <-boxes[0].done:
	default:
		t.Fatal("the box of a failed start was not destroyed")
	}
	rec := w.audit.Wait(t, "the failed end record", func(r audit.Record) bool {
		return r.Kind == audit.KindSandbox && audittest.HasReason(r, ReasonFailed)
	})
	if w.net.tornDown(rec.Sandbox) != 1 {
		t.Fatal("the namespace of a failed start was not torn down")
	}
	if w.d.reg.len() != 0 {
		t.Fatal("a failed sandbox was registered")
	}
	// The reservation was given back: the owner can still create.
	w.exe.startErr.Store(nil)
	w.client(alice).create(t, `{}`)
}

type testErr string

func (e testErr) Error() string { return string(e) }

const (
	errAuditDown   = testErr("audit disk failed")
	errStartBroken = testErr("broken start")
)

func TestExecStreams(t *testing.T) {
	w := newFakeWorld(t)
	c := w.client(alice)
	sb := c.create(t, `{}`)
	frames := c.exec(t, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}})
	if frames[0].Type != api.FrameStarted || frames[0].ExecID == "" || frames[0].PID == 0 {
		t.Fatalf("first frame %+v, want started with an id and pid", frames[0])
	}
	if out, errs := output(frames, api.FrameStdout), output(frames, api.FrameStderr); out != "out\n" || errs != "err\n" {
		t.Fatalf("stdout %q stderr %q", out, errs)
	}
	res := lastResult(t, frames)
	if res.ExitStatus != 3 || res.ExitCode != 3 || res.ExecID != frames[0].ExecID {
		t.Fatalf("result %+v", res)
	}
	var execs []api.Exec
	c.json(t, "GET", "/v1/sandboxes/"+sb.ID+"/execs", "").decode(t, &execs)
	if len(execs) != 1 || execs[0].Running || execs[0].Result == nil || execs[0].Result.ExitStatus != 3 {
		t.Fatalf("execs %+v", execs)
	}
	// Not found: an exit frame with 127, not an HTTP error.
	frames = c.exec(t, sb.ID, api.ExecRequest{Argv: []string{"alk-no-such-command"}})
	if res := lastResult(t, frames); frames[0].Type != api.FrameStarted || res.ExitStatus != 127 || res.Error == "" {
		t.Fatalf("not found: %+v", frames)
	}
}

// TestExecOutputArrivesBeforeExit: frames are flushed as the output is
// produced, not when the command ends.
func TestExecOutputArrivesBeforeExit(t *testing.T) {
	w := newFakeWorld(t)
	c := w.client(alice)
	sb := c.create(t, `{}`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := c.startExec(t, ctx, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo first; read x; echo second"}, StdinStream: true})
	started := s.next(t)
	if started == nil || started.Type != api.FrameStarted {
		t.Fatalf("got %+v, want started", started)
	}
	f := s.next(t)
	if f == nil || f.Type != api.FrameStdout || output([]api.Frame{*f}, api.FrameStdout) != "first\n" {
		t.Fatalf("got %+v, want the first line while the command waits", f)
	}
	// The command is still waiting for its stdin now.
	if r := c.do(t, "PUT", "/v1/sandboxes/"+sb.ID+"/execs/"+started.ExecID+"/stdin", strings.NewReader("go\n")); r.status != 204 {
		t.Fatalf("stdin: %d %s", r.status, r.body)
	}
	frames := s.rest(t)
	if out := output(frames, api.FrameStdout); out != "first\nsecond\n" || lastResult(t, frames).ExitStatus != 0 {
		t.Fatalf("frames %+v", frames)
	}
}

func TestExecStdin(t *testing.T) {
	w := newFakeWorld(t)
	c := w.client(alice)
	sb := c.create(t, `{}`)
	frames := c.exec(t, sb.ID, api.ExecRequest{Argv: []string{"cat"}, Stdin: base64.StdEncoding.EncodeToString([]byte("inline\x00bytes"))})
	if got := output(frames, api.FrameStdout); got != "inline\x00bytes" {
		t.Fatalf("inline stdin: got %q", got)
	}
	// Streamed: a second PUT is refused, and one to an exec without
	// stdin_stream too.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := c.startExec(t, ctx, sb.ID, api.ExecRequest{Argv: []string{"wc", "-c"}, StdinStream: true})
	st := s.next(t)
	path := "/v1/sandboxes/" + sb.ID + "/execs/" + st.ExecID + "/stdin"
	if r := c.do(t, "PUT", path, strings.NewReader(strings.Repeat("x", 100000))); r.status != 204 {
		t.Fatalf("stdin: %d %s", r.status, r.body)
	}
	frames = s.rest(t)
	if got := strings.TrimSpace(output(frames, api.FrameStdout)); got != "100000" {
		t.Fatalf("streamed stdin: wc counted %q, want 100000", got)
	}
	if r := c.do(t, "PUT", path, strings.NewReader("more")); r.status != 409 {
		t.Fatalf("second stdin: %d, want 409", r.status)
	}
	first := frames[0].ExecID
	_ = first
	var execs []api.Exec
	c.json(t, "GET", "/v1/sandboxes/"+sb.ID+"/execs", "").decode(t, &execs)
	inline := execs[0].ExecID
	if r := c.do(t, "PUT", "/v1/sandboxes/"+sb.ID+"/execs/"+inline+"/stdin", strings.NewReader("x")); r.status != 409 {
		t.Fatalf("stdin of an exec without stdin_stream: %d, want 409", r.status)
	}
	if r := c.do(t, "PUT", "/v1/sandboxes/"+sb.ID+"/execs/nope/stdin", strings.NewReader("x")); r.status != 404 {
		t.Fatalf("stdin of an unknown exec: %d, want 404", r.status)
	}
}

func TestExecValidation(t *testing.T) {
	w := newFakeWorld(t)
	c := w.client(alice)
	sb := c.create(t, `{}`)
	tests := []struct{ name, body, code, field string }{
		{"empty argv", `{"argv": []}`, api.CodeInvalidField, "argv"},
		{"no argv", `{}`, api.CodeInvalidField, "argv"},
		{"nul in argv", `{"argv": ["a\u0000b"]}`, api.CodeInvalidField, "argv[0]"},
		{"relative cwd", `{"argv": ["true"], "cwd": "tmp"}`, api.CodeInvalidField, "cwd"},
		{"timeout over a day", `{"argv": ["true"], "timeout": "48h"}`, api.CodeInvalidField, "timeout"},
		{"bad base64", `{"argv": ["true"], "stdin": "***"}`, api.CodeInvalidField, "stdin"},
		{"both stdins", `{"argv": ["true"], "stdin": "eA==", "stdin_stream": true}`, api.CodeInvalidField, "stdin"},
		{"unknown field", `{"argv": ["true"], "tty": true}`, api.CodeBadRequest, "tty"},
		{"bad env", `{"argv": ["true"], "env": ["=x"]}`, api.CodeInvalidField, "env[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := c.json(t, "POST", "/v1/sandboxes/"+sb.ID+"/exec", tt.body)
			e := r.apiError(t)
			if r.status != api.StatusOf(tt.code) || e.Code != tt.code || e.Field != tt.field {
				t.Fatalf("got %d %+v, want %s naming %q", r.status, e, tt.code, tt.field)
			}
		})
	}
	if r := c.json(t, "POST", "/v1/sandboxes/sb-nope/exec", `{"argv": ["true"]}`); r.status != 404 || r.apiError(t).Field != "id" {
		t.Fatalf("unknown sandbox: %d %s", r.status, r.body)
	}
}

func TestExecTimeout(t *testing.T) {
	w := newFakeWorld(t)
	c := w.client(alice)
	sb := c.create(t, `{}`)
	res := lastResult(t, c.exec(t, sb.ID, api.ExecRequest{Argv: []string{"sleep", "60"}, Timeout: config.Duration(200 * time.Millisecond)}))
	if !res.TimedOut || res.ExitStatus != 124 {
		t.Fatalf("result %+v, want timed out, 124", res)
	}
}

func TestExecSignal(t *testing.T) {
	w := newFakeWorld(t)
	c := w.client(alice)
	sb := c.create(t, `{}`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := c.startExec(t, ctx, sb.ID, api.ExecRequest{Argv: []string{"sleep", "60"}})
	st := s.next(t)
	path := "/v1/sandboxes/" + sb.ID + "/execs/" + st.ExecID + "/signal"
	if r := c.json(t, "POST", path, `{"signal": "bogus"}`); r.status != 400 || r.apiError(t).Field != "signal" {
		t.Fatalf("bad signal: %d %s", r.status, r.body)
	}
	if r := c.json(t, "POST", path, `{"signal": "TERM"}`); r.status != 204 {
		t.Fatalf("signal: %d %s", r.status, r.body)
	}
	res := lastResult(t, s.rest(t))
	if res.Signal != 15 || res.SignalName != "SIGTERM" || res.ExitStatus != 143 {
		t.Fatalf("result %+v, want SIGTERM", res)
	}
	if r := c.json(t, "POST", path, `{"signal": "KILL"}`); r.status != 409 {
		t.Fatalf("signal to an ended exec: %d, want 409", r.status)
	}
}

// TestClientDisconnectKillsExec: an exec whose client goes away is killed
// with its whole process group; the sandbox stays.
func TestClientDisconnectKillsExec(t *testing.T) {
	w := newFakeWorld(t)
	c := w.client(alice)
	sb := c.create(t, `{}`)
	pidFile := t.TempDir() + "/child"
	ctx, cancel := context.WithCancel(context.Background())
	s := c.startExec(t, ctx, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "sleep 60 & echo $! > " + pidFile + "; echo up; wait"}})
	if f := s.next(t); f == nil || f.Type != api.FrameStarted {
		t.Fatalf("got %+v", f)
	}
	if f := s.next(t); f == nil || f.Type != api.FrameStdout {
		t.Fatalf("got %+v", f)
	}
	child := readPid(t, pidFile)
	cancel()
	s.resp.Body.Close()
	box := w.exe.all()[0]
	poll.Until(t, 10*time.Second, "the exec killed", func() bool { return box.running() == 0 })
	poll.Until(t, 10*time.Second, "the exec's background child killed", func() bool { return !pidAlive(child) })
	var got api.Sandbox
	if r := c.json(t, "GET", "/v1/sandboxes/"+sb.ID, ""); r.status != 200 {
		t.Fatalf("the sandbox went with the client: %d", r.status)
	} else {
		r.decode(t, &got)
	}
	poll.Until(t, 5*time.Second, "the exec counted as ended", func() bool {
		var v api.Sandbox
		c.json(t, "GET", "/v1/sandboxes/"+sb.ID, "").decode(t, &v)
		return v.ExecsRunning == 0
	})
}

func TestConcurrentExecs(t *testing.T) {
	w := newFakeWorld(t)
	c := w.client(alice)
	sb := c.create(t, `{}`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Three execs run at once: each waits for a file the last one makes.
	dir := t.TempDir()
	var streams []*execStream
	for i := range 3 {
		s := c.startExec(t, ctx, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "while [ ! -e " + dir + "/go ]; do sleep 0.01; done; echo " + string(rune('a'+i))}})
		if f := s.next(t); f == nil || f.Type != api.FrameStarted {
			t.Fatalf("exec %d: %+v", i, f)
		}
		streams = append(streams, s)
	}
	var v api.Sandbox
	c.json(t, "GET", "/v1/sandboxes/"+sb.ID, "").decode(t, &v)
	if v.ExecsRunning != 3 {
		t.Fatalf("execs running %d, want 3", v.ExecsRunning)
	}
	lastResult(t, c.exec(t, sb.ID, api.ExecRequest{Argv: []string{"touch", dir + "/go"}}))
	for i, s := range streams {
		frames := s.rest(t)
		if out := output(frames, api.FrameStdout); out != string(rune('a'+i))+"\n" || lastResult(t, frames).ExitStatus != 0 {
			t.Fatalf("exec %d: %+v", i, frames)
		}
	}
}

// TestDeleteEndsRunningExecs: a delete kills what runs; the exec's stream
// ends with an error frame.
func TestDeleteEndsRunningExecs(t *testing.T) {
	w := newFakeWorld(t)
	c := w.client(alice)
	sb := c.create(t, `{}`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := c.startExec(t, ctx, sb.ID, api.ExecRequest{Argv: []string{"sleep", "60"}})
	s.next(t)
	if r := c.json(t, "DELETE", "/v1/sandboxes/"+sb.ID, ""); r.status != 200 {
		t.Fatalf("delete: %d", r.status)
	}
	frames := s.rest(t)
	last := frames[len(frames)-1]
	if last.Type != api.FrameError || last.Error == nil || last.Error.Code != api.CodeConflict {
		t.Fatalf("last frame %+v, want an error frame", last)
	}
}

// TestCreateSandboxPolicy: a sandbox's own mode and allow entries are what
// its namespace is served with (the gateway and the DNS filter decide with
// that policy.Sandbox), whether it came from the pool or was made for the
// create; without them the daemon's policy is all there is.
func TestCreateSandboxPolicy(t *testing.T) {
	for _, pool := range []int{-1, 1} {
		t.Run(fmt.Sprintf("pool %d", pool), func(t *testing.T) {
			w := newFakeWorld(t, func(c *config.Config) { c.Sandbox.PoolSize = pool })
			if pool > 0 {
				poll.Until(t, 10*time.Second, "the pool to fill", func() bool { return w.d.pool.depth() == pool })
			}
			c := w.client(0) // root: mode report is root's on an enforcing daemon
			sb := c.create(t, `{"mode": "report", "allow": ["PyPI.org", "files.example:8443"]}`)
			got, ok := w.net.policy(sb.ID)
			if !ok {
				t.Fatalf("sandbox %s was never served", sb.ID)
			}
			if got.Mode != policy.ModeReport || !slices.Equal(got.Allow.Entries(), []string{"files.example:8443", "pypi.org"}) {
				t.Fatalf("served with mode %q allow %v, want report [files.example:8443 pypi.org]", got.Mode, got.Allow.Entries())
			}
			w.net.mu.Lock()
			fromPool := w.net.fromPool[sb.ID]
			w.net.mu.Unlock()
			if fromPool != (pool > 0) {
				t.Fatalf("from the pool: %v, want %v", fromPool, pool > 0)
			}
			plain := c.create(t, `{}`)
			if got, _ := w.net.policy(plain.ID); got.Mode != "" || got.Allow != nil {
				t.Fatalf("a sandbox that asked for nothing is served with mode %q allow %v", got.Mode, got.Allow.Entries())
			}
		})
	}
}
