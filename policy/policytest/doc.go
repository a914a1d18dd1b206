// Package policytest is test support for callers of policy: Decider, a fake
// policy.Decider that allows the hosts (Allow) or domains (AllowUnder) it is
// told, intercepts, denies paths or anything DenyIf names with a reason, and
// records every input it was asked about (Inputs); Func and Failing decide
// with a function or fail every decision. Only tests import it.
//
// Entry point: Allow(hosts...), handed to the code under test as its
// policy.Decider.
//
// policy/policytest must never import: audit, config, secrets, gateway,
// dnsfilter, netns, sandboxd, daemon, cmd/airlock.
package policytest
