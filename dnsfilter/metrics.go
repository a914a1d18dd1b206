package dnsfilter

import (
	"context"
	"errors"
	"net"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-dev/airlock/audit"
)

// Metric label values. No label ever carries a query name, a sandbox id or an
// answer: names are unbounded (cardinality) and are the sandbox's data (privacy).
// Every label below takes values from a fixed set, except upstream, which takes
// its values from Config.Upstreams.
const (
	resultHit    = "hit"
	resultMiss   = "miss"
	resultBypass = "bypass" // a question with flags (or no decision cache): policy asked directly

	sourceSandbox = "sandbox" // a sandbox's query
	sourceGateway = "gateway" // Resolver.LookupNetIP or LookupForSandbox, for the gateway's dialer

	lookupAnswered = "answered" // a gateway lookup that returned addresses
	lookupFailed   = "failed"   // no addresses: bad name, NXDOMAIN, NODATA or no upstream answered

	upstreamOK       = "ok"        // NOERROR or NXDOMAIN answering the question
	upstreamRcode    = "rcode"     // any other rcode (SERVFAIL, REFUSED, ...)
	upstreamBadReply = "bad_reply" // not a reply to the question, or truncated over TCP
	upstreamTimeout  = "timeout"
	upstreamError    = "error" // any other transport failure
)

// metricDecisions are the values of the decision label, in index order.
var metricDecisions = [...]string{audit.DecisionAllow, audit.DecisionDeny, audit.DecisionError}

// metricQTypes are the query types with a qtype label value of their own;
// every other type is "other" and a query without a question is "none".
var metricQTypes = [...]uint16{
	dns.TypeA, dns.TypeAAAA, dns.TypeCNAME, dns.TypeHTTPS, dns.TypeSVCB, dns.TypePTR,
	dns.TypeTXT, dns.TypeMX, dns.TypeSRV, dns.TypeNS, dns.TypeSOA, dns.TypeCAA,
	dns.TypeNULL, dns.TypeANY, dns.TypeAXFR,
}

const (
	qtypeOther = len(metricQTypes)
	qtypeNone  = len(metricQTypes) + 1
	nQTypes    = len(metricQTypes) + 2
)

var metricFlags = [...]string{FlagRateLimited, FlagManyUniqueNames, FlagLongLabel, FlagHighEntropy, FlagRebindingDropped}

// metricLookupResults are the values of gateway_lookups_total's result label:
// answered, failed, or the reason id of a refusal.
var metricLookupResults = [...]string{
	lookupAnswered, lookupFailed, ReasonRateLimited, ReasonUniqueNames, ReasonLongLabel,
	ReasonHighEntropy, ReasonFlagBlocked, ReasonUnknownSandbox, ReasonAuditUnavailable,
}

// metrics are the filter's Prometheus metrics, on its own registry (never the
// global one). The hot path only touches pre-resolved counters.
type metrics struct {
	reg *prometheus.Registry

	queries        *prometheus.CounterVec
	queriesFast    [len(metricDecisions)][nQTypes]prometheus.Counter
	cache          *prometheus.CounterVec
	cacheFast      [2][2]prometheus.Counter // [sandbox, gateway][miss, hit]
	decisionCache  *prometheus.CounterVec
	dcacheHit      prometheus.Counter
	dcacheMiss     prometheus.Counter
	dcacheBypass   prometheus.Counter
	upstream       *prometheus.CounterVec
	upstreamTCP    *prometheus.CounterVec
	upstreamTime   *prometheus.HistogramVec
	flags          *prometheus.CounterVec
	flagsFast      map[string]prometheus.Counter
	summaries      prometheus.Counter
	summarized     prometheus.Counter
	auditFailures  prometheus.Counter
	overBudgetSbxs prometheus.Gauge
	lookups        *prometheus.CounterVec
	lookupsFast    map[string]prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	opts := func(name, help string) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: "airlock", Subsystem: "dns", Name: name, Help: help}
	}
	m.queries = prometheus.NewCounterVec(opts("queries_total",
		"Queries answered (or dropped as malformed), by decision and query type."), []string{"decision", "qtype"})
	m.cache = prometheus.NewCounterVec(opts("cache_lookups_total",
		"Answer cache lookups, by who asked (sandbox or gateway) and result (hit or miss)."), []string{"source", "result"})
	m.decisionCache = prometheus.NewCounterVec(opts("decision_cache_lookups_total",
		"Per-sandbox decision cache lookups: hit, miss, or bypass (the question had flags or the cache is off)."), []string{"result"})
	m.upstream = prometheus.NewCounterVec(opts("upstream_exchanges_total",
		"Exchanges with an upstream resolver, by upstream and result (ok, rcode, bad_reply, timeout, error)."), []string{"upstream", "result"})
	m.upstreamTCP = prometheus.NewCounterVec(opts("upstream_tcp_retries_total",
		"Truncated UDP replies retried over TCP, by upstream."), []string{"upstream"})
	m.upstreamTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "airlock", Subsystem: "dns", Name: "upstream_exchange_seconds",
		Help:    "Time of one exchange with one upstream (including a TCP retry), by upstream.",
		Buckets: []float64{250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5},
	}, []string{"upstream"})
	m.flags = prometheus.NewCounterVec(opts("flags_total",
		"Exfiltration and rebinding flags raised on queries (and on the gateway's lookups for a sandbox), by flag."), []string{"flag"})
	m.summaries = prometheus.NewCounter(opts("audit_summaries_total",
		"Summary audit records written for sandboxes over their audit budget."))
	m.summarized = prometheus.NewCounter(opts("audit_summarized_queries_total",
		"Queries counted in summary audit records instead of records of their own."))
	m.auditFailures = prometheus.NewCounter(opts("audit_failures_total",
		"Audit records (per-query or summary) the audit logger refused."))
	m.overBudgetSbxs = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "airlock", Subsystem: "dns", Name: "audit_summaries_pending",
		Help: "Sandboxes with a summary window open (over their audit budget).",
	})
	m.lookups = prometheus.NewCounterVec(opts("gateway_lookups_total",
		"Lookups the gateway made for a sandbox (LookupForSandbox), by result: answered, failed, or the reason id of a refusal by the sandbox's limits."), []string{"result"})
	m.reg.MustRegister(m.queries, m.cache, m.decisionCache, m.upstream, m.upstreamTCP, m.upstreamTime,
		m.flags, m.summaries, m.summarized, m.auditFailures, m.overBudgetSbxs, m.lookups)

	for d, dn := range metricDecisions {
		for i := range nQTypes {
			m.queriesFast[d][i] = m.queries.WithLabelValues(dn, qtypeLabel(i))
		}
	}
	for i, src := range []string{sourceSandbox, sourceGateway} {
		for j, r := range []string{resultMiss, resultHit} {
			m.cacheFast[i][j] = m.cache.WithLabelValues(src, r)
		}
	}
	m.dcacheHit = m.decisionCache.WithLabelValues(resultHit)
	m.dcacheMiss = m.decisionCache.WithLabelValues(resultMiss)
	m.dcacheBypass = m.decisionCache.WithLabelValues(resultBypass)
	m.flagsFast = make(map[string]prometheus.Counter, len(metricFlags))
	for _, fl := range metricFlags {
		m.flagsFast[fl] = m.flags.WithLabelValues(fl)
	}
	m.lookupsFast = make(map[string]prometheus.Counter, len(metricLookupResults))
	for _, r := range metricLookupResults {
		m.lookupsFast[r] = m.lookups.WithLabelValues(r)
	}
	return m
}

