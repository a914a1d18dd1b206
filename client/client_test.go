package client_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/client/clienttest"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/test/poll"
)

// newFake starts the fake daemon and a client of it.
func newFake(t *testing.T) (*clienttest.Server, *client.Client) {
	t.Helper()
	srv := clienttest.New(t)
	c := client.New(srv.Socket)
	t.Cleanup(c.Close)
	return srv, c
}

func newSandbox(t *testing.T, c *client.Client, req api.CreateSandboxRequest) *api.Sandbox {
	t.Helper()
	sb, err := c.CreateSandbox(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

func TestNewSocket(t *testing.T) {
	tests := []struct {
		name, arg, env, want string
	}{
		{"argument", "/tmp/a.sock", "/tmp/env.sock", "/tmp/a.sock"},
		{"environment", "", "/tmp/env.sock", "/tmp/env.sock"},
		{"default", "", "", config.DefaultAPISocket},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(client.SocketEnv, tt.env)
			if got := client.New(tt.arg).Socket(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSandboxLifecycle(t *testing.T) {
	_, c := newFake(t)
	ctx := t.Context()
	a := newSandbox(t, c, api.CreateSandboxRequest{Labels: map[string]string{"agent": "coder", "team": "a"},
		Limits: api.Limits{Memory: 64 << 20, Pids: 32}})
	b := newSandbox(t, c, api.CreateSandboxRequest{Labels: map[string]string{"agent": "other"}})
	if a.ID == "" || a.State != api.StateRunning || a.Limits.MemoryBytes != 64<<20 || a.Limits.Pids != 32 {
		t.Fatalf("created: got %+v", a)
	}
	got, err := c.GetSandbox(ctx, a.ID)
	if err != nil || got.ID != a.ID || got.Labels["team"] != "a" {
		t.Fatalf("get: got %+v, %v", got, err)
	}
	tests := []struct {
		name   string
		labels map[string]string
		want   []string
	}{
		{"all", nil, []string{a.ID, b.ID}},
		{"one label", map[string]string{"agent": "coder"}, []string{a.ID}},
		{"two labels", map[string]string{"agent": "coder", "team": "a"}, []string{a.ID}},
		{"no match", map[string]string{"agent": "nobody"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list, err := c.ListSandboxes(ctx, tt.labels)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, sb := range list {
				ids = append(ids, sb.ID)
			}
			if strings.Join(ids, ",") != strings.Join(tt.want, ",") {
				t.Errorf("got %v, want %v", ids, tt.want)
			}
		})
	}
	final, err := c.DeleteSandbox(ctx, a.ID)
	if err != nil || final.State != api.StateStopped || final.EndReason != "deleted" {
		t.Fatalf("delete: got %+v, %v", final, err)
	}
	_, err = c.GetSandbox(ctx, a.ID)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeNotFound || client.Code(err) != api.CodeNotFound {
		t.Fatalf("get after delete: got %v, want a not_found *api.Error", err)
	}
}

func TestAPIErrors(t *testing.T) {
	_, c := newFake(t)
	ctx := t.Context()
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	tests := []struct {
		name      string
		call      func() error
		code      string
		field     string
		inMessage string
	}{
		{"unknown sandbox", func() error { _, err := c.GetSandbox(ctx, "nope"); return err }, api.CodeNotFound, "", "nope"},
		{"absurd memory", func() error {
			_, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Limits: api.Limits{Memory: 1024}})
			return err
		}, api.CodeInvalidField, "limits.memory", "limits.memory"},
		{"bad mode", func() error { _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Mode: "audit"}); return err }, api.CodeInvalidField, "mode", "audit"},
		{"empty argv", func() error {
			_, err := c.Exec(ctx, sb.ID, api.ExecRequest{}, client.ExecIO{})
			return err
		}, api.CodeInvalidField, "argv", "argv"},
		{"exec in unknown sandbox", func() error {
			_, err := c.Exec(ctx, "nope", api.ExecRequest{Argv: []string{"true"}}, client.ExecIO{})
			return err
		}, api.CodeNotFound, "", "nope"},
		{"bad cwd", func() error {
			_, err := c.Exec(ctx, sb.ID, api.ExecRequest{Argv: []string{"true"}, Cwd: "/etc"}, client.ExecIO{})
			return err
		}, api.CodeInvalidField, "cwd", "/etc"},
		{"files path outside", func() error { _, err := c.GetFiles(ctx, sb.ID, "/etc/passwd"); return err }, api.CodeInvalidPath, "path", "outside"},
		{"signal to unknown exec", func() error { return c.Signal(ctx, sb.ID, "x99", "TERM") }, api.CodeNotFound, "", "x99"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var ae *api.Error
			if !errors.As(err, &ae) {
				t.Fatalf("got %v (%T), want *api.Error", err, err)
			}
			if ae.Code != tt.code || ae.Field != tt.field || !strings.Contains(ae.Message, tt.inMessage) {
				t.Errorf("got %+v, want code %s, field %q, message naming %q", ae, tt.code, tt.field, tt.inMessage)
			}
		})
	}
}

