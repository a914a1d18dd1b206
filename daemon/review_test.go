package daemon

import (
	"testing"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/policy"
)

// TestReportModeRefusedForUnprivilegedCaller: a caller other than root cannot
// ask for mode report on a daemon that enforces. Report lets every denied
// request out (policy.Decision.Permit), so it would be open egress for any
// member of api.group: refused 403 naming "mode", with nothing built or served
// and nothing run. Root may; on a daemon that already reports, anyone may (it
// weakens nothing); enforce is always allowed.
func TestReportModeRefusedForUnprivilegedCaller(t *testing.T) {
	w := newFakeWorld(t)
	a, root := w.client(alice), w.client(0)
	for _, req := range []struct{ path, body string }{
		{"/v1/sandboxes", `{"mode": "report"}`},
		{"/v1/run", `{"argv": ["true"], "mode": "report"}`},
	} {
		r := a.json(t, "POST", req.path, req.body)
		if e := r.apiError(t); r.status != 403 || e.Code != api.CodeForbidden || e.Field != "mode" {
			t.Errorf("alice POST %s %s: got %d %+v, want 403 forbidden naming mode", req.path, req.body, r.status, e)
		}
	}
	if n := w.exe.prepared.Load(); n != 0 {
		t.Fatalf("%d sandboxes prepared for refused report-mode requests, want 0", n)
	}
	w.net.mu.Lock()
	served := len(w.net.policies)
	w.net.mu.Unlock()
	if served != 0 {
		t.Fatalf("%d namespaces served for refused report-mode requests, want 0", served)
	}
	if sb := a.create(t, `{"mode": "enforce"}`); sb.Mode != string(policy.ModeEnforce) {
		t.Fatalf("alice's enforce sandbox shows mode %q", sb.Mode)
	}
	sb := root.create(t, `{"mode": "report"}`)
	if got, _ := w.net.policy(sb.ID); got.Mode != policy.ModeReport {
		t.Fatalf("root's report sandbox served with mode %q, want report", got.Mode)
	}

	rw := newFakeWorld(t, func(c *config.Config) { c.Policy.Mode = string(policy.ModeReport) })
	if sb := rw.client(alice).create(t, `{"mode": "report"}`); sb.Mode != string(policy.ModeReport) {
		t.Fatalf("on a reporting daemon alice's report sandbox shows mode %q", sb.Mode)
	}
}
