package policy

import (
	"context"
	"testing"
)

// TestAskDecision: an ask rule, or on_unmatched "ask", marks a request no
// rule allows or denies as a question (Ask, AskMsg) while it stays a deny
// with the same reasons; an allow or a deny rule never asks.
func TestAskDecision(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"p.rego": `package airlock.egress

allow if input.destination.host == "pypi.org"

deny contains {"id": "blocked", "msg": "never"} if input.destination.host == "evil.example"

ask contains {"id": "vendor", "msg": "a vendor API the team has not used"} if endswith(input.destination.host, ".vendor.example")

ask contains {"id": "vendor", "msg": "a vendor API the team has not used"} if input.destination.host == "evil.example"

on_unmatched := "ask" if input.sandbox.labels.review == "human"
`})
	e := newEngine(t, Config{Dir: dir})
	tests := []struct {
		name    string
		host    string
		labels  map[string]string
		allowed bool
		ask     bool
		msg     string
	}{
		{"allowed host", "pypi.org", nil, true, false, ""},
		{"ask rule", "api.vendor.example", nil, false, true, "a vendor API the team has not used"},
		{"deny wins over ask", "evil.example", nil, false, false, ""},
		{"unmatched, no ask", "other.example", nil, false, false, ""},
		{"unmatched, on_unmatched ask", "other.example", map[string]string{"review": "human"}, false, true, "no rule allows connect to other.example"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := &Input{Kind: KindConnect, Sandbox: Sandbox{ID: "s", Labels: tc.labels}, Destination: Destination{Host: tc.host, Port: 443}}
			d := e.Decide(context.Background(), in)
			if d.Err != nil || d.Allowed != tc.allowed || d.Ask != tc.ask || d.AskMsg != tc.msg {
				t.Fatalf("got allowed=%v ask=%v msg=%q err=%v, want %v %v %q", d.Allowed, d.Ask, d.AskMsg, d.Err, tc.allowed, tc.ask, tc.msg)
			}
			if !d.Allowed && len(d.Reasons) == 0 {
				t.Fatalf("a deny without reasons: %+v", d)
			}
		})
	}
}