// TestErrorBodies: a response that is not an api.Error still becomes one,
// its code from the status, its text kept.
func TestErrorBodies(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		body    string
		code    string
		message string
	}{
		{"api error", 409, `{"code":"conflict","message":"sandbox is stopping"}`, api.CodeConflict, "sandbox is stopping"},
		{"legacy error", 422, `{"error":"argv: missing command"}`, api.CodeUnprocessable, "argv: missing command"},
		{"text", 503, "overloaded\n", api.CodeUnavailable, "overloaded"},
		{"empty", 500, "", api.CodeInternal, "500 Internal Server Error"},
		{"too many", 429, "", api.CodeLimit, "429"},
		{"too large", 413, "", api.CodeTooLarge, "413"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := clienttest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			c := client.New(sock)
			defer c.Close()
			_, err := c.Health(t.Context())
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Code != tt.code || !strings.Contains(ae.Message, tt.message) {
				t.Fatalf("got %v, want code %s with %q", err, tt.code, tt.message)
			}
		})
	}
}

func TestConnError(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	_, err := client.New(sock).Health(t.Context())
	var ce *client.ConnError
	if !errors.As(err, &ce) || ce.Socket != sock || !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("got %v (%T), want a *ConnError wrapping ENOENT", err, err)
	}
	if !strings.Contains(err.Error(), "airlock serve") {
		t.Errorf("got %q, want a hint naming airlock serve", err)
	}
	denied := (&client.ConnError{Socket: sock, Err: syscall.EACCES}).Error()
	if !strings.Contains(denied, "group") || !strings.Contains(denied, "airlock") {
		t.Errorf("got %q, want a hint naming the daemon's group", denied)
	}
}

