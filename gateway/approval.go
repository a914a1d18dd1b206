package gateway

import (
	"context"

	"github.com/airlock-dev/airlock/policy"
)

// A person in the loop. A decision the policy marks Ask (policy.Decision.Ask:
// an ask rule, or on_unmatched "ask") is a deny that a person may turn into
// an allow. With an Approver configured, ask (the one place every decision
// of the pipeline is taken) holds the request, connection and all, while
// the Approver gets an answer; the answer becomes the decision's first
// reason, so the request's own audit record says who let it pass or why it
// was refused (approval_timeout, approval_denied, ...). Without one the
// request is the deny it was. A CONNECT that was approved is not asked again
// for what it carries, and a re-decision (Redecide) keeps an approved
// connection open while the policy still only asks about it; a policy that
// now denies it closes it.

// Reasons of a held request's record (first) and of the approval records.
const (
	ReasonApprovalAsked       = "approval_asked"       // the question (approval record)
	ReasonApprovedOnce        = "approved_once"        // a person let this request pass
	ReasonApprovedSandbox     = "approved_sandbox"     // ... and the sandbox's later ones to the host and port
	ReasonApprovedPolicy      = "approved_policy"      // ... and added the host and port to its allow list
	ReasonApprovalDenied      = "approval_denied"      // a person refused it
	ReasonApprovalTimeout     = "approval_timeout"     // nobody answered in time
	ReasonApprovalLimit       = "approval_limit"       // the sandbox has too many requests held already
	ReasonApprovalUnavailable = "approval_unavailable" // the question could not be asked (audit refused it)
)

// Approver answers the questions a policy asks. The daemon's approvals
// broker implements it (the API, `airlock approve`, a webhook); it bounds
// how long and how many requests of a sandbox are held.
type Approver interface {
	// Approve holds until the question is answered, ctx ends, or the
	// Approver's own bound passes, and returns the answer. It never
	// returns an allow it was not given.
	Approve(ctx context.Context, q Question) Answer
}

// Question is what a held request asks.
type Question struct {
	ID      string // the request's decision id (its audit record's)
	Sandbox string
	Kind    policy.Kind
	Host    string
	Port    int
	Method  string // kind http only
	Path    string // kind http only
	Msg     string // the policy's question (policy.Decision.AskMsg)
	Reasons []policy.Reason
}

// Answer is an Approver's answer: Allow, and the reason the request's
// record carries first.
type Answer struct {
	Allow  bool
	Reason string
	Msg    string
}

// approve turns an ask decision into the Approver's answer (d itself when
// there is nothing to ask or nobody to ask).
func (g *Gateway) approve(rc *reqCtx, d policy.Decision) policy.Decision {
	if !d.Ask || d.Permit() || d.Err != nil || g.cfg.Approver == nil {
		return d
	}
	a := rc.approval
	if a == nil { // a CONNECT's carried decision reuses the CONNECT's answer
		q := Question{ID: rc.id, Sandbox: rc.cc.sb.info.ID, Kind: rc.in.Kind, Host: rc.in.Destination.Host,
			Port: rc.in.Destination.Port, Msg: d.AskMsg, Reasons: d.Reasons}
		if h := rc.in.HTTP; h != nil {
			q.Method, q.Path = h.Method, h.Path
		}
		ans := g.cfg.Approver.Approve(context.Background(), q)
		a = &ans
		rc.approval = a
	}
	if a.Allow {
		d.Allowed, d.Ask, d.HTTPStatus = true, false, 0
		d.Reasons = []policy.Reason{{ID: a.Reason, Msg: a.Msg}}
		return d
	}
	d.Reasons = append([]policy.Reason{{ID: a.Reason, Msg: a.Msg}}, d.Reasons...)
	return d
}

// approvedStill reports whether a connection admitted by a person's
// approval may stay open under decision d: the policy still only asks.
func approvedStill(rc *reqCtx, d policy.Decision) bool {
	return rc.approval != nil && rc.approval.Allow && d.Ask && d.Err == nil
}
