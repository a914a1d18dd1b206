package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/gateway"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
	"github.com/airlock-dev/airlock/test/poll"
)

// askWorld is the fake daemon's API and registry with a real gateway whose
// Approver is the daemon's broker, serving one API sandbox on a loopback
// listener; the policy asks about ask.example and allows nothing else.
type askWorld struct {
	*fakeWorld
	sb       api.Sandbox
	explicit string
	up       *httptest.Server
	upPort   int
	upReqs   atomic.Int64
}

// insidePID stands for a process inside the sandbox (inSandbox says so).
const insidePID = 4242

type loopResolver struct{}

func (loopResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

func newAskWorld(t *testing.T, timeout time.Duration, maxPer int) *askWorld {
	t.Helper()
	w := &askWorld{fakeWorld: newFakeWorld(t)}
	w.up = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.upReqs.Add(1)
		io.WriteString(rw, "served "+r.URL.Path)
	}))
	t.Cleanup(w.up.Close)
	w.upPort = w.up.Listener.Addr().(*net.TCPAddr).Port
	d := w.d
	b := newApprovals(timeout, maxPer, d.audit, d.log)
	b.owner = func(id string) (int, bool) {
		if sb, ok := d.reg.get(id); ok {
			return sb.owner, true
		}
		return 0, false
	}
	b.inSandbox = func(c caller, _ string) bool { return c.pid == insidePID }
	b.addAllow = d.approvePolicy
	d.approvals = b
	dec := policytest.Func(func(in *policy.Input) policy.Decision {
		if in.Sandbox.Allow != nil && slices.Contains(in.Sandbox.Allow.Entries(), fmt.Sprintf("ask.example:%d", w.upPort)) {
			return policytest.Allowed()
		}
		dn := policytest.Denied(policytest.ReasonNotAllowed)
		if in.Destination.Host == "ask.example" {
			dn.Ask, dn.AskMsg = true, "a host the team has not used"
		}
		return dn
	})
	g, err := gateway.New(gateway.Config{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Approver: b},
		dec, d.audit, loopResolver{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		g.Shutdown(ctx)
	})
	w.sb = w.client(1000).create(t, `{"labels":{"agent":"coder"}}`)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.explicit = l.Addr().String()
	if err := g.ServeSandbox(policy.Sandbox{ID: w.sb.ID}, l, nil); err != nil {
		t.Fatal(err)
	}
	return w
}

// request is a GET from the sandbox through the gateway, answered on done.
func (w *askWorld) request(t *testing.T, path string) <-chan *http.Response {
	done := make(chan *http.Response, 1)
	go func() {
		c, err := net.Dial("tcp", w.explicit)
		if err != nil {
			done <- nil
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprintf(c, "GET http://ask.example:%d%s HTTP/1.1\r\nHost: ask.example:%d\r\n\r\n", w.upPort, path, w.upPort)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			done <- nil
			return
		}
		io.Copy(io.Discard, resp.Body)
		done <- resp
	}()
	return done
}

// pending waits (bounded) for n approvals the caller sees.
func (w *askWorld) pending(t *testing.T, c *apiClient, n int) []api.Approval {
	t.Helper()
	var got []api.Approval
	poll.Within(audittest.WaitLimit, func() bool {
		got = nil
		c.json(t, "GET", "/v1/approvals", "").decode(t, &got)
		return len(got) >= n
	})
	if len(got) != n {
		t.Fatalf("pending approvals: got %d, want %d", len(got), n)
	}
	return got
}

func wait(t *testing.T, done <-chan *http.Response) *http.Response {
	t.Helper()
	select {
	case r := <-done:
		if r == nil {
			t.Fatal("the held request failed")
		}
		return r
	case <-time.After(audittest.WaitLimit):
		t.Fatal("the held request was never answered")
	}
	return nil
}