func TestExecOutput(t *testing.T) {
	_, c := newFake(t)
	sb := newSandbox(t, c, api.CreateSandboxRequest{Env: []string{"FROM_SANDBOX=s"}})
	var out, errb bytes.Buffer
	res, err := c.Exec(t.Context(), sb.ID, api.ExecRequest{
		Argv: []string{"sh", "-c", `echo "out $FROM_SANDBOX $FROM_EXEC"; echo err >&2; exit 3`},
		Env:  []string{"FROM_EXEC=e"},
	}, client.ExecIO{Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "out s e\n" || errb.String() != "err\n" {
		t.Errorf("output: got %q / %q, want %q / %q", out.String(), errb.String(), "out s e\n", "err\n")
	}
	if res.ExitStatus != 3 || res.ExitCode != 3 || res.StdoutBytes != 8 || res.ExecID == "" {
		t.Errorf("result: got %+v, want exit 3, 8 stdout bytes", res)
	}
}

func TestExecNotStarted(t *testing.T) {
	_, c := newFake(t)
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	res, err := c.Exec(t.Context(), sb.ID, api.ExecRequest{Argv: []string{"/no/such/command"}}, client.ExecIO{})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitStatus != 127 || res.Error == "" {
		t.Errorf("got %+v, want exit status 127 with the error", res)
	}
}

// TestExecStreamsBeforeExit: output reaches the client while the command is
// still running. The command prints, then sleeps for a minute; the first
// chunk is read, the exec is still listed running and has no result, and only
// then is it told to stop.
func TestExecStreamsBeforeExit(t *testing.T) {
	_, c := newFake(t)
	ctx := t.Context()
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	s, err := c.StartExec(ctx, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo first; exec sleep 60"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f, err := s.Next()
	if err != nil || f.Type != api.FrameStarted || f.ExecID != s.ExecID() || s.PID() == 0 {
		t.Fatalf("first frame: got %+v, %v; want started", f, err)
	}
	f, err = s.Next()
	if err != nil || f.Type != api.FrameStdout || string(client.Data(f)) != "first\n" {
		t.Fatalf("second frame: got %+v, %v; want stdout first", f, err)
	}
	if s.Result() != nil {
		t.Fatalf("a result before the command ended: %+v", s.Result())
	}
	execs, err := c.Execs(ctx, sb.ID)
	if err != nil || len(execs) != 1 || !execs[0].Running {
		t.Fatalf("execs while the first chunk is read: got %+v, %v; want it running", execs, err)
	}
	if err := s.Signal(ctx, "TERM"); err != nil {
		t.Fatal(err)
	}
	var last api.Frame
	for f, err := range s.Frames() {
		if err != nil {
			t.Fatal(err)
		}
		last = f
	}
	if last.Type != api.FrameExit || s.Result().Signal != int(syscall.SIGTERM) || s.Result().ExitStatus != 128+15 {
		t.Fatalf("end: got %+v, result %+v; want killed by SIGTERM", last, s.Result())
	}
	if _, err := s.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("after the exit frame: got %v, want io.EOF", err)
	}
}

func TestExecStdin(t *testing.T) {
	_, c := newFake(t)
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	t.Run("whole", func(t *testing.T) {
		in := make([]byte, 3<<20)
		rand.Read(in)
		var out bytes.Buffer
		res, err := c.Exec(t.Context(), sb.ID, api.ExecRequest{Argv: []string{"cat"}},
			client.ExecIO{Stdin: bytes.NewReader(in), Stdout: &out})
		if err != nil || res.ExitStatus != 0 {
			t.Fatalf("got %+v, %v", res, err)
		}
		if !bytes.Equal(out.Bytes(), in) {
			t.Errorf("got %d bytes back, want the %d sent", out.Len(), len(in))
		}
	})
	// Each line is sent only after the answer to the one before arrived:
	// stdin and stdout both stream.
	t.Run("interactive", func(t *testing.T) {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		done := make(chan error, 1)
		go func() {
			_, err := c.Exec(t.Context(), sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "while read l; do echo got $l; done"}},
				client.ExecIO{Stdin: inR, Stdout: outW})
			outW.Close()
			done <- err
		}()
		lines := make([]byte, 64)
		for _, word := range []string{"one", "two", "three"} {
			io.WriteString(inW, word+"\n")
			n, err := outR.Read(lines)
			if err != nil || string(lines[:n]) != "got "+word+"\n" {
				t.Fatalf("got %q, %v; want the answer to %s", lines[:n], err, word)
			}
		}
		inW.Close()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("both stdins", func(t *testing.T) {
		_, err := c.Exec(t.Context(), sb.ID, api.ExecRequest{Argv: []string{"cat"}, Stdin: "eA=="},
			client.ExecIO{Stdin: strings.NewReader("x")})
		if err == nil || !strings.Contains(err.Error(), "both") {
			t.Fatalf("got %v, want a refusal naming both", err)
		}
	})
}

// TestExecCancelKills: cancelling the context of a running exec returns at
// once with the context's error, and the daemon sees the disconnect and kills
// the command.
func TestExecCancelKills(t *testing.T) {
	srv, c := newFake(t)
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	ctx, cancel := context.WithCancel(t.Context())
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo up; exec sleep 60"}}, client.ExecIO{Stdout: &out})
		done <- err
	}()
	poll.Until(t, 10*time.Second, "the command's first output", func() bool { return out.String() == "up\n" })
	if srv.Running(sb.ID) != 1 {
		t.Fatalf("running: got %d, want 1", srv.Running(sb.ID))
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	poll.Until(t, 10*time.Second, "the server to kill the command", func() bool { return srv.Running(sb.ID) == 0 })
	execs, err := c.Execs(t.Context(), sb.ID)
	if err != nil || len(execs) != 1 || execs[0].Result == nil || execs[0].Result.Signal != int(syscall.SIGKILL) {
		t.Fatalf("execs: got %+v, %v; want one killed", execs, err)
	}
}

func TestConcurrentExecs(t *testing.T) {
	_, c := newFake(t)
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	outs := make([]bytes.Buffer, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each exec waits for a file the last one creates, so all of
			// them run at the same time.
			_, errs[i] = c.Exec(t.Context(), sb.ID, api.ExecRequest{
				Argv: []string{"sh", "-c", "touch started.$I; while [ $(ls started.* | wc -l) -lt 8 ]; do sleep 0.01; done; echo $I"},
				Env:  []string{"I=" + string(rune('a'+i))},
			}, client.ExecIO{Stdout: &outs[i]})
		}()
	}
	wg.Wait()
	for i := range n {
		if want := string(rune('a'+i)) + "\n"; errs[i] != nil || outs[i].String() != want {
			t.Errorf("exec %d: got %q, %v; want %q", i, outs[i].String(), errs[i], want)
		}
	}
}

func TestEvents(t *testing.T) {
	srv, c := newFake(t)
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	es, err := c.Events(t.Context(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	ev, err := es.Next()
	if err != nil || ev.Type != client.EventSandbox || ev.Sandbox == nil || ev.Sandbox.State != api.StateRunning {
		t.Fatalf("first event: got %+v, %v; want the sandbox's state now", ev, err)
	}
	poll.Until(t, 5*time.Second, "the subscription", func() bool { return srv.Subscribers(sb.ID) == 1 })
	srv.Emit(sb.ID, client.EventDecision, api.Event{Record: map[string]any{"kind": "connect", "decision": "deny", "host": "evil.example"}})
	ev, err = es.Next()
	if err != nil || ev.Type != client.EventDecision || ev.Record["host"] != "evil.example" {
		t.Fatalf("got %+v, %v; want the decision", ev, err)
	}
	if _, err := c.DeleteSandbox(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	var got []client.Event
	for ev, err := range es.All() {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
	}
	if len(got) != 1 || got[0].Type != client.EventSandbox || got[0].Sandbox.State != api.StateStopped {
		t.Fatalf("after delete: got %+v, want one sandbox event, stopped, then the end", got)
	}
	if _, err := c.Events(t.Context(), sb.ID); client.Code(err) != api.CodeNotFound {
		t.Errorf("events of a deleted sandbox: got %v, want not_found", err)
	}
}

func TestEventsContextEnds(t *testing.T) {
	srv, c := newFake(t)
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	ctx, cancel := context.WithCancel(t.Context())
	es, err := c.Events(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := es.Next(); err != nil || ev.Type != client.EventSandbox {
		t.Fatalf("first event: got %+v, %v; want the sandbox's state", ev, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := es.Next()
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	es.Close()
	poll.Until(t, 5*time.Second, "the server to drop the subscriber", func() bool { return srv.Subscribers(sb.ID) == 0 })
}

// TestNoGoroutineLeak: every kind of call, including cancelled execs, a
// stdin stream still blocked when its command ended and an events stream,
// leaves no goroutine behind once the client is closed (and the reader the
// caller handed in returns).
func TestNoGoroutineLeak(t *testing.T) {
	srv := clienttest.New(t)
	before := runtime.NumGoroutine()
	c := client.New(srv.Socket)
	ctx := t.Context()
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	for range 3 {
		if _, err := c.Exec(ctx, sb.ID, api.ExecRequest{Argv: []string{"cat"}}, client.ExecIO{Stdin: strings.NewReader("x"), Stdout: io.Discard}); err != nil {
			t.Fatal(err)
		}
	}
	// A command that ends without reading its stdin, fed by a reader that
	// blocks until the caller closes it.
	blockR, blockW := io.Pipe()
	execDone := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, sb.ID, api.ExecRequest{Argv: []string{"true"}}, client.ExecIO{Stdin: blockR})
		execDone <- err
	}()
	select {
	case err := <-execDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Exec did not return after its command ended while its stdin reader blocks")
	}
	cctx, cancel := context.WithCancel(ctx)
	s, err := c.StartExec(cctx, sb.ID, api.ExecRequest{Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	for _, err := range s.Frames() {
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	}
	s.Close()
	es, err := c.Events(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	es.Close()
	if _, err := c.CopyTo(ctx, sb.ID, "client.go", api.WorkspaceDir); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CopyFrom(ctx, sb.ID, api.WorkspaceDir+"/client.go", t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	blockW.Close()
	c.Close()
	var now int
	if !poll.Within(10*time.Second, func() bool { now = runtime.NumGoroutine(); return now <= before }) {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines: %d before, %d after\n%s", before, now, buf[:runtime.Stack(buf, true)])
	}
}

func TestOtherRoutes(t *testing.T) {
	_, c := newFake(t)
	ctx := t.Context()
	res, err := c.Run(ctx, api.RunRequest{Argv: []string{"sh", "-c", "cat; echo e >&2; exit 4"}, Stdin: "in"})
	if err != nil || res.Stdout != "in" || res.Stderr != "e\n" || res.ExitStatus != 4 || res.ID == "" {
		t.Errorf("run: got %+v, %v", res, err)
	}
	if h, err := c.Health(ctx); err != nil || h.PolicyRev != "fake" || h.Audit != "ok" {
		t.Errorf("health: got %+v, %v", h, err)
	}
	if doc, err := c.OpenAPI(ctx); err != nil || !bytes.Contains(doc, []byte(`"openapi"`)) {
		t.Errorf("openapi: got %s, %v", doc, err)
	}
	if rev, err := c.Reload(ctx); err != nil || rev != "fake-2" {
		t.Errorf("reload: got %q, %v", rev, err)
	}
	if rows, err := c.Summary(ctx); err != nil || len(rows) != 1 || rows[0].Host != "evil.example" || rows[0].Count != 2 {
		t.Errorf("summary: got %+v, %v", rows, err)
	}
	if err := c.Attach(ctx, api.AttachRequest{ID: "web-1"}); client.Code(err) != api.CodeInvalidField {
		t.Errorf("attach without netns: got %v, want invalid_field", err)
	}
	if err := c.Detach(ctx, "web-1"); client.Code(err) != api.CodeNotFound {
		t.Errorf("detach: got %v, want not_found", err)
	}
}

// TestAttachCheckDetach: attach with a pod identity, the check before and
// after the rules are reported changed, detach, and the not_found of both
// afterwards (what airlock-cni's DEL and CHECK rely on).
func TestAttachCheckDetach(t *testing.T) {
	fake, c := newFake(t)
	ctx := t.Context()
	pod := &api.Pod{Namespace: "ci", Name: "agent-0", UID: "6f1c", ServiceAccount: "runner"}
	inbound := &api.Inbound{Mode: api.InboundAccept, Ports: []int{8080}}
	if err := c.Attach(ctx, api.AttachRequest{ID: "alk-pod-1", NetNS: "/proc/1/ns/net", Pod: pod, Inbound: inbound}); err != nil {
		t.Fatalf("attach: %v", err)
	}
	if got := fake.Attached()["alk-pod-1"].Pod; got == nil || *got != *pod {
		t.Fatalf("the daemon got pod %+v, want %+v", got, pod)
	}
	st, err := c.CheckAttach(ctx, "alk-pod-1")
	if err != nil || !st.InForce || st.Problem != "" || st.Pod == nil || *st.Pod != *pod {
		t.Fatalf("check: got %+v, %v; want in force with the pod", st, err)
	}
	if st.Inbound.Mode != api.InboundAccept || !slices.Equal(st.Inbound.Ports, []int{8080}) {
		t.Errorf("check: inbound %+v, want accept [8080]", st.Inbound)
	}
	fake.SetAttachProblem("alk-pod-1", "filter OUTPUT has no jump to AIRLOCK-OUT")
	if st, err := c.CheckAttach(ctx, "alk-pod-1"); err != nil || st.InForce || !strings.Contains(st.Problem, "AIRLOCK-OUT") {
		t.Fatalf("check after a change: got %+v, %v; want not in force naming the chain", st, err)
	}
	if err := c.Detach(ctx, "alk-pod-1"); err != nil {
		t.Fatalf("detach: %v", err)
	}
	if _, err := c.CheckAttach(ctx, "alk-pod-1"); client.Code(err) != api.CodeNotFound {
		t.Errorf("check after detach: got %v, want not_found", err)
	}
	if err := c.Detach(ctx, "alk-pod-1"); client.Code(err) != api.CodeNotFound {
		t.Errorf("second detach: got %v, want not_found", err)
	}
}

// syncBuffer is a bytes.Buffer safe to read while another goroutine writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestHealthNotOK: a daemon with a failing part answers 503 with its parts;
// Health returns them and an unavailable error naming the failing one, so
// a caller that checks only the error fails closed.
func TestHealthNotOK(t *testing.T) {
	s, c := newFake(t)
	h, err := c.Health(t.Context())
	if err != nil || !h.OK || len(h.Parts) == 0 {
		t.Fatalf("healthy: got %+v, %v; want ok with its parts", h, err)
	}
	s.SetFailing(api.HealthPartStateDir, "run directory removed")
	h, err = c.Health(t.Context())
	if client.Code(err) != api.CodeUnavailable || !strings.Contains(err.Error(), "state_dir: run directory removed") {
		t.Fatalf("got error %v, want code %s naming the failing part", err, api.CodeUnavailable)
	}
	if h == nil || h.OK || len(h.Failing()) != 1 {
		t.Fatalf("got health %+v, want ok false with one failing part", h)
	}
}

// TestSandboxEgressDestinations: a sandbox's egress carries its
// destinations and report mode's would-denials apart from denials.
func TestSandboxEgressDestinations(t *testing.T) {
	srv, c := newFake(t)
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	rows := []api.SummaryRow{
		{Decision: "deny", Kind: "http", Host: "evil.example", Port: 80, Count: 3},
		{Decision: "would_deny", Kind: "connect", Host: "reported.example", Port: 443, Count: 2},
	}
	for _, r := range rows {
		srv.AddDestination(sb.ID, r)
	}
	got, err := c.GetSandbox(t.Context(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Egress.Denied != 3 || got.Egress.WouldDeny != 2 || !slices.Equal(got.Egress.Destinations, rows) {
		t.Errorf("got egress %+v, want 3 denied, 2 would deny, destinations %+v", got.Egress, rows)
	}
}

// TestCreateSandboxSecretBindings: the binding ids travel; the answer shows
// the bindings; a refused one is the API's error with its field.
func TestCreateSandboxSecretBindings(t *testing.T) {
	_, c := newFake(t)
	sb := newSandbox(t, c, api.CreateSandboxRequest{SecretBindings: []string{clienttest.FakeBindingID}})
	if len(sb.SecretBindings) != 1 || sb.SecretBindings[0] != clienttest.FakeBinding(clienttest.FakeBindingID) {
		t.Errorf("secret_bindings: got %+v", sb.SecretBindings)
	}
	got, err := c.GetSandbox(t.Context(), sb.ID)
	if err != nil || len(got.SecretBindings) != 1 {
		t.Errorf("get: got %+v, %v", got, err)
	}
	_, err = c.CreateSandbox(t.Context(), api.CreateSandboxRequest{SecretBindings: []string{clienttest.FakeForbiddenBindingID}})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeForbidden || ae.Field != "secret_bindings" {
		t.Errorf("forbidden binding: got %v, want forbidden on secret_bindings", err)
	}
}

// TestRunSecretBindings: POST /v1/run takes secret_bindings as create does
// and answers the attached bindings, without values; a refused one refuses
// the run.
func TestRunSecretBindings(t *testing.T) {
	_, c := newFake(t)
	res, err := c.Run(t.Context(), api.RunRequest{Argv: []string{"true"}, SecretBindings: []string{clienttest.FakeBindingID}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.SecretBindings) != 1 || res.SecretBindings[0] != clienttest.FakeBinding(clienttest.FakeBindingID) {
		t.Errorf("secret_bindings: got %+v, want the fake binding", res.SecretBindings)
	}
	_, err = c.Run(t.Context(), api.RunRequest{Argv: []string{"true"}, SecretBindings: []string{clienttest.FakeForbiddenBindingID}})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeForbidden || ae.Field != "secret_bindings" {
		t.Errorf("forbidden binding: got %v, want forbidden on secret_bindings", err)
	}
}