func qtypeLabel(i int) string {
	switch i {
	case qtypeOther:
		return "other"
	case qtypeNone:
		return "none"
	}
	return dns.TypeToString[metricQTypes[i]]
}

// qtypeIndex maps a query type to its qtype label index.
func qtypeIndex(t uint16) int {
	for i, v := range metricQTypes {
		if v == t {
			return i
		}
	}
	return qtypeOther
}

func decisionIndex(d string) int {
	switch d {
	case audit.DecisionAllow:
		return 0
	case audit.DecisionError:
		return 2
	}
	return 1
}

// query counts one query; qt is a qtypeIndex or qtypeNone.
func (m *metrics) query(decision string, qt int) {
	m.queriesFast[decisionIndex(decision)][qt].Inc()
}

func (m *metrics) cacheLookup(source string, hit bool) {
	i, j := 0, 0
	if source == sourceGateway {
		i = 1
	}
	if hit {
		j = 1
	}
	m.cacheFast[i][j].Inc()
}

func (m *metrics) flag(fl string) {
	if c, ok := m.flagsFast[fl]; ok {
		c.Inc()
		return
	}
	m.flags.WithLabelValues("other").Inc()
}

// lookup counts one gateway lookup by result (a metricLookupResults value).
func (m *metrics) lookup(result string) {
	if c, ok := m.lookupsFast[result]; ok {
		c.Inc()
		return
	}
	m.lookups.WithLabelValues(lookupFailed).Inc()
}

// upstreamMetrics are one upstream's pre-resolved series.
type upstreamMetrics struct {
	results map[string]prometheus.Counter
	tcp     prometheus.Counter
	latency prometheus.Observer
}

func (m *metrics) forUpstream(label string) *upstreamMetrics {
	um := &upstreamMetrics{
		results: make(map[string]prometheus.Counter),
		tcp:     m.upstreamTCP.WithLabelValues(label),
		latency: m.upstreamTime.WithLabelValues(label),
	}
	for _, r := range []string{upstreamOK, upstreamRcode, upstreamBadReply, upstreamTimeout, upstreamError} {
		um.results[r] = m.upstream.WithLabelValues(label, r)
	}
	return um
}

// upstreamResult classifies one exchange: transport error, then the reply check.
func upstreamResult(resp *dns.Msg, xerr, checkErr error) string {
	if xerr != nil {
		var ne net.Error
		if errors.Is(xerr, context.DeadlineExceeded) || errors.As(xerr, &ne) && ne.Timeout() {
			return upstreamTimeout
		}
		return upstreamError
	}
	if checkErr == nil {
		return upstreamOK
	}
	if resp.Response && !resp.Truncated && resp.Rcode != dns.RcodeSuccess && resp.Rcode != dns.RcodeNameError {
		return upstreamRcode
	}
	return upstreamBadReply
}

// Registry returns the filter's own Prometheus registry (nothing is registered
// globally), for the daemon to serve or merge with the gateway's. No metric
// carries a query name, a sandbox id or an answer as a label.
func (f *Filter) Registry() *prometheus.Registry { return f.metrics.reg }
