// Package dnsfilter is the sandbox's only resolver: a policy-checked DNS server that
// never forwards a name policy does not allow.
//
// The gateway hands it one UDP and one TCP listener per sandbox (ServeSandbox); the
// listener is the sandbox's identity, nothing in a packet can change it. UDP is
// served by a few long-lived workers per sandbox (2*GOMAXPROCS, 4 to 16, plus
// spares up to 256 while all are busy, so a slow upstream holds up no cached
// answer); TCP by miekg/dns. Every query
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
//	one audit record (or, past the sandbox's audit budget, a count in its
//	summary), then the reply
//
// Query types: A and CNAME are answered; AAAA is NODATA unless Config.IPv6;
// HTTPS and SVCB are NODATA; PTR is answered locally for the sandbox's own
// addresses ("<sandbox-id>.<Config.PTRDomain>.") and NXDOMAIN for every other
// address, never forwarded; ANY, AXFR, IXFR and the meta types are always
// REFUSED. Every other type (TXT, MX, SRV, NULL, CAA, ...) is REFUSED unless
// policy opts the name in for that type: the decision for that question (policy
// sees input.dns.qtype) must be an allow that carries a reason with id
// ReasonQTypeOptIn ("dns_qtype_optin"). An allow alone is not enough, because the
// presets allow registry names for kind dns whatever the type. A policy opts in
// with `allow_reasons contains {"id": "dns_qtype_optin", "msg": ...} if ...` in
// airlock.egress, which the library carries into an allow's reasons. Every query asks policy except
// those refused before it (malformed, not a host name, an IP literal asked as a
// name) and those a Config.BlockFlags flag denies; all of them are audited.
//
// Denied names always get NXDOMAIN, never REFUSED (musl stops its search list on
// REFUSED), and are never sent upstream: forwarding is the leak. Report mode
// (policy.Decision.Permit) lets a policy deny pass and audits it as a deny; a
// policy error never passes.
//
// Exfiltration flags are computed for every query before policy: rate_limited
// (per-sandbox token bucket), many_unique_names (a name first asked after its
// registered domain, eTLD+1, already had Config.UniqueNames distinct names in the
// window), long_label and high_entropy. They go to policy as input.dns.flags and
// to the audit record's flags; Config.BlockFlags (default: rate_limited and
// many_unique_names) blocks without asking policy, and policy can deny on any of
// them. many_unique_names is the hard bound on what a sandbox can carry out in
// the names it asks under an allowed wildcard (each new name reaches the
// upstream); long_label and high_entropy are heuristics that short or
// hyphenated labels evade, so they only flag by default.
//
// CNAME chains are answered as the upstream resolved them: a chain from an
// allowed name may pass through names policy denies, because the sandbox asked
// only for the allowed name and the upstream, not the sandbox, followed the
// chain. Only the question's own chain is kept (records for other owners, in any
// section, are ignored and never cached under their names), its addresses go
// through the rebinding guard, and the gateway connects by the name the sandbox
// asked for, never by a chain member. Decisions for flagless questions are cached per sandbox and policy
// revision when the Decider has a Rev() method (Revisioner).
//
// Audit budget: each sandbox has a token bucket of individual audit records
// (Config.AuditBurst, refilled at Config.AuditRate per second). A query that
// finds a token gets its own record, as above; a query past the budget is
// counted into the sandbox's open summary window instead, so a sandbox spraying
// queries (or malformed packets) cannot grow the audit log, and fill the
// auditor's disk, at packet rate. The first such query opens a window; after
// Config.AuditSummaryInterval one summary record is written (kind dns, reason
// dns_audit_summary, decision the summarized queries' own when they all agree,
// else deny) whose extra fields give the count (queries), by_decision,
// by_rcode ("dropped" for packets not answered), by_qtype, by_flag, forwarded
// (answers that came from an upstream exchange), distinct_names, the
// Config.AuditTopNames most-asked names (top_names) and the window
// (window_start, window_end, window_ms). StopSandbox and Shutdown write the
// final summary (extra final: true). Every query is in exactly one record or
// one summary's count. A summary the audit logger refuses is carried into the
// next window, and while the logger refuses records an over-budget query that
// would be answered gets SERVFAIL, as an in-budget query does.
//
// Metrics: Filter.Registry is the filter's own Prometheus registry (nothing is
// registered globally), with airlock_dns_queries_total{decision,qtype},
// cache_lookups_total{source,result}, decision_cache_lookups_total{result},
// upstream_exchanges_total{upstream,result}, upstream_tcp_retries_total{upstream},
// upstream_exchange_seconds{upstream}, flags_total{flag}, audit_summaries_total,
// audit_summarized_queries_total, audit_summaries_pending,
// audit_failures_total and gateway_lookups_total{result}. Every label takes values from a fixed set (upstream:
// the configured upstreams); no label ever carries a query name, a sandbox id
// or an answer.
//
// Resolver is the same cache, upstreams and rebinding filter for the gateway's own
// dialer, so what a sandbox is told and what the gateway dials come from one place.
// Its LookupForSandbox (gateway.SandboxResolver) charges a lookup the gateway
// makes for a sandbox to that sandbox's rate bucket and unique-name set, and a
// blocking flag refuses it (RefusedError, reason dns_rate_limited,
// dns_unique_names, ...) before anything is sent upstream, so the gateway is no
// way around the limits; a sandbox the Filter does not serve is refused
// (unknown_sandbox). Filter.UpstreamAddrs are the addresses the gateway must
// refuse to dial.
//
// dnsfilter imports policy (types only), audit (types only), hostname and ipguard.
// It must never import gateway, netns, sandboxd or cmd.
package dnsfilter
