package sandboxd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/test/roottest"
)

var uidBaseSeq = struct {
	sync.Mutex
	n int
}{}

// newTestExecutor builds an executor with a cgroup parent and uid range of its own,
// so concurrent test processes never meet.
func newTestExecutor(t testing.TB, mod func(*Config)) (*Executor, *audittest.Log) {
	t.Helper()
	roottest.Require(t)
	uidBaseSeq.Lock()
	uidBaseSeq.n++
	n := uidBaseSeq.n
	uidBaseSeq.Unlock()
	cfg := Config{
		InitArgs:     []string{},
		CgroupParent: fmt.Sprintf("airlock-test-%d-%d", os.Getpid(), n),
		StateDir:     t.TempDir(),
		// A uid range derived from the pid keeps concurrent test binaries apart.
		UIDBase:  200000 + (os.Getpid()%5000)*40 + (n%4)*10,
		UIDCount: 10,
		PoolSize: 1,
		Limits:   Limits{Timeout: 30 * time.Second, Memory: 256 << 20},
	}
	if mod != nil {
		mod(&cfg)
	}
	au := &audittest.Log{}
	e, err := New(cfg, au, slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		for _, d := range e.cgm.dirs {
			for _, name := range e.cgm.list() {
				cg := e.cgm.open(name)
				_ = cg.kill()
				_ = cg.remove()
			}
			if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
				t.Errorf("remove cgroup parent %s: %v", d, err)
			}
		}
	})
	return e, au
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func mustRun(t *testing.T, e *Executor, spec Spec) *Result {
	t.Helper()
	res, err := e.Run(context.Background(), spec)
	if err != nil {
		t.Fatalf("Run(%q): %v", spec.Argv, err)
	}
	return res
}

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

func errorsAs(err error, target any) bool { return errors.As(err, target) }