// TestApprovalRoundTrip: a request the policy asks about is held with its
// connection; the owner sees it and approves it over the API and it is
// served; another uid neither sees nor answers it, a process inside the
// sandbox is refused; a second request nobody answers is denied at the
// time-out (approval_timeout) with the upstream seeing nothing; every
// question and answer is audited with who answered.
func TestApprovalRoundTrip(t *testing.T) {
	w := newAskWorld(t, 60*time.Second, 8)
	owner, other := w.client(1000), w.client(1001)
	done := w.request(t, "/held")
	ap := w.pending(t, owner, 1)[0]
	if ap.Sandbox != w.sb.ID || ap.Host != "ask.example" || ap.Method != "GET" || ap.Path != "/held" || ap.State != api.ApprovalPending || ap.Msg != "a host the team has not used" {
		t.Fatalf("approval: got %+v", ap)
	}
	var seen []api.Approval
	other.json(t, "GET", "/v1/approvals", "").decode(t, &seen)
	if len(seen) != 0 {
		t.Errorf("another uid sees %d approvals, want 0", len(seen))
	}
	if r := other.json(t, "POST", "/v1/approvals/"+ap.ID, `{"answer":"once"}`); r.status != 404 {
		t.Errorf("another uid answering: got %d %s, want 404", r.status, r.body)
	}
	inside := w.clientAs(caller{uid: 1000, pid: insidePID})
	if r := inside.json(t, "POST", "/v1/approvals/"+ap.ID, `{"answer":"once"}`); r.status != 403 {
		t.Errorf("the sandbox answering its own question: got %d %s, want 403", r.status, r.body)
	}
	if r := owner.json(t, "POST", "/v1/approvals/"+ap.ID, `{"answer":"sometimes"}`); r.status != 400 {
		t.Errorf("a bad answer: got %d %s, want 400", r.status, r.body)
	}
	if n := w.upReqs.Load(); n != 0 {
		t.Fatalf("the upstream saw %d requests before the answer, want 0", n)
	}
	r := owner.json(t, "POST", "/v1/approvals/"+ap.ID, `{"answer":"once"}`)
	if r.status != 200 {
		t.Fatalf("owner answering: got %d %s", r.status, r.body)
	}
	if resp := wait(t, done); resp.StatusCode != 200 || w.upReqs.Load() != 1 {
		t.Fatalf("approved request: got %d, upstream requests %d; want 200 and 1", resp.StatusCode, w.upReqs.Load())
	}
	if r := owner.json(t, "POST", "/v1/approvals/"+ap.ID, `{"answer":"once"}`); r.status != 404 {
		t.Errorf("answering twice: got %d, want 404", r.status)
	}

	// Nobody answers the next one: denied at the time-out.
	w.d.approvals.setTimeout(300 * time.Millisecond)
	resp := wait(t, w.request(t, "/late"))
	if resp.StatusCode != 403 || resp.Header.Get("X-Airlock-Reason") != gateway.ReasonApprovalTimeout || w.upReqs.Load() != 1 {
		t.Fatalf("unanswered request: got %d reason %q, upstream requests %d; want 403 %s and 1", resp.StatusCode,
			resp.Header.Get("X-Airlock-Reason"), w.upReqs.Load(), gateway.ReasonApprovalTimeout)
	}

	// Audited: each question and answer with who answered, each request
	// with the answer as its first reason.
	recs := func(match func(r audit.Record) bool) []audit.Record {
		return settled(w.audit, match)
	}
	if q := recs(func(r audit.Record) bool {
		return r.Kind == audit.KindApproval && audittest.HasReason(r, gateway.ReasonApprovalAsked)
	}); len(q) != 2 {
		t.Errorf("question records: got %d, want 2", len(q))
	}
	for _, tc := range []struct{ reason, by, decision, path string }{
		{gateway.ReasonApprovedOnce, `"uid 1000"`, audit.DecisionAllow, "/held"},
		{gateway.ReasonApprovalTimeout, `"timeout"`, audit.DecisionDeny, "/late"},
	} {
		a := recs(func(r audit.Record) bool { return r.Kind == audit.KindApproval && audittest.HasReason(r, tc.reason) })
		if len(a) != 1 || string(a[0].Extra["by"]) != tc.by || a[0].Decision != tc.decision {
			t.Errorf("%s answer record: got %+v, want one by %s", tc.reason, a, tc.by)
		}
		req := recs(func(r audit.Record) bool { return r.Kind == audit.KindHTTP && r.Path == tc.path })
		if len(req) != 1 || req[0].Decision != tc.decision || len(req[0].Reasons) == 0 || req[0].Reasons[0].ID != tc.reason {
			t.Errorf("%s request record: got %+v, want %s with reason %s first", tc.path, req, tc.decision, tc.reason)
		}
	}
}

