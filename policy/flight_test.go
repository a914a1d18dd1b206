package policy

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// blockFirstEval makes e's next evaluation wait for release (and count
// every evaluation in evals).
func blockFirstEval(e *Engine) (evals *atomic.Int64, release func()) {
	evals = new(atomic.Int64)
	gate := make(chan struct{})
	var once sync.Once
	e.evalHook = func() {
		if evals.Add(1) == 1 {
			<-gate
		}
	}
	return evals, func() { once.Do(func() { close(gate) }) }
}

// waitFor polls until n Decides wait for in's flight on e's snapshot
// (bounded: the test fails after 20 s).
func waitFor(t *testing.T, e *Engine, in *Input, n int) {
	t.Helper()
	s := e.cur.Load()
	x := prepare(in)
	key := string(appendCacheKey(nil, &x))
	for deadline := time.Now().Add(20 * time.Second); s.flights.waiting(key) != n; {
		if time.Now().After(deadline) {
			t.Fatalf("got %d waiting, want %d", s.flights.waiting(key), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDecideBurstEvaluatesOnce: N concurrent Decides of one input (one
// sandbox's burst of CONNECTs to one host) run the policy once, and each
// gets the decision a Decide alone gets, its own copy.
func TestDecideBurstEvaluatesOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *Input
	}{
		{"allowed", kindIn(KindConnect, "pypi.org")},
		{"denied", kindIn(KindConnect, "evil.example")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			alone := newEngine(t, Config{}).Decide(context.Background(), tc.in)
			e := newEngine(t, Config{})
			evals, release := blockFirstEval(e)
			defer release()
			const n = 16
			got := make([]Decision, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got[i] = e.Decide(context.Background(), tc.in)
				}()
			}
			waitFor(t, e, tc.in, n-1)
			release()
			wg.Wait()
			if evals.Load() != 1 {
				t.Fatalf("got %d evaluations, want 1", evals.Load())
			}
			for i, d := range got {
				if d.Allowed != alone.Allowed || reasonIDs(d) != reasonIDs(alone) || d.Rev != alone.Rev || d.Err != nil {
					t.Fatalf("decide %d: got %+v, want %+v", i, d, alone)
				}
			}
			got[0].Reasons = append(got[0].Reasons[:0:0], Reason{ID: "mutated"})
			if len(got[1].Reasons) > 0 && got[1].Reasons[0].ID == "mutated" {
				t.Fatal("got waiters sharing one Reasons slice")
			}
		})
	}
}

// TestDecideFlightNotAcrossReload: a Decide that starts after a reload never
// gets the answer of an evaluation of the old revision still under way.
func TestDecideFlightNotAcrossReload(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"p.rego": "package airlock.egress\n\nallow if input.destination.host == \"one.example\"\n"})
	e := newEngine(t, Config{Dir: dir})
	oldRev := e.Rev()
	in := kindIn(KindConnect, "one.example")
	evals, release := blockFirstEval(e)
	defer release()
	old := make(chan Decision, 1)
	go func() { old <- e.Decide(context.Background(), in) }()
	for evals.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	writeFiles(t, dir, map[string]string{"p.rego": "package airlock.egress\n\nallow if input.destination.host == \"two.example\"\n"})
	if err := e.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The old evaluation is still blocked: this Decide must not wait for it.
	if d := e.Decide(context.Background(), in); d.Allowed || d.Rev == oldRev || d.Err != nil {
		t.Fatalf("after the reload: got %+v, want denied by the new revision", d)
	}
	release()
	if d := <-old; !d.Allowed || d.Rev != oldRev {
		t.Fatalf("the evaluation begun before the reload: got %+v, want allowed by %s", d, oldRev)
	}
}

// TestDecideFlightWaitBounded: a Decide waiting for another's evaluation
// waits no longer than EvalTimeout, then evaluates for itself; its context
// ends the wait with the fail-closed deny; and a failure of the evaluation
// it waited for (that Decide's context ended it) is never handed on.
func TestDecideFlightWaitBounded(t *testing.T) {
	in := kindIn(KindConnect, "pypi.org")
	alone := newEngine(t, Config{}).Decide(context.Background(), in)
	t.Run("deadline", func(t *testing.T) {
		e := newEngine(t, Config{EvalTimeout: 50 * time.Millisecond})
		evals, release := blockFirstEval(e)
		defer release()
		go e.Decide(context.Background(), in)
		waitFor(t, e, in, 0)
		// The first evaluation stays stuck: the waiter gives up on it.
		if d := e.Decide(context.Background(), in); d.Allowed != alone.Allowed || d.Err != nil {
			t.Fatalf("got %+v, want its own evaluation's %+v", d, alone)
		}
		if evals.Load() != 2 {
			t.Fatalf("got %d evaluations, want 2", evals.Load())
		}
	})
	t.Run("waiter context", func(t *testing.T) {
		e := newEngine(t, Config{})
		_, release := blockFirstEval(e)
		defer release()
		go e.Decide(context.Background(), in)
		waitFor(t, e, in, 0)
		ctx, cancel := context.WithCancel(context.Background())
		got := make(chan Decision, 1)
		go func() { got <- e.Decide(ctx, in) }()
		waitFor(t, e, in, 1)
		cancel()
		if d := <-got; d.Allowed || d.Err == nil {
			t.Fatalf("got %+v, want the fail-closed deny", d)
		}
	})
	t.Run("first's failure", func(t *testing.T) {
		e := newEngine(t, Config{})
		evals, release := blockFirstEval(e)
		ctx, cancel := context.WithCancel(context.Background())
		first := make(chan Decision, 1)
		go func() { first <- e.Decide(ctx, in) }()
		waitFor(t, e, in, 0)
		got := make(chan Decision, 1)
		go func() { got <- e.Decide(context.Background(), in) }()
		waitFor(t, e, in, 1)
		cancel()
		release()
		if d := <-first; d.Allowed || d.Err == nil {
			t.Fatalf("first: got %+v, want its cancelled context's deny", d)
		}
		if d := <-got; d.Allowed != alone.Allowed || d.Err != nil {
			t.Fatalf("waiter: got %+v, want its own evaluation's %+v", d, alone)
		}
		if evals.Load() != 2 {
			t.Fatalf("got %d evaluations, want 2", evals.Load())
		}
	})
}
