package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/test/poll"
)

// TestRootApprovalRoundTrip: under a real `airlock serve`, a sandbox's
// request that the policy asks about is held; approved over the API it is
// served by the fake internet; a second nobody answers is denied at the
// time-out (approval_timeout) and the host sees nothing of it; both
// questions and both answers are audited with who answered.
func TestRootApprovalRoundTrip(t *testing.T) {
	e := newEnv(t, "")
	pdir := filepath.Join(e.dir, "policy")
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		t.Fatal(err)
	}
	rule := "package airlock.egress\n\nask contains {\"id\": \"e2e_ask\", \"msg\": \"a host this test asks about\"} if input.destination.host == \"other.example.test\"\n"
	if err := os.WriteFile(filepath.Join(pdir, "ask.rego"), []byte(rule), 0o644); err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf(`policy: {mode: enforce, dir: %q}
dns: {upstreams: [%q]}
upstream: {allow_cidrs: [%q], ca_file: %q}
audit: {file: %q}
ca: {cert: %q, key: %q}
limits: {memory: 256M, cpus: 1, pids: 128, timeout: 3m, tmp_size: 64M}
api: {group: ""}
metrics: {listen: "127.0.0.1:0"}
sandbox: {pool_size: 0}
approval: {timeout: 3s}
`, pdir, w.net.DNSAddr.String(), w.net.Subnet.String(), w.caFile, e.audit,
		filepath.Join(e.dir, "no-ca", "ca.pem"), filepath.Join(e.dir, "no-ca", "ca.key"))
	if err := os.WriteFile(e.config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startServe(t, e, filepath.Join(e.dir, "run"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := d.C.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.C.DeleteSandbox(context.Background(), sb.ID)
	fetch := func(path string) <-chan string {
		out := make(chan string, 1)
		go func() {
			var stdout bytes.Buffer
			_, err := d.C.Exec(ctx, sb.ID, api.ExecRequest{Argv: []string{"curl", "-s", "-o", "/dev/null", "-D", "-",
				"http://other.example.test" + path}}, client.ExecIO{Stdout: &stdout})
			if err != nil {
				out <- "exec: " + err.Error()
				return
			}
			out <- stdout.String()
		}()
		return out
	}

	before := snap(w.other)
	held := fetch("/approved")
	var pending []api.Approval
	if !poll.Within(time.Minute, func() bool {
		pending, _ = d.C.Approvals(ctx)
		return len(pending) == 1
	}) {
		t.Fatalf("no pending approval\n%s", d.Output())
	}
	a := pending[0]
	if a.Sandbox != sb.ID || a.Host != "other.example.test" || a.Path != "/approved" || a.Msg != "a host this test asks about" {
		t.Fatalf("approval: got %+v", a)
	}
	if got := snap(w.other).sub(before); got.requests != 0 {
		t.Fatalf("the host saw %d requests before the answer, want 0", got.requests)
	}
	if _, err := d.C.AnswerApproval(ctx, a.ID, api.AnswerOnce); err != nil {
		t.Fatal(err)
	}
	if got := <-held; !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Fatalf("approved request: got %q, want 200", got)
	}
	if got := snap(w.other).sub(before); got.requests != 1 {
		t.Fatalf("the host saw %d requests, want 1", got.requests)
	}

	before = snap(w.other)
	if got := <-fetch("/unanswered"); !strings.HasPrefix(got, "HTTP/1.1 403") || !strings.Contains(got, "approval_timeout") {
		t.Fatalf("unanswered request: got %q, want 403 approval_timeout", got)
	}
	if got := snap(w.other).sub(before); got.requests != 0 || got.conns != 0 {
		t.Fatalf("the host saw %+v after a time-out, want nothing", got)
	}

	var recs []audit.Record
	poll.Within(audittest.WaitLimit, func() bool {
		recs = e.records()
		return len(find(recs, match{kind: audit.KindApproval})) >= 4
	})
	for _, tc := range []struct{ reason, by, path string }{
		{"approved_once", `"root"`, "/approved"},
		{"approval_timeout", `"timeout"`, "/unanswered"},
	} {
		var answer, request []audit.Record
		for _, r := range recs {
			if r.Kind == audit.KindApproval && audittest.HasReason(r, tc.reason) && r.Path == tc.path {
				answer = append(answer, r)
			}
			if r.Kind == audit.KindHTTP && r.Path == tc.path && len(r.Reasons) > 0 && r.Reasons[0].ID == tc.reason {
				request = append(request, r)
			}
		}
		if len(answer) != 1 || string(answer[0].Extra["by"]) != tc.by || len(request) != 1 {
			t.Errorf("%s: answer records %+v, request records %d; want one answer by %s and the request's record with it first\n%s",
				tc.path, answer, len(request), tc.by, dump(recs))
		}
	}
	if n := len(find(recs, match{kind: audit.KindApproval})); n != 4 {
		t.Errorf("approval records: got %d, want 4 (two questions, two answers)", n)
	}
}
