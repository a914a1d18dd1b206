// Package dnsfilter is the sandbox's only resolver: a policy-checked DNS server that
// never forwards a name policy does not allow.
//
// The gateway hands it one UDP and one TCP listener per sandbox (ServeSandbox); the
// listener is the sandbox's identity, nothing in a packet can change it. Every query
// goes through one fixed path (sandboxServer.ServeDNS):
//
//	header checks (response bits ignored, opcode QUERY, one question, no answer or
//	authority records, at most one additional OPT)    -> FORMERR / NOTIMP
//	class IN, name through hostname.Normalize          -> FORMERR / REFUSED
//	exfiltration signals (rate, unique names per registered domain, long and
//	high-entropy labels) become flags
//	policy.Decide (kind dns, dns.qname/qtype/flags), or the per-revision decision
//	cache when there are no flags; Config.BlockFlags   -> NXDOMAIN when denied
//	query type rules (below)                           -> NODATA / REFUSED / local PTR
//	cache, else singleflight upstream exchange (UDP, TCP on truncation, or DNS over
//	TLS), ECS never sent, TTLs clamped, answers pointing into guarded ranges dropped
//	one audit record, then the reply
//
// Query types: A and CNAME are answered; AAAA is NODATA unless Config.IPv6;
// HTTPS and SVCB are NODATA; PTR is answered locally for the sandbox's own addresses
// and NXDOMAIN for every other address (never forwarded); ANY, AXFR, IXFR and the
// meta types are always REFUSED; every other type (TXT, MX, SRV, NULL, CAA, ...) is
// REFUSED unless policy opts the name in for that type by allowing it with a reason
// whose id is ReasonQTypeOptIn ("dns_qtype_optin"). In Rego (package airlock.egress),
// the decision library passes reasons of allowed decisions through, so for example:
//
//	allow if { input.kind == "dns"; input.dns.qtype == "TXT"; input.destination.host == "_acme.example.com" }
//
// is not enough on its own for TXT: the policy must also emit the opt-in reason
// for that question. Denied names always get NXDOMAIN, never REFUSED (musl stops its
// search list on REFUSED), and are never sent upstream: forwarding is the leak.
//
// Resolver is the same cache, upstreams and rebinding filter for the gateway's own
// dialer, so what a sandbox is told and what the gateway dials come from one place.
//
// dnsfilter imports policy (types only), audit (types only), hostname and ipguard.
// It must never import gateway, netns, sandboxd or cmd.
package dnsfilter