// TestApprovalAnswers: deny refuses; sandbox lets later requests to the
// host pass without asking; policy adds the host to the sandbox's allow
// list (audited as an update by the approver); past
// max_pending_per_sandbox a request is denied at once.
func TestApprovalAnswers(t *testing.T) {
	w := newAskWorld(t, 60*time.Second, 1)
	owner, root := w.client(1000), w.client(0)
	answer := func(c *apiClient, id, a string) {
		t.Helper()
		if r := c.json(t, "POST", "/v1/approvals/"+id, `{"answer":"`+a+`"}`); r.status != 200 {
			t.Fatalf("answer %s: got %d %s", a, r.status, r.body)
		}
	}

	first := w.request(t, "/one")
	ap := w.pending(t, owner, 1)[0]
	over := wait(t, w.request(t, "/two"))
	if over.StatusCode != 403 || over.Header.Get("X-Airlock-Reason") != gateway.ReasonApprovalLimit {
		t.Errorf("past the limit: got %d %q, want 403 %s", over.StatusCode, over.Header.Get("X-Airlock-Reason"), gateway.ReasonApprovalLimit)
	}
	answer(root, ap.ID, api.AnswerDeny)
	if r := wait(t, first); r.StatusCode != 403 || r.Header.Get("X-Airlock-Reason") != gateway.ReasonApprovalDenied {
		t.Errorf("denied: got %d %q, want 403 %s", r.StatusCode, r.Header.Get("X-Airlock-Reason"), gateway.ReasonApprovalDenied)
	}
	if w.upReqs.Load() != 0 {
		t.Fatalf("the upstream saw %d requests, want 0", w.upReqs.Load())
	}

	held := w.request(t, "/three")
	answer(owner, w.pending(t, owner, 1)[0].ID, api.AnswerSandbox)
	if r := wait(t, held); r.StatusCode != 200 {
		t.Fatalf("approved for the sandbox: got %d", r.StatusCode)
	}
	if r := wait(t, w.request(t, "/four")); r.StatusCode != 200 {
		t.Fatalf("later request after sandbox approval: got %d, want 200 without asking", r.StatusCode)
	}
	if n := len(w.audit.Match(func(r audit.Record) bool { return audittest.HasReason(r, gateway.ReasonApprovalAsked) })); n != 2 {
		t.Errorf("questions: got %d, want 2 (the one past the limit and the fourth were not asked about)", n)
	}

	w.d.approvals.forget(w.sb.ID)
	held = w.request(t, "/five")
	answer(owner, w.pending(t, owner, 1)[0].ID, api.AnswerPolicy)
	if r := wait(t, held); r.StatusCode != 200 {
		t.Fatalf("approved into the policy: got %d", r.StatusCode)
	}
	entry := fmt.Sprintf("ask.example:%d", w.upPort)
	var sb api.Sandbox
	owner.json(t, "GET", "/v1/sandboxes/"+w.sb.ID, "").decode(t, &sb)
	if !slices.Contains(sb.Allow, entry) {
		t.Errorf("allow list after answer policy: got %q, want %q in it", sb.Allow, entry)
	}
	if n := len(w.audit.Match(func(r audit.Record) bool {
		return audittest.HasReason(r, ReasonUpdated) && strings.Contains(string(r.Extra["by_uid"]), "1000")
	})); n != 1 {
		t.Errorf("update records by uid 1000: got %d, want 1", n)
	}
}

