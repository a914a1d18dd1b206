package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// The gateway and the DNS filter are built before the policy has compiled; a
// decision asked of them then never passes without the engine.
func TestEngineRefFailsClosed(t *testing.T) {
	in := &policy.Input{Kind: policy.KindHTTP}
	t.Run("compile failed", func(t *testing.T) {
		r := newEngineRef()
		r.set(nil)
		if d := r.Decide(context.Background(), in); d.Permit() || d.Err == nil || len(d.Reasons) != 1 || d.Reasons[0].ID != policy.ReasonPolicyError {
			t.Fatalf("got %+v, want a policy_error deny", d)
		}
	})
	t.Run("not compiled yet, context ends", func(t *testing.T) {
		r := newEngineRef()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if d := r.Decide(ctx, in); d.Permit() || d.Err == nil || d.Reasons[0].ID != policy.ReasonPolicyError {
			t.Fatalf("got %+v, want a policy_error deny", d)
		}
	})
	t.Run("waits for the engine", func(t *testing.T) {
		e, err := policy.New(policy.Config{AllowHosts: []string{"example.test"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		r := newEngineRef()
		got := make(chan policy.Decision, 1)
		go func() {
			got <- r.Decide(context.Background(), &policy.Input{Kind: policy.KindHTTP,
				Destination: policy.Destination{Host: "example.test", Port: 80, Suffixes: []string{"example.test", "test"}},
				HTTP:        &policy.HTTP{Method: "GET", Scheme: "http", Path: "/"}})
		}()
		select {
		case d := <-got:
			t.Fatalf("got %+v before the engine was set, want Decide to wait", d)
		case <-time.After(20 * time.Millisecond):
		}
		r.set(e)
		if d := <-got; !d.Permit() {
			t.Fatalf("got %+v, want the engine's allow for an --allow'ed host", d)
		}
	})
}

// TestEngineRefChanged: the gateway re-decides open connections when Changed
// closes: when the engine is set, then on each of the engine's own swaps; a
// failed compile never announces one.
func TestEngineRefChanged(t *testing.T) {
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	r := newEngineRef()
	before := r.Changed()
	if closed(before) {
		t.Fatal("closed before the engine was set")
	}
	e, err := policy.New(policy.Config{AllowHosts: []string{"example.test"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	r.set(e)
	if !closed(before) {
		t.Fatal("not closed when the engine was set")
	}
	if got, want := r.Changed(), e.Changed(); got != want {
		t.Fatalf("after set: got %v, want the engine's channel %v", got, want)
	}
	failed := newEngineRef()
	failed.set(nil)
	if ch := failed.Changed(); closed(ch) {
		t.Fatal("a failed compile announced a change")
	}
}
