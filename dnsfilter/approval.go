package dnsfilter

import (
	"context"

	"github.com/airlock-dev/airlock/policy"
)

// A question the policy asks a person about (policy.Decision.Ask, for kind
// dns: an ask rule or on_unmatched "ask"). With Config.Approve set the
// query waits for the answer (the daemon's approvals broker: bounded in
// time and per sandbox, a resolver's repeated questions for one name join
// one approval) and is answered when it comes: the address when approved,
// NXDOMAIN with the answer as its first reason when not. Without it the
// question is the NXDOMAIN it was.

// ApproveFunc holds a DNS question for a person's answer and returns it:
// allow, and the reason (and message) the query's record carries first.
type ApproveFunc func(ctx context.Context, sb policy.Sandbox, name, msg string, reasons []policy.Reason) (allow bool, reason, message string)

// approve turns an ask decision into the answer of Config.Approve (d itself
// when there is nothing to ask or nobody to ask). d may be cached: the
// answer is a new decided.
func (s *sandboxServer) approve(q *query, d *decided) *decided {
	ap := s.f.cfg.Approve
	if ap == nil || !d.d.Ask || d.d.Permit() || d.d.Err != nil {
		return d
	}
	allow, reason, msg := ap(context.Background(), s.rules().sb, q.name, d.d.AskMsg, d.d.Reasons)
	out := &decided{d: d.d}
	first := policy.Reason{ID: reason, Msg: msg}
	if allow {
		out.d.Allowed, out.d.Ask, out.d.HTTPStatus = true, false, 0
		out.d.Reasons = []policy.Reason{first}
	} else {
		out.d.Reasons = append([]policy.Reason{first}, d.d.Reasons...)
	}
	out.reasons = auditReasons(out.d.Reasons)
	return out
}
