package policytest

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/airlock-dev/airlock/policy"
)

// Rev is the policy revision a Decider's decisions name until SetRev.
const Rev = "test"

// Reason ids of a Decider's denials.
const (
	ReasonNotAllowed = "not_allowed" // the host is not on the allow-list
	ReasonPathDenied = "path_denied" // DenyPaths
	ReasonDenied     = "test_deny"   // DenyIf
)

// Allowed is an enforced allow of revision Rev.
func Allowed() policy.Decision {
	return policy.Decision{Allowed: true, Mode: policy.ModeEnforce, Rev: Rev}
}

// Denied is an enforced deny of revision Rev with the reason id.
func Denied(id string) policy.Decision {
	return policy.Decision{Mode: policy.ModeEnforce, Rev: Rev, Reasons: []policy.Reason{{ID: id, Msg: "denied by test"}}}
}

// Decider is a fake policy.Decider. In order, it denies what DenyIf and
// DenyPaths name; allows a destination whose host is allowed (Allow) or lies
// under an allowed domain (AllowUnder), intercepting it when Intercept names
// it; denies everything else with ReasonNotAllowed; and lets Amend change the
// decision. Decisions are enforced and name revision Rev unless SetMode or
// SetRev say otherwise. It is safe for concurrent use and its setters may be
// called while it serves.
type Decider struct {
	mu        sync.Mutex
	hosts     map[string]bool
	domains   map[string]bool
	mitm      map[string]bool
	denyPaths []string
	denyIf    func(in *policy.Input) bool
	amend     func(in *policy.Input, d *policy.Decision)
	fn        func(in *policy.Input) policy.Decision
	mode      policy.Mode
	rev       string
	inputs    []policy.Input
}

var _ policy.Decider = (*Decider)(nil)

// Allow returns a Decider that allows exactly these hosts, for every kind.
func Allow(hosts ...string) *Decider {
	return (&Decider{}).Allow(hosts...)
}

// AllowUnder returns a Decider that allows these domains and every name
// under them (Destination.Suffixes), as a DNS allow-list does.
func AllowUnder(domains ...string) *Decider {
	return (&Decider{}).AllowUnder(domains...)
}

// Func returns a Decider that decides with fn (recording inputs as any
// Decider does); fn must be safe for concurrent use.
func Func(fn func(in *policy.Input) policy.Decision) *Decider {
	return &Decider{fn: fn}
}

// Failing returns a Decider whose every decision is a policy error (reason
// policy.ReasonPolicyError, Err set) in report mode, which must still deny.
func Failing(msg string) *Decider {
	return Func(func(*policy.Input) policy.Decision {
		return policy.Decision{Mode: policy.ModeReport, Rev: Rev,
			Reasons: []policy.Reason{{ID: policy.ReasonPolicyError, Msg: msg}}, Err: errors.New(msg)}
	})
}

// Allow adds hosts that are allowed exactly, and returns d.
func (d *Decider) Allow(hosts ...string) *Decider {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hosts = addAll(d.hosts, hosts)
	return d
}

// AllowUnder adds domains allowed with every name under them, and returns d.
func (d *Decider) AllowUnder(domains ...string) *Decider {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.domains = addAll(d.domains, domains)
	return d
}

// Intercept makes the allows of these hosts ask for interception (MITM), and
// returns d.
func (d *Decider) Intercept(hosts ...string) *Decider {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mitm = addAll(d.mitm, hosts)
	return d
}

// DenyPaths denies HTTP requests to these paths with ReasonPathDenied, and
// returns d.
func (d *Decider) DenyPaths(paths ...string) *Decider {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.denyPaths = append(d.denyPaths, paths...)
	return d
}

// DenyIf denies, with ReasonDenied and before anything else, the inputs fn
// accepts. fn runs with the Decider locked and must not call it.
func (d *Decider) DenyIf(fn func(in *policy.Input) bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.denyIf = fn
}

// Amend lets fn change every allow-list decision (add reasons, say). fn runs
// with the Decider locked and must not call it.
func (d *Decider) Amend(fn func(in *policy.Input, dec *policy.Decision)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.amend = fn
}

// SetMode sets the mode of later decisions.
func (d *Decider) SetMode(m policy.Mode) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mode = m
}

// SetRev sets the revision later decisions name, as a policy reload does.
func (d *Decider) SetRev(rev string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.rev = rev
}

// Rev is the revision decisions name now (a DNS filter keys its decision
// cache on it, as it does on policy.Engine's).
func (d *Decider) Rev() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.rev == "" {
		return Rev
	}
	return d.rev
}

// Inputs returns a copy of every input decided so far, in order.
func (d *Decider) Inputs() []policy.Input {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]policy.Input(nil), d.inputs...)
}

// Decide records in and decides it.
func (d *Decider) Decide(_ context.Context, in *policy.Input) policy.Decision {
	rev := d.Rev()
	d.mu.Lock()
	d.inputs = append(d.inputs, clone(in))
	fn := d.fn
	if fn != nil {
		d.mu.Unlock()
		return fn(in)
	}
	defer d.mu.Unlock()
	dec := policy.Decision{Mode: policy.ModeEnforce, Rev: rev}
	if d.mode != "" {
		dec.Mode = d.mode
	}
	switch {
	case d.denyIf != nil && d.denyIf(in):
		dec.Reasons = []policy.Reason{{ID: ReasonDenied, Msg: "denied by test"}}
		return dec
	case in.HTTP != nil && slices.Contains(d.denyPaths, in.HTTP.Path):
		dec.Reasons = []policy.Reason{{ID: ReasonPathDenied, Msg: in.HTTP.Path + " is denied"}}
		return dec
	}
	host := in.Destination.Host
	if d.hosts[host] || slices.ContainsFunc(in.Destination.Suffixes, func(s string) bool { return d.domains[s] }) {
		dec.Allowed, dec.MITM = true, d.mitm[host]
	} else {
		dec.Reasons = []policy.Reason{{ID: ReasonNotAllowed, Msg: host + " is not allowed"}}
	}
	if d.amend != nil {
		d.amend(in, &dec)
	}
	return dec
}

// clone copies in deeply enough that a caller reusing its input (a flags
// slice, a DNS question) does not change what was recorded.
func clone(in *policy.Input) policy.Input {
	c := *in
	if in.DNS != nil {
		dns := *in.DNS
		dns.Flags = slices.Clone(in.DNS.Flags)
		c.DNS = &dns
	}
	if in.HTTP != nil {
		h := *in.HTTP
		c.HTTP = &h
	}
	return c
}

func addAll(m map[string]bool, keys []string) map[string]bool {
	if m == nil {
		m = map[string]bool{}
	}
	for _, k := range keys {
		m[k] = true
	}
	return m
}
