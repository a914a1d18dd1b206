package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/gateway"
	"github.com/airlock-dev/airlock/ipguard"
	"github.com/airlock-dev/airlock/policy"
)

// TestWebhookThroughTheGuard: the approval webhook POSTs the question as
// JSON to an address the guard lets through; to one it refuses (loopback
// without upstream.allow_cidrs) it sends nothing, and the receiver sees
// nothing.
func TestWebhookThroughTheGuard(t *testing.T) {
	var got atomic.Pointer[api.Approval]
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		var a api.Approval
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&a) != nil {
			w.WriteHeader(400)
			return
		}
		got.Store(&a)
	}))
	defer srv.Close()
	q := api.Approval{ID: "ap-1", Sandbox: "sb-1", Kind: "connect", Host: "new.example", Port: 443, Msg: "new host", State: api.ApprovalPending}

	refused := newWebhookPoster(srv.URL, 2*time.Second, ipguard.New(nil, nil))
	if err := refused.post(q); err == nil {
		t.Fatal("loopback without allow_cidrs: posted, want refused by the guard")
	}
	if hits.Load() != 0 {
		t.Fatalf("the receiver saw %d requests through a refusing guard, want 0", hits.Load())
	}
	allowed := newWebhookPoster(srv.URL, 2*time.Second, ipguard.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, nil))
	if err := allowed.post(q); err != nil {
		t.Fatal(err)
	}
	if a := got.Load(); a == nil || a.ID != "ap-1" || a.Host != "new.example" || a.State != api.ApprovalPending {
		t.Fatalf("received: got %+v, want the question", a)
	}
}

// TestCallerInNetns: the check that refuses a caller inside a sandbox
// compares the caller's network namespace with the sandbox's by device
// and inode: a process in the namespace is in it; a missing path or an
// unknown pid is not.
func TestCallerInNetns(t *testing.T) {
	self := caller{uid: 1000, pid: os.Getpid()}
	ns := "/proc/" + strconv.Itoa(os.Getpid()) + "/ns/net"
	for _, tc := range []struct {
		name string
		c    caller
		path string
		want bool
	}{
		{"the caller's own namespace", self, ns, true},
		{"a missing namespace", self, filepath.Join(t.TempDir(), "none"), false},
		{"no pid", caller{uid: 1000}, ns, false},
		{"a regular file", self, "/proc/self/status", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := callerInNetns(tc.c, tc.path); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestWebhookGetsEachQuestion: with approval.webhook.url set the broker
// POSTs each question once, and the answer that comes back through the
// API lets the request pass.
func TestWebhookGetsEachQuestion(t *testing.T) {
	got := make(chan api.Approval, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a api.Approval
		if json.NewDecoder(r.Body).Decode(&a) == nil {
			got <- a
		}
	}))
	defer srv.Close()
	w := newFakeWorld(t)
	cfg := w.d.cfg
	cfg.Approval.Webhook.URL = srv.URL
	w.d.buildApprovals(cfg, ipguard.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, nil))
	sb := w.client(1000).create(t, `{}`)
	answer := make(chan gateway.Answer, 1)
	go func() {
		answer <- w.d.approvals.Approve(context.Background(), gateway.Question{Sandbox: sb.ID, Kind: policy.KindConnect, Host: "new.example", Port: 443, Msg: "new"})
	}()
	var a api.Approval
	select {
	case a = <-got:
	case <-time.After(audittest.WaitLimit):
		t.Fatal("the webhook got no question")
	}
	if a.Sandbox != sb.ID || a.Host != "new.example" || a.State != api.ApprovalPending {
		t.Fatalf("webhook body: got %+v", a)
	}
	if r := w.client(1000).json(t, "POST", "/v1/approvals/"+a.ID, `{"answer":"once"}`); r.status != 200 {
		t.Fatalf("answer: %d %s", r.status, r.body)
	}
	if ans := <-answer; !ans.Allow {
		t.Fatalf("answer: got %+v, want allowed", ans)
	}
	select {
	case extra := <-got:
		t.Fatalf("the webhook got a second POST: %+v", extra)
	case <-time.After(100 * time.Millisecond):
	}
}