// TestApprovalFollow: the follow stream sends the pending approvals, then
// each question and each answer as it happens.
func TestApprovalFollow(t *testing.T) {
	w := newAskWorld(t, 60*time.Second, 8)
	owner := w.client(1000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", owner.base+"/v1/approvals?follow=true", nil)
	resp, err := owner.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	next := func() api.Approval {
		t.Helper()
		for lines.Scan() {
			if strings.TrimSpace(lines.Text()) == "" {
				continue
			}
			var a api.Approval
			if err := json.Unmarshal(lines.Bytes(), &a); err != nil {
				t.Fatalf("line %q: %v", lines.Text(), err)
			}
			return a
		}
		t.Fatalf("stream ended: %v", lines.Err())
		return api.Approval{}
	}
	done := w.request(t, "/followed")
	a := next()
	if a.State != api.ApprovalPending || a.Path != "/followed" {
		t.Fatalf("first line: got %+v, want the pending question", a)
	}
	if r := owner.json(t, "POST", "/v1/approvals/"+a.ID, `{"answer":"once"}`); r.status != 200 {
		t.Fatalf("answer: %d %s", r.status, r.body)
	}
	if b := next(); b.ID != a.ID || b.State != api.ApprovalApproved || b.Answer != api.AnswerOnce || b.By != "uid 1000" {
		t.Fatalf("second line: got %+v, want the answer", b)
	}
	wait(t, done)
}

// settled waits (bounded) for the records match selects to stop growing.
func settled(l *audittest.Log, match func(audit.Record) bool) []audit.Record {
	n := -1
	poll.Within(audittest.WaitLimit, func() bool {
		m := len(l.Match(match))
		if m > 0 && m == n {
			return true
		}
		n = m
		time.Sleep(20 * time.Millisecond)
		return false
	})
	return l.Match(match)
}

// TestApprovalDNSJoinsAndCovers: a resolver's repeated DNS questions for
// one name are one approval; its answer once lets the connection that
// follows to the name pass without a second question.
func TestApprovalDNSJoinsAndCovers(t *testing.T) {
	log := &audittest.Log{}
	b := newApprovals(time.Minute, 8, log, slog.New(slog.DiscardHandler))
	q := gateway.Question{Sandbox: "sb-1", Kind: policy.KindDNS, Host: "new.example", Port: 53, Msg: "new name"}
	got := make(chan gateway.Answer, 2)
	for range 2 {
		go func() { got <- b.Approve(context.Background(), q) }()
	}
	root := caller{uid: 0}
	var list []api.Approval
	poll.Within(audittest.WaitLimit, func() bool { list = b.list(root); return len(list) == 1 })
	time.Sleep(50 * time.Millisecond) // the second question would have been asked by now
	if list = b.list(root); len(list) != 1 {
		t.Fatalf("pending: got %d, want 1 (the second question joins the first)", len(list))
	}
	if _, e := b.answer(root, list[0].ID, api.AnswerOnce); e != nil {
		t.Fatal(e)
	}
	for range 2 {
		if a := <-got; !a.Allow || a.Reason != gateway.ReasonApprovedOnce {
			t.Fatalf("DNS answer: got %+v, want approved_once", a)
		}
	}
	a := b.Approve(context.Background(), gateway.Question{Sandbox: "sb-1", Kind: policy.KindConnect, Host: "new.example", Port: 443})
	if !a.Allow || len(b.list(root)) != 0 {
		t.Fatalf("the connection after the name's approval: got %+v with %d pending, want allowed without asking", a, len(b.list(root)))
	}
	if n := len(log.Match(func(r audit.Record) bool { return audittest.HasReason(r, gateway.ReasonApprovalAsked) })); n != 1 {
		t.Fatalf("questions audited: got %d, want 1", n)
	}
	// Another sandbox is not covered.
	other := make(chan gateway.Answer, 1)
	go func() {
		other <- b.Approve(context.Background(), gateway.Question{Sandbox: "sb-2", Kind: policy.KindConnect, Host: "new.example", Port: 443})
	}()
	poll.Within(audittest.WaitLimit, func() bool { return len(b.list(root)) == 1 })
	if _, e := b.answer(root, b.list(root)[0].ID, api.AnswerDeny); e != nil {
		t.Fatal(e)
	}
	if a := <-other; a.Allow {
		t.Fatal("another sandbox passed on the first one's approval")
	}
}

// TestApprovalSandboxEnded: a sandbox's end refuses what it has waiting
// and drops what was approved for its life.
func TestApprovalSandboxEnded(t *testing.T) {
	b := newApprovals(time.Minute, 8, &audittest.Log{}, slog.New(slog.DiscardHandler))
	q := gateway.Question{Sandbox: "sb-3", Kind: policy.KindConnect, Host: "new.example", Port: 443}
	got := make(chan gateway.Answer, 1)
	go func() { got <- b.Approve(context.Background(), q) }()
	root := caller{uid: 0}
	poll.Within(audittest.WaitLimit, func() bool { return len(b.list(root)) == 1 })
	b.forget("sb-3")
	if a := <-got; a.Allow || a.Reason != gateway.ReasonApprovalDenied {
		t.Fatalf("held at the end: got %+v, want approval_denied", a)
	}
	if n := len(b.list(root)); n != 0 {
		t.Fatalf("pending after the end: %d", n)
	}
}
