package sandboxd

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer the command's output goroutine and the
// test may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestRunWaitsForReady: Run starts nothing of the command before Spec.Ready
// returns (what it guards, a namespace's rules, is set up while init
// starts): while Ready holds, the sandbox exists but no start record is
// written and the command has printed nothing; once it returns the command
// runs.
func TestRunWaitsForReady(t *testing.T) {
	e, au := newTestExecutor(t, nil)
	var out lockedBuffer
	var released atomic.Bool
	var early []string
	spec := Spec{Argv: sh("echo ran"), Stdout: &out, Ready: func() error {
		for _, r := range au.Records() {
			early = append(early, r.Exec.Phase)
		}
		if s := out.String(); s != "" {
			early = append(early, "output "+s)
		}
		released.Store(true)
		return nil
	}}
	res, err := e.Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if !released.Load() {
		t.Fatal("Ready was never called")
	}
	if len(early) != 0 {
		t.Errorf("before Ready returned: %v, want nothing", early)
	}
	if res.ExitCode != 0 || out.String() != "ran\n" {
		t.Errorf("after Ready: exit %d, stdout %q, want 0 and %q", res.ExitCode, out.String(), "ran\n")
	}
	if recs := au.Records(); len(recs) != 2 || recs[0].Exec.Phase != "start" || recs[1].Exec.Phase != "end" {
		t.Errorf("audit records: got %+v, want start and end", recs)
	}
}

// TestRunReadyFails: a Ready that fails is Run's error; the command never
// ran (no output, no start record) and the sandbox is gone (the executor's
// cleanup checks its cgroups).
func TestRunReadyFails(t *testing.T) {
	e, au := newTestExecutor(t, nil)
	errNotReady := errors.New("alk-test: the network is not ready")
	var out lockedBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := e.Run(ctx, Spec{Argv: sh("echo ran"), Stdout: &out, Ready: func() error { return errNotReady }})
	if !errors.Is(err, errNotReady) || res != nil {
		t.Fatalf("Run: got %v, %+v, want the Ready error and no result", err, res)
	}
	if s := out.String(); s != "" {
		t.Errorf("the command ran: %q", s)
	}
	if recs := au.Records(); len(recs) != 0 {
		t.Errorf("audit records: got %+v, want none", recs)
	}
}
