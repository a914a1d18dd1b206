package gateway

import (
	"net/netip"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
)

// TestReportModeGatewayDenialIsEnforced: in report mode a request the policy
// lets through but the gateway itself refuses (here its guard: the name
// resolves to a private address) was refused; its record must not read as a
// report-mode would-deny (decision deny, mode report), which report and query
// count as let through.
func TestReportModeGatewayDenialIsEnforced(t *testing.T) {
	dec := policytest.Func(func(in *policy.Input) policy.Decision {
		return policy.Decision{Mode: policy.ModeReport, Rev: policytest.Rev, Allowed: true}
	})
	h := newHarness(t, dec, map[string][]netip.Addr{"internal.example": {netip.MustParseAddr("10.0.0.5")}}, nil)
	resp, body := rawRequest(t, h.explicit, "GET http://internal.example/ HTTP/1.1\r\nHost: internal.example\r\n\r\n")
	if resp.StatusCode != 403 && resp.StatusCode != 502 {
		t.Fatalf("status: got %d (%s), want a refusal", resp.StatusCode, body)
	}
	if got := h.dialer.refusedAddrs(); len(got) != 0 {
		t.Fatalf("dial attempts: got %v, want none (the guard refuses 10.0.0.5)", got)
	}
	id := resp.Header.Get("X-Airlock-Decision")
	r := h.log.Wait(t, "the refusal", func(r audit.Record) bool { return r.ID == id })
	if r.Decision != audit.DecisionDeny || audit.WouldDeny(&r) {
		t.Fatalf("record: got decision %s mode %q (would deny %v), want an enforced deny", r.Decision, r.Mode, audit.WouldDeny(&r))
	}
}
