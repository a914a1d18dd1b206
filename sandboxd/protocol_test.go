package sandboxd

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// channelPair returns two connected channels: a (executor side, bounded like
// the executor's end) and b (init side), and with raw, duplicates of their
// sockets to send what a channel never would (-1 without).
func channelPair(t *testing.T, raw bool) (a, b *channel, rawA, rawB int) {
	t.Helper()
	own, child, err := controlPair()
	if err != nil {
		t.Fatal(err)
	}
	rawA, rawB = -1, -1
	if raw {
		if rawA, err = unix.Dup(int(own.Fd())); err != nil {
			t.Fatal(err)
		}
		if rawB, err = unix.Dup(int(child.Fd())); err != nil {
			t.Fatal(err)
		}
	}
	if a, err = newChannel(own, maxFromInit, maxToInit, "init"); err != nil {
		t.Fatal(err)
	}
	if b, err = newChannel(child, maxToInit, maxFromInit, "the executor"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.close()
		b.close()
		closeFDs([]int{rawA, rawB})
	})
	return a, b, rawA, rawB
}

func pipeFDs(t *testing.T, n int) []int {
	t.Helper()
	var fds []int
	for len(fds) < n {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		fds = append(fds, p[0], p[1])
	}
	t.Cleanup(func() { closeFDs(fds) })
	return fds[:n]
}

func TestChannelCarriesMessagesAndFDs(t *testing.T) {
	a, b, _, _ := channelPair(t, false)
	fds := pipeFDs(t, 3)
	sent := &message{Type: msgExec, Seq: 7, Exec: &execRequest{ID: "x1", Argv: []string{"true"}, Env: []string{"A=1"}, Dir: "/"}}
	if err := a.send(sent, fds...); err != nil {
		t.Fatal(err)
	}
	m, got, err := b.recv()
	if err != nil {
		t.Fatal(err)
	}
	defer closeFDs(got)
	if err := checkToInit(m, len(got)); err != nil {
		t.Fatalf("check: %v", err)
	}
	if m.Seq != 7 || m.Exec.ID != "x1" || len(got) != 3 {
		t.Fatalf("got %+v with %d fds", m, len(got))
	}
	for _, fd := range got {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("received fd %d: flags %d %v, want close-on-exec", fd, flags, err)
		}
	}
	// A big message (an exec with a large environment) arrives whole.
	big := &message{Type: msgExec, Seq: 8, Exec: &execRequest{ID: "x2", Argv: []string{"true"}, Env: []string{"A=" + strings.Repeat("x", 900<<10)}, Dir: "/"}}
	if err := a.send(big, fds...); err != nil {
		t.Fatal(err)
	}
	m, got2, err := b.recv()
	closeFDs(got2)
	if err != nil || len(m.Exec.Env[0]) != 2+900<<10 {
		t.Fatalf("big message: %v", err)
	}
	// Closing one end is EOF at the other.
	a.close()
	if _, _, err := b.recv(); !errors.Is(err, io.EOF) {
		t.Errorf("after close: got %v, want EOF", err)
	}
}

// TestChannelRefusesBadPackets: what arrives is bounded and decoded strictly;
// a refused message leaves no fd open and the channel usable.
func TestChannelRefusesBadPackets(t *testing.T) {
	_, b, rawA, _ := channelPair(t, true)
	fds := pipeFDs(t, 4)
	cases := []struct {
		name string
		data []byte
		fds  []int
		want string
	}{
		{"not json", []byte("exec /bin/sh"), nil, "malformed message"},
		{"unknown field", []byte(`{"type":"exec","seq":1,"run_as_root":true}`), nil, "unknown field"},
		{"trailing data", []byte(`{"type":"signal","seq":1}{"type":"exec"}`), nil, "data after the JSON object"},
		{"too large", append([]byte(`{"type":"exec","seq":1,"error":"`), make([]byte, maxToInit+10)...), nil, "larger than"},
		{"too many fds", []byte(`{"type":"exec","seq":1}`), fds[:4], "more than 3 file descriptors"},
		{"too large with fds", append([]byte(`{"type":"exec","seq":1,"error":"`), make([]byte, maxToInit+10)...), fds[:3], "larger than"},
	}
	before := len(openFDs(t))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var oob []byte
			if len(tc.fds) > 0 {
				oob = unix.UnixRights(tc.fds...)
			}
			if err := unix.Sendmsg(rawA, tc.data, oob, nil, 0); err != nil {
				t.Fatal(err)
			}
			m, got, err := b.recv()
			var bad *badMessage
			if !errors.As(err, &bad) || !strings.Contains(err.Error(), tc.want) || m != nil || got != nil {
				t.Fatalf("got %v %v %v, want a refusal containing %q", m, got, err, tc.want)
			}
		})
	}
	if after := len(openFDs(t)); after != before {
		t.Errorf("open fds: got %d, want %d (refused messages' fds closed)", after, before)
	}
	// Still usable.
	if err := unix.Sendmsg(rawA, []byte(`{"type":"signal","seq":2,"signal":{"id":"x1","signal":15}}`), nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	if m, _, err := b.recv(); err != nil || m.Signal == nil {
		t.Errorf("after refusals: got %+v %v", m, err)
	}
	// The sender bounds what it sends.
	a2, _, _, _ := channelPair(t, false)
	err := a2.send(&message{Type: msgExec, Seq: 1, Exec: &execRequest{ID: "x1", Argv: []string{strings.Repeat("a", maxToInit)}}})
	if err == nil || !strings.Contains(err.Error(), "exec message is") {
		t.Errorf("oversize send: got %v, want an error naming the message and its size", err)
	}
}

