package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
	"github.com/airlock-dev/airlock/test/poll"
)

// scriptedApprover answers every question with answer, counting them.
type scriptedApprover struct {
	mu     sync.Mutex
	asked  []Question
	answer Answer
}

func (a *scriptedApprover) Approve(_ context.Context, q Question) Answer {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, q)
	return a.answer
}

func (a *scriptedApprover) questions() []Question {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Question(nil), a.asked...)
}

// askingDecider asks about raw.example (every kind) and denies everything
// else; with deny set it denies raw.example too, without asking.
type askingDecider struct {
	deny atomic.Bool
	ch   chan struct{}
	mu   sync.Mutex
}

func (d *askingDecider) Decide(_ context.Context, in *policy.Input) policy.Decision {
	dn := policytest.Denied(policytest.ReasonNotAllowed)
	if in.Destination.Host == "raw.example" && !d.deny.Load() {
		dn.Ask, dn.AskMsg = true, "a host nobody allowed"
	}
	return dn
}

func (d *askingDecider) Changed() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ch
}

func (d *askingDecider) change() {
	d.mu.Lock()
	close(d.ch)
	d.ch = make(chan struct{})
	d.mu.Unlock()
}

// TestApprovedTunnel: a CONNECT the policy asks about is held for the
// Approver; approved, the tunnel opens, what it carries is not asked about
// again, and a policy change that still only asks keeps it open, while one
// that denies closes it. Refused, the upstream sees nothing and the
// refusal's first reason is the answer's.
func TestApprovedTunnel(t *testing.T) {
	echo := newRawUpstream(t, "")
	dec := &askingDecider{ch: make(chan struct{})}
	ap := &scriptedApprover{answer: Answer{Allow: true, Reason: ReasonApprovedOnce, Msg: "uid 1000 answered once"}}
	h := newHarness(t, dec, names("raw.example"), nil, func(c *Config) { c.Approver = ap })
	h.dialer.allow(echo.addr)
	c, br := connectTo(t, h, "raw.example", echo.port)
	io.WriteString(c, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil {
		t.Fatalf("approved tunnel: %v", err)
	}
	if qs := ap.questions(); len(qs) != 1 || qs[0].Host != "raw.example" || qs[0].Kind != policy.KindConnect || qs[0].Msg != "a host nobody allowed" {
		t.Fatalf("questions: got %+v, want one about the CONNECT (not again for what it carries)", qs)
	}
	rec := settledMatch(h.log, 1, func(r audit.Record) bool { return r.Kind == audit.KindConnect })
	if len(rec) != 1 || rec[0].Decision != audit.DecisionAllow || !audittest.HasReason(rec[0], ReasonApprovedOnce) {
		t.Fatalf("tunnel record: got %+v, want allow with %s", rec, ReasonApprovedOnce)
	}
	dec.change() // the policy still only asks: the approved tunnel stays
	time.Sleep(100 * time.Millisecond)
	io.WriteString(c, "pong")
	if _, err := io.ReadFull(br, buf); err != nil {
		t.Fatalf("after a change that still asks: %v", err)
	}
	dec.deny.Store(true)
	dec.change()
	if !poll.Within(audittest.WaitLimit, func() bool {
		return len(h.log.Match(func(r audit.Record) bool { return audittest.HasReason(r, ReasonPolicyChanged) })) == 1
	}) {
		t.Fatal("a policy that denies did not close the approved tunnel")
	}

	// Refused: the answer's reason first, the upstream sees nothing.
	dec.deny.Store(false)
	ap.mu.Lock()
	ap.answer = Answer{Reason: ReasonApprovalTimeout, Msg: "nobody answered in 60s"}
	ap.mu.Unlock()
	before := echo.conns.Load()
	resp, _ := rawRequest(t, h.explicit, "CONNECT raw.example:"+strconv.Itoa(echo.port)+" HTTP/1.1\r\n\r\n")
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Airlock-Reason") != ReasonApprovalTimeout || echo.conns.Load() != before {
		t.Fatalf("refused: got %d %q, upstream conns +%d; want 403 %s and 0", resp.StatusCode, resp.Header.Get("X-Airlock-Reason"), echo.conns.Load()-before, ReasonApprovalTimeout)
	}
}

// TestAskWithoutApprover: with no Approver an ask decision is the deny it
// is, nobody is asked and nothing waits.
func TestAskWithoutApprover(t *testing.T) {
	echo := newRawUpstream(t, "")
	h := newHarness(t, &askingDecider{ch: make(chan struct{})}, names("raw.example"), nil)
	h.dialer.allow(echo.addr)
	resp, _ := rawRequest(t, h.explicit, "CONNECT raw.example:"+strconv.Itoa(echo.port)+" HTTP/1.1\r\n\r\n")
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Airlock-Reason") != policytest.ReasonNotAllowed || echo.conns.Load() != 0 {
		t.Fatalf("got %d %q, upstream conns %d; want 403 %s and 0", resp.StatusCode, resp.Header.Get("X-Airlock-Reason"), echo.conns.Load(), policytest.ReasonNotAllowed)
	}
}

// slowApprover approves after d.
type slowApprover struct{ d time.Duration }

func (a slowApprover) Approve(_ context.Context, q Question) Answer {
	time.Sleep(a.d)
	return Answer{Allow: true, Reason: ReasonApprovedOnce, Msg: "slow"}
}

// TestHoldOutlastsIdleTimeout: a request held for an answer longer than
// the client connection's idle and header timeouts is still served when
// the answer comes (the hold is bounded by the Approver, not by them).
func TestHoldOutlastsIdleTimeout(t *testing.T) {
	up := newUpstream(t, nil, nil)
	dec := &askingDecider{ch: make(chan struct{})}
	h := newHarness(t, dec, names("raw.example"), nil, func(c *Config) {
		c.Approver = slowApprover{1500 * time.Millisecond}
		c.IdleTimeout, c.ReadHeaderTimeout = 500*time.Millisecond, 500*time.Millisecond
	})
	h.allowUpstreams(up)
	resp, body := rawRequest(t, h.explicit, fmt.Sprintf("GET http://raw.example:%d/x HTTP/1.1\r\nHost: raw.example:%d\r\n\r\n", up.port, up.port))
	if resp.StatusCode != 200 {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
}
