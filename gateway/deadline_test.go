package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy/policytest"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// TestDecisionCtx pins decisionCtx to context.Context's contract: done at its
// deadline whether or not a timer was armed, done (Canceled) after stop, an
// AfterFunc run once at the end and kept from running by its stop.
func TestDecisionCtx(t *testing.T) {
	t.Run("deadline without a waiter", func(t *testing.T) {
		c := newDecisionCtx(time.Millisecond)
		for c.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err: got %v, want %v", c.Err(), context.DeadlineExceeded)
		}
		select {
		case <-c.Done():
		default:
			t.Fatal("Done not closed after Err reported the deadline")
		}
	})
	t.Run("deadline with a waiter", func(t *testing.T) {
		c := newDecisionCtx(5 * time.Millisecond)
		<-c.Done()
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err: got %v, want %v", c.Err(), context.DeadlineExceeded)
		}
	})
	t.Run("stop before Done", func(t *testing.T) {
		c := newDecisionCtx(time.Hour)
		if c.Err() != nil {
			t.Fatalf("Err before the deadline: %v", c.Err())
		}
		c.stop()
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("Err after stop: got %v, want %v", c.Err(), context.Canceled)
		}
		<-c.Done() // made after the end: closed at once
	})
	t.Run("stop wakes a waiter", func(t *testing.T) {
		c := newDecisionCtx(time.Hour)
		d := c.Done()
		c.stop()
		<-d
	})
	t.Run("AfterFunc runs at the deadline, through context.AfterFunc", func(t *testing.T) {
		c := newDecisionCtx(5 * time.Millisecond)
		ran := make(chan struct{})
		context.AfterFunc(c, func() { close(ran) })
		<-ran
	})
	t.Run("AfterFunc stopped never runs", func(t *testing.T) {
		c := newDecisionCtx(5 * time.Millisecond)
		var ran atomic.Bool
		stop := context.AfterFunc(c, func() { ran.Store(true) })
		if !stop() {
			t.Fatal("stop before the deadline did not report keeping f from running")
		}
		if stop() {
			t.Fatal("second stop reported stopping again")
		}
		<-c.Done()
		c.stop()
		time.Sleep(20 * time.Millisecond)
		if ran.Load() {
			t.Fatal("a stopped AfterFunc ran")
		}
	})
	t.Run("AfterFunc runs on stop", func(t *testing.T) {
		c := newDecisionCtx(time.Hour)
		ran := make(chan struct{})
		context.AfterFunc(c, func() { close(ran) })
		c.stop()
		<-ran
	})
	t.Run("AfterFunc after the end runs at once", func(t *testing.T) {
		c := newDecisionCtx(time.Hour)
		c.stop()
		ran := make(chan struct{})
		stop := context.AfterFunc(c, func() { close(ran) })
		<-ran
		if stop() {
			t.Fatal("stop reported stopping a func that already ran")
		}
	})
}

// waitingDecider allows everything, but only once its context is done: a
// decider slower than the policy timeout.
type waitingDecider struct{ asked atomic.Int64 }

func (d *waitingDecider) Decide(ctx context.Context, _ *policy.Input) policy.Decision {
	d.asked.Add(1)
	<-ctx.Done()
	if ctx.Err() == nil {
		return policy.Decision{Allowed: true, Mode: policy.ModeEnforce}
	}
	return policy.Decision{Err: ctx.Err(), Mode: policy.ModeEnforce}
}

// TestPolicyTimeoutFailsClosed: a decision that outlasts policy_timeout is a
// policy error; the request is refused, audited as an error, and the
// upstream sees nothing. A context that never ended would leave the request
// hanging (the client's timeout fails the test).
func TestPolicyTimeoutFailsClosed(t *testing.T) {
	dec := &waitingDecider{}
	h := newHarness(t, dec, names("pypi.org"), nil, func(c *Config) { c.PolicyTimeout = 50 * time.Millisecond })
	up := newUpstream(t, nil, nil)
	h.allowUpstreams(up)
	resp, err := h.proxyClient(nil).Get(fmt.Sprintf("http://pypi.org:%d/simple/", up.port))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Fatalf("status %d: a timed-out decision let the request through", resp.StatusCode)
	}
	if dec.asked.Load() == 0 {
		t.Fatal("the decider was never asked")
	}
	h.log.Wait(t, "the timed-out request's record", func(r audit.Record) bool {
		return r.Host == "pypi.org" && r.Decision == audit.DecisionError
	})
	if n := up.reqs.Load(); n != 0 {
		t.Fatalf("upstream saw %d requests after a timed-out decision", n)
	}
	if len(h.dialer.dialedAddrs()) != 0 {
		t.Fatalf("gateway dialed %v after a timed-out decision", h.dialer.dialedAddrs())
	}
}

// TestExplicitSlowHeader: on a kept-alive connection, a request whose header
// block dribbles in is cut off at ReadHeaderTimeout with a bad_request record,
// whether it is the connection's first request or a later one (whose first
// bytes may arrive without the block's end), and its origin sees nothing of it.
func TestExplicitSlowHeader(t *testing.T) {
	up := newUpstream(t, nil, nil)
	h := newHarness(t, policytest.Allow("pypi.org"), names("pypi.org"), nil, func(c *Config) {
		c.ReadHeaderTimeout = 300 * time.Millisecond
	})
	h.allowUpstreams(up)
	whole := fmt.Sprintf("GET http://pypi.org:%d/ok HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", up.port, up.port)
	slow := fmt.Sprintf("GET http://pypi.org:%d/slow HTTP/1.1\r\nHost: pypi.org:%d\r\nX-Pad: ", up.port, up.port)
	for _, first := range []bool{true, false} {
		t.Run(fmt.Sprintf("first=%v", first), func(t *testing.T) {
			c, err := net.DialTimeout("tcp", h.explicit, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(8 * time.Second))
			br := bufio.NewReader(c)
			if !first {
				c.Write([]byte(whole))
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("whole request: status %d", resp.StatusCode)
				}
				// Its record may land after its response.
				h.log.Wait(t, "whole request", func(r audit.Record) bool { return r.Path == "/ok" })
			}
			reqs := up.reqs.Load()
			n := len(h.log.Records())
			c.Write([]byte(slow))
			done := make(chan struct{})
			go func() { // a byte every 100 ms: the deadline is absolute
				defer close(done)
				for i := 0; i < 20; i++ {
					time.Sleep(100 * time.Millisecond)
					if _, err := c.Write([]byte("a")); err != nil {
						return
					}
				}
			}()
			_, err = io.ReadAll(br)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the gateway kept a dribbling header block open")
			}
			c.Close()
			<-done
			recs := settledRecords(t, h.log, n, 1)
			if r := recs[0]; r.Decision != audit.DecisionDeny || !audittest.HasReason(r, ReasonBadRequest) {
				t.Errorf("record: got %s %+v", recSummary(r), r.Reasons)
			}
			if got := up.reqs.Load() - reqs; got != 0 {
				t.Errorf("origin saw %d requests of the dribbling block", got)
			}
		})
	}
}
