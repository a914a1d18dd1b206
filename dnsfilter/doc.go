// Package dnsfilter is the sandbox's only resolver: a policy-checked DNS server
// that never forwards a name policy does not allow. Denied names get NXDOMAIN,
// odd query types are refused unless policy opts them in, exfiltration signals
// become flags (and block by default past the rate and unique-name caps), and
// every query is one audit record or a count in its sandbox's summary.
//
// Its Resolver (the same cache, upstreams and rebinding guard) is what the
// gateway dials with; LookupForSandbox charges the gateway's lookups to the
// sandbox's own DNS limits.
//
// A served sandbox's rules change at run time with UpdateSandbox (update.go);
// a question the policy asks a person about waits for Config.Approve
// (approval.go).
//
// Entry points: New, (*Filter).ServeSandbox, UpdateSandbox, StopSandbox,
// Shutdown, Resolver, NameFor (the name a sandbox was answered for an
// address, for raw TCP).
// The query path, query types, flags, resolver and audit
// budget: dnsfilter/DESIGN.md.
//
// dnsfilter must never import: config, gateway, netns, sandboxd, secrets,
// daemon, cmd/airlock.
package dnsfilter