func TestCheckToInit(t *testing.T) {
	exec := func() *execRequest { return &execRequest{ID: "x1", Argv: []string{"true"}, Dir: "/"} }
	cfg := &initConfig{Home: "/home/sandbox", UID: 1000, GID: 1000, TmpSize: 1 << 20, TmpInodes: 100, Mounts: []string{""}}
	start := &startRequest{TmpSize: 1 << 20, TmpInodes: 100, NoFile: 1024, FSize: 1, NProc: 10}
	cases := []struct {
		name string
		m    *message
		nfds int
		want string // "" accepts
	}{
		{"exec", &message{Type: msgExec, Seq: 1, Exec: exec()}, 3, ""},
		{"config", &message{Type: msgConfig, Seq: 1, Config: cfg}, 0, ""},
		{"start", &message{Type: msgStart, Seq: 1, Start: start}, 0, ""},
		{"files", &message{Type: msgFiles, Seq: 1, Files: &filesRequest{ID: "f1", filesJob: filesJob{Op: filesPut, Root: filesRootHome, Path: "a/b"}}}, 3, ""},
		{"no seq", &message{Type: msgExec, Exec: exec()}, 3, "without a sequence number"},
		{"unknown type", &message{Type: "run_as_root", Seq: 1}, 0, `unknown message type "run_as_root"`},
		{"reply type sent to init", &message{Type: msgStarted, Seq: 1, Started: &startedReply{PID: 5}}, 0, "unknown message type"},
		{"exec without payload", &message{Type: msgExec, Seq: 1}, 3, `want exactly "exec"`},
		{"exec with two payloads", &message{Type: msgExec, Seq: 1, Exec: exec(), Signal: &signalRequest{ID: "x1", Signal: 9}}, 3, "payload [exec signal]"},
		{"exec with two fds", &message{Type: msgExec, Seq: 1, Exec: exec()}, 2, "2 file descriptors, want 3"},
		{"exec with a reply's error", &message{Type: msgExec, Seq: 1, Exec: exec(), Error: "x"}, 3, "error fields"},
		{"exec empty argv", &message{Type: msgExec, Seq: 1, Exec: &execRequest{ID: "x1", Dir: "/"}}, 3, "empty argv"},
		{"exec relative dir", &message{Type: msgExec, Seq: 1, Exec: &execRequest{ID: "x1", Argv: []string{"true"}, Dir: "tmp"}}, 3, "want an absolute path"},
		{"exec bad env", &message{Type: msgExec, Seq: 1, Exec: &execRequest{ID: "x1", Argv: []string{"true"}, Env: []string{"=x"}, Dir: "/"}}, 3, "KEY=VALUE"},
		{"exec NUL", &message{Type: msgExec, Seq: 1, Exec: &execRequest{ID: "x1", Argv: []string{"a\x00b"}, Dir: "/"}}, 3, "NUL"},
		{"exec bad id", &message{Type: msgExec, Seq: 1, Exec: &execRequest{ID: "../x", Argv: []string{"true"}, Dir: "/"}}, 3, "job id"},
		{"start workspace without fd", &message{Type: msgStart, Seq: 1, Start: &startRequest{TmpSize: 1 << 20, TmpInodes: 100, NoFile: 1024, FSize: 1, NProc: 10, Workspace: true, WorkspaceTarget: "/w"}}, 0, "0 file descriptors, want 1"},
		{"start fd without workspace", &message{Type: msgStart, Seq: 1, Start: start}, 1, "1 file descriptors, want 0"},
		{"start tiny tmp", &message{Type: msgStart, Seq: 1, Start: &startRequest{TmpSize: 1, TmpInodes: 100, NoFile: 1024, FSize: 1, NProc: 10}}, 0, "too small"},
		{"signal zero", &message{Type: msgSignal, Seq: 1, Signal: &signalRequest{ID: "x1"}}, 0, "signal 0"},
		{"files dotdot", &message{Type: msgFiles, Seq: 1, Files: &filesRequest{ID: "f1", filesJob: filesJob{Op: filesGet, Root: filesRootHome, Path: "a/../../etc", Name: "etc"}}}, 3, "clean relative path"},
		{"files absolute", &message{Type: msgFiles, Seq: 1, Files: &filesRequest{ID: "f1", filesJob: filesJob{Op: filesGet, Root: filesRootHome, Path: "/etc", Name: "etc"}}}, 3, "clean relative path"},
		{"files root", &message{Type: msgFiles, Seq: 1, Files: &filesRequest{ID: "f1", filesJob: filesJob{Op: filesGet, Root: "host", Path: "x", Name: "x"}}}, 3, `root "host"`},
		{"files op", &message{Type: msgFiles, Seq: 1, Files: &filesRequest{ID: "f1", filesJob: filesJob{Op: "chmod", Root: filesRootHome}}}, 3, `op "chmod"`},
		{"config relative home", &message{Type: msgConfig, Seq: 1, Config: &initConfig{Home: "home", UID: 1, GID: 1, TmpSize: 1 << 20, TmpInodes: 100, Mounts: []string{""}}}, 0, "home"},
		{"config with the jobs cgroup", &message{Type: msgConfig, Seq: 1, Config: &initConfig{Home: "/home/s", UID: 5, GID: 5, TmpSize: 1 << 20, TmpInodes: 100, Mounts: []string{""}, JobsCgroup: true}}, 1, ""},
		{"config jobs cgroup without fd", &message{Type: msgConfig, Seq: 1, Config: &initConfig{Home: "/home/s", UID: 5, GID: 5, TmpSize: 1 << 20, TmpInodes: 100, Mounts: []string{""}, JobsCgroup: true}}, 0, "0 file descriptors, want 1"},
		{"config fd without jobs cgroup", &message{Type: msgConfig, Seq: 1, Config: cfg}, 1, "1 file descriptors, want 0"},
		{"config root uid", &message{Type: msgConfig, Seq: 1, Config: &initConfig{Home: "/home/s", TmpSize: 1 << 20, TmpInodes: 100, Mounts: []string{""}}}, 0, "uid 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := checkToInit(tc.m, tc.nfds)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("got %v, want accepted", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestCheckFromInit(t *testing.T) {
	cases := []struct {
		name string
		m    *message
		nfds int
		want string
	}{
		{"ready", &message{Type: msgReady, Seq: 1}, 0, ""},
		{"started", &message{Type: msgStarted, Seq: 2, Started: &startedReply{PID: 7, Session: 3}}, 0, ""},
		{"exit", &message{Type: msgExit, Exit: &exitEvent{ID: "x1", Code: 3}}, 0, ""},
		{"exec_error", &message{Type: msgExecError, Seq: 2, Code: 127, Error: "not found"}, 0, ""},
		{"protocol error", &message{Type: msgError, Error: "malformed message"}, 0, ""},
		{"fds from init", &message{Type: msgReady, Seq: 1}, 1, "want none"},
		{"rootless island's ready", &message{Type: msgReady, Seq: 1}, islandFDs, ""},
		{"island fds on another reply", &message{Type: msgOK, Seq: 1}, islandFDs, "want none"},
		{"one fd too few for an island", &message{Type: msgReady, Seq: 1}, islandFDs - 1, "want none"},
		{"unknown type", &message{Type: "escape", Seq: 1}, 0, `unknown message type "escape"`},
		{"request type from init", &message{Type: msgExec, Seq: 1, Exec: &execRequest{ID: "x1", Argv: []string{"sh"}, Dir: "/"}}, 0, "unknown message type"},
		{"started without pid", &message{Type: msgStarted, Seq: 2}, 0, `want exactly "started"`},
		{"started pid 1", &message{Type: msgStarted, Seq: 2, Started: &startedReply{PID: 1}}, 0, "pid 1"},
		{"exec_error code 1", &message{Type: msgExecError, Seq: 2, Code: 1, Error: "x"}, 0, "want 126 or 127"},
		{"exit with seq", &message{Type: msgExit, Seq: 3, Exit: &exitEvent{ID: "x1"}}, 0, "sequence number"},
		{"exit bad id", &message{Type: msgExit, Exit: &exitEvent{ID: ""}}, 0, "job id"},
		{"setup_error without error", &message{Type: msgSetupError, Seq: 1}, 0, "without an error"},
		{"ok with payload", &message{Type: msgOK, Seq: 1, Exit: &exitEvent{ID: "x1"}}, 0, "unexpected payload"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := checkFromInit(tc.m, tc.nfds)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("got %v, want accepted", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// fakeInitSandbox is a Sandbox whose init is the test: its control channel's
// other end, and a fake cgroup its killAll writes to.
func fakeInitSandbox(t *testing.T) (*Sandbox, *channel, int) {
	t.Helper()
	m, _, err := fakeV2(t, "cpu memory pids", nil)
	if err != nil {
		t.Fatal(err)
	}
	cg := fakeCgroup(t, m, "cgroup.kill")
	s := &Sandbox{slot: &slot{cg: cg}, lg: slog.New(slog.DiscardHandler), gone: make(chan struct{}), dead: make(chan struct{}),
		readerDone: make(chan struct{}), pending: map[uint64]*request{}, jobs: map[string]*job{}, state: stateStarted}
	own, initEnd, _, rawB := channelPair(t, true)
	s.ch = own
	go s.readLoop()
	t.Cleanup(func() {
		own.close()
		<-s.readerDone
	})
	return s, initEnd, rawB
}

// TestExecutorRefusesBadMessagesFromInit: a message from init that breaks
// the protocol kills the sandbox (its cgroup), and every waiter gets an error
// naming the message.
func TestExecutorRefusesBadMessagesFromInit(t *testing.T) {
	cases := []struct {
		name string
		send func(t *testing.T, s *Sandbox, c *channel, raw int)
		want string
	}{
		{"unknown type", func(t *testing.T, s *Sandbox, c *channel, raw int) {
			_ = unix.Sendmsg(raw, []byte(`{"type":"escape","seq":1}`), nil, nil, 0)
		}, `unknown message type "escape"`},
		{"garbage", func(t *testing.T, s *Sandbox, c *channel, raw int) {
			_ = unix.Sendmsg(raw, []byte("\x00\x01binary"), nil, nil, 0)
		}, "malformed message"},
		{"reply to nothing", func(t *testing.T, s *Sandbox, c *channel, raw int) {
			_ = c.send(&message{Type: msgOK, Seq: 99})
		}, "request 99, which is not pending"},
		{"exit of an unknown job", func(t *testing.T, s *Sandbox, c *channel, raw int) {
			_ = c.send(&message{Type: msgExit, Exit: &exitEvent{ID: "x9"}})
		}, `job "x9", which is not running`},
		{"wrong reply type", func(t *testing.T, s *Sandbox, c *channel, raw int) {
			if _, err := s.send(&message{Type: msgSignal, Signal: &signalRequest{ID: "x1", Signal: 9}}); err != nil {
				t.Fatal(err)
			}
			_, _, _ = c.recv()
			_ = c.send(&message{Type: msgStarted, Seq: 1, Started: &startedReply{PID: 5}})
		}, "started reply to a signal request"},
		{"fds from init", func(t *testing.T, s *Sandbox, c *channel, raw int) {
			_ = c.send(&message{Type: msgOK, Seq: 1}, pipeFDs(t, 1)...)
		}, "want none"},
		{"too large", func(t *testing.T, s *Sandbox, c *channel, raw int) {
			_ = unix.Sendmsg(raw, make([]byte, maxFromInit+1), nil, nil, 0)
		}, "larger than"},
		{"seq-less error: init refused what we sent", func(t *testing.T, s *Sandbox, c *channel, raw int) {
			_ = c.send(&message{Type: msgError, Error: "message from the executor: malformed message"})
		}, "init refused a message"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, initEnd, raw := fakeInitSandbox(t)
			tc.send(t, s, initEnd, raw)
			select {
			case <-s.dead:
			case <-time.After(10 * time.Second):
				t.Fatal("the sandbox lives on after a bad message from init")
			}
			err := s.deadError()
			if !errors.Is(err, ErrSandboxGone) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrSandboxGone naming %q", err, tc.want)
			}
			if b, _ := os.ReadFile(s.slot.cg.dirs[""] + "/cgroup.kill"); string(b) != "1" {
				t.Errorf("cgroup.kill: got %q, want the sandbox killed", b)
			}
			if _, err := s.send(&message{Type: msgSignal, Signal: &signalRequest{ID: "x1", Signal: 9}}); !errors.Is(err, ErrSandboxGone) {
				t.Errorf("send after: got %v, want ErrSandboxGone", err)
			}
		})
	}
}

// TestInitRefusesBadMessages: a real init answers messages that break the
// protocol (out of order, wrong fds, a second start, a duplicate job id)
// with an error naming them and runs nothing; a message it cannot even read
// is refused too, which the executor takes as its own failure and kills the
// sandbox.
func TestInitRefusesBadMessages(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	s, err := e.Prepare(t.Context(), PrepareSpec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyAndCheck(t, s) })
	touch := func(n string) *execRequest {
		return &execRequest{ID: "t" + n, Argv: []string{"/usr/bin/touch", DefaultWorkspaceDir + "/ran-" + n}, Dir: "/"}
	}
	ask := func(m *message, fds ...int) *message {
		t.Helper()
		r, err := s.send(m, fds...)
		if err != nil {
			t.Fatal(err)
		}
		reply, err := s.await(t.Context(), r)
		if err != nil {
			t.Fatal(err)
		}
		return reply
	}
	stdio := func() []int { return []int{devNull(t), devNull(t), devNull(t)} }
	cases := []struct {
		name string
		m    *message
		fds  func() []int
		want string
	}{
		{"exec before start", &message{Type: msgExec, Exec: touch("1")}, stdio, "exec message before start"},
		{"signal before start", &message{Type: msgSignal, Signal: &signalRequest{ID: "x1", Signal: 9}}, nil, "signal message before start"},
		{"second config", &message{Type: msgConfig, Config: &initConfig{Home: "/home/s", UID: 5, GID: 5, TmpSize: 1 << 20, TmpInodes: 100, Mounts: []string{""}}}, nil, "configured"},
	}
	for _, tc := range cases {
		var fds []int
		if tc.fds != nil {
			fds = tc.fds()
		}
		if r := ask(tc.m, fds...); r.Type != msgError || !strings.Contains(r.Error, tc.want) {
			t.Errorf("%s: got %+v, want an error containing %q", tc.name, r, tc.want)
		}
	}
	if err := s.Start(t.Context(), StartSpec{}); err != nil {
		t.Fatal(err)
	}
	after := []struct {
		name string
		m    *message
		fds  func() []int
		want string
	}{
		{"exec with two fds", &message{Type: msgExec, Exec: touch("2")}, func() []int { return stdio()[:2] }, "2 file descriptors, want 3"},
		{"second start", &message{Type: msgStart, Start: &startRequest{TmpSize: 1 << 20, TmpInodes: 100, NoFile: 1024, FSize: 1, NProc: 10}}, nil, "is started"},
		{"signal to no job", &message{Type: msgSignal, Signal: &signalRequest{ID: "x77", Signal: 9}}, nil, "not running"},
		{"exec with a relative dir", &message{Type: msgExec, Exec: &execRequest{ID: "t3", Argv: touch("3").Argv, Dir: "tmp"}}, stdio, "absolute path"},
	}
	for _, tc := range after {
		var fds []int
		if tc.fds != nil {
			fds = tc.fds()
		}
		if r := ask(tc.m, fds...); r.Type != msgError || !strings.Contains(r.Error, tc.want) {
			t.Errorf("%s: got %+v, want an error containing %q", tc.name, r, tc.want)
		}
	}
	if out := mustExec(t, s, ExecSpec{Argv: []string{"ls", "-A", DefaultWorkspaceDir}}).Stdout; len(out) != 0 {
		t.Errorf("a refused message ran something: workspace holds %q", out)
	}
	// Garbage: init refuses it without a sequence number to answer; the
	// executor, which sent it, fails the sandbox.
	if err := s.ch.conn.SetWriteDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ch.conn.WriteMsgUnix([]byte("not json"), nil, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.dead:
	case <-time.After(10 * time.Second):
		t.Fatal("sandbox not failed after init refused a message")
	}
	if err := s.deadError(); !strings.Contains(err.Error(), "init refused a message") || !strings.Contains(err.Error(), "malformed message") {
		t.Errorf("got %v, want init's refusal named", err)
	}
}

func devNull(t *testing.T) int {
	t.Helper()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return int(f.Fd())
}
