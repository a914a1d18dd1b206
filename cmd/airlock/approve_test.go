package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/test/poll"
)

// TestApproveNonInteractive: approve ID with one answer flag answers it;
// no flag, two flags, or a flag without an ID is a usage error; --list
// prints the pending ones with what the sandbox sent escaped.
func TestApproveNonInteractive(t *testing.T) {
	srv, run := fakeCLI(t)
	srv.Ask(api.Approval{ID: "ap-1", Sandbox: "sb-1", Kind: "connect", Host: "new.example", Port: 443, Msg: "new \x1b[31mhost"})
	srv.Ask(api.Approval{ID: "ap-2", Sandbox: "sb-1", Kind: "http", Method: "GET", Host: "new.example", Port: 443, Path: "/x"})
	out, _, code := run("", "approve", "--list")
	if code != 0 || !strings.Contains(out, "ap-1") || !strings.Contains(out, "GET new.example:443/x") || strings.Contains(out, "\x1b") {
		t.Errorf("--list: exit %d\n%q", code, out)
	}
	for _, args := range [][]string{{"approve", "ap-1"}, {"approve", "ap-1", "--allow-once", "--deny"}, {"approve", "--deny"}} {
		if _, _, code := run("", args...); code != exitUsage {
			t.Errorf("%q: exit %d, want %d", args, code, exitUsage)
		}
	}
	out, errs, code := run("", "approve", "ap-1", "--allow-once")
	if code != 0 || !strings.Contains(out, "ap-1 approved") {
		t.Errorf("--allow-once: exit %d %s\n%s", code, errs, out)
	}
	out, _, code = run("", "approve", "ap-2", "--deny")
	if code != 0 || !strings.Contains(out, "ap-2 denied") {
		t.Errorf("--deny: exit %d\n%s", code, out)
	}
	if _, errs, code := run("", "approve", "ap-2", "--deny"); code != exitFailed || !strings.Contains(errs, "ap-2") {
		t.Errorf("answering twice: exit %d %q, want %d", code, errs, exitFailed)
	}
	got := srv.Answers()
	if len(got) != 2 || got[0].Answer != api.AnswerOnce || got[1].Answer != api.AnswerDeny {
		t.Errorf("answers: got %+v", got)
	}
}

// TestApproveInteractive: the interactive approve shows each pending
// request as it comes and answers the one shown with the key typed.
func TestApproveInteractive(t *testing.T) {
	srv, _ := fakeCLI(t)
	in, typed := io.Pipe()
	defer typed.Close()
	root := newRootCmd()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	root.SetContext(ctx)
	var out syncBuffer
	root.SetIn(in)
	root.SetOut(&out)
	root.SetErr(&out)
	code := make(chan int, 1)
	go func() { code <- execute(root, []string{"--socket", srv.Socket, "approve"}) }()
	poll.Within(10*time.Second, func() bool { return strings.Contains(out.String(), "waiting for requests") })
	srv.Ask(api.Approval{ID: "ap-7", Sandbox: "sb-1", Kind: "http", Method: "POST", Host: "api.vendor.example", Port: 443, Path: "/v1/things", Msg: "a vendor API"})
	if !poll.Within(10*time.Second, func() bool { return strings.Contains(out.String(), "[o]nce") }) {
		t.Fatalf("no prompt:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "POST api.vendor.example:443/v1/things") {
		t.Errorf("the prompt does not show the request:\n%s", out.String())
	}
	io.WriteString(typed, "s\n")
	if !poll.Within(10*time.Second, func() bool { return len(srv.Answers()) == 1 }) {
		t.Fatalf("no answer sent:\n%s", out.String())
	}
	if a := srv.Answers()[0]; a.ID != "ap-7" || a.Answer != api.AnswerSandbox {
		t.Errorf("answer: got %+v, want ap-7 sandbox", a)
	}
	io.WriteString(typed, "q\n")
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("exit %d\n%s", c, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("q did not end it")
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
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
