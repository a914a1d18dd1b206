package dnsfilter

import (
	"context"
	"fmt"
	"net/netip"
	"time"
)

// Reason ids of a LookupForSandbox refusal (RefusedError.Reason), besides
// ReasonAuditUnavailable (the audit log is broken and the name is not cached).
// The gateway denies the request with the id.
const (
	ReasonRateLimited    = "dns_rate_limited" // the sandbox's query rate bucket is empty
	ReasonUniqueNames    = "dns_unique_names" // a new name past the sandbox's unique-name cap
	ReasonLongLabel      = "dns_long_label"   // long_label, when Config.BlockFlags blocks it
	ReasonHighEntropy    = "dns_high_entropy" // high_entropy, when Config.BlockFlags blocks it
	ReasonUnknownSandbox = "unknown_sandbox"  // the Filter does not serve the sandbox
)

// flagReason is the refusal reason of a flag Config.BlockFlags can name.
func flagReason(flag string) string {
	switch flag {
	case FlagRateLimited:
		return ReasonRateLimited
	case FlagManyUniqueNames:
		return ReasonUniqueNames
	case FlagLongLabel:
		return ReasonLongLabel
	case FlagHighEntropy:
		return ReasonHighEntropy
	}
	return ReasonFlagBlocked
}

// RefusedError is a LookupForSandbox the sandbox's limits refused, or one for
// a sandbox the Filter does not serve: a denial, not a resolution failure.
// Nothing was sent upstream for it.
type RefusedError struct {
	Sandbox string
	Host    string
	ID      string // the reason id, one of the Reason* constants above
	Msg     string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("dnsfilter: lookup %s for sandbox %q refused: %s", e.Host, e.Sandbox, e.Msg)
}

// Reason returns the refusal's stable reason id (gateway.SandboxResolver).
func (e *RefusedError) Reason() string { return e.ID }

// LookupForSandbox is LookupNetIP(ctx, "ip", host) made on behalf of the
// sandbox the Filter serves as sandboxID, charged to that sandbox exactly as
// its own query for host would be: one token of its rate bucket per query type
// asked (A, and AAAA when Config.IPv6), the name counted in its unique-name set,
// and a flag Config.BlockFlags names refuses the lookup before the cache or an
// upstream is asked. An allowed lookup is answered from the shared cache when
// it can; a name that is not cached is not sent upstream while the audit log is
// broken. A refusal (and a sandbox the Filter does not serve: fail closed) is a
// *RefusedError. Policy is not consulted: the gateway has already asked it about
// the request. An IP literal is returned as it is if the guard lets it through,
// and charges nothing, since nothing is resolved.
//
// The lookup writes no audit record of its own (the gateway's record of the
// request names the host and, on refusal, the reason); it is counted in
// airlock_dns_gateway_lookups_total{result}, and its flags in flags_total.
func (r *Resolver) LookupForSandbox(ctx context.Context, sandboxID, host string) ([]netip.Addr, error) {
	addrs, result, err := r.lookupForSandbox(ctx, sandboxID, host)
	r.metrics.lookup(result)
	return addrs, err
}

func (r *Resolver) lookupForSandbox(ctx context.Context, sandboxID, host string) ([]netip.Addr, string, error) {
	f := r.owner
	refuse := func(id, msg string) ([]netip.Addr, string, error) {
		return nil, id, &RefusedError{Sandbox: sandboxID, Host: host, ID: id, Msg: msg}
	}
	s := f.sandbox(sandboxID)
	if s == nil {
		return refuse(ReasonUnknownSandbox, "the dns filter does not serve this sandbox")
	}
	types, err := r.questionTypes("ip", host)
	if err != nil {
		return nil, lookupFailed, err
	}
	name, ip, err := r.target(host)
	if err != nil {
		return nil, lookupFailed, err
	}
	if ip.IsValid() {
		return []netip.Addr{ip}, lookupAnswered, nil
	}
	flags := s.sig.charge(nil, name, time.Now(), len(types))
	for _, fl := range flags {
		r.metrics.flag(fl)
	}
	for _, fl := range flags {
		if r.cfg.block[fl] {
			return refuse(flagReason(fl), "flag "+fl+" blocks by configuration")
		}
	}
	addrs, err := r.addrs(ctx, host, name, types, func() error {
		// Forwarding is itself traffic: with a broken audit log nothing leaves.
		if err := f.auditErr(); err != nil {
			return &RefusedError{Sandbox: sandboxID, Host: host, ID: ReasonAuditUnavailable, Msg: "audit log is not accepting records: " + err.Error()}
		}
		return nil
	})
	switch err.(type) {
	case nil:
		return addrs, lookupAnswered, nil
	case *RefusedError:
		return nil, ReasonAuditUnavailable, err
	}
	return nil, lookupFailed, err
}
