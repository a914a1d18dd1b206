package dnsfilter

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/airlock-dev/airlock/policy/policytest"
)

// metricValue returns the value of the series name{labels} (counter, gauge, or a
// histogram's sample count), 0 when it has no such series.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, fam := range fams {
		if fam.GetName() != name {
			continue
		}
	series:
		for _, m := range fam.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return 0
}

func TestMetricsMove(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
	reg := e.f.Registry()
	if prometheus.Registerer(reg) == prometheus.DefaultRegisterer {
		t.Fatal("Registry returned the global registry")
	}
	long := strings.Repeat("a", 50) + ".pypi.org."

	e.ask(t, "udp", "pypi.org.", dns.TypeA)         // allow: answer cache miss, upstream ok, decision cache miss
	e.ask(t, "udp", "pypi.org.", dns.TypeA)         // allow: answer cache hit, decision cache hit
	e.ask(t, "udp", "evil.example.com.", dns.TypeA) // deny: decision cache miss
	e.ask(t, "udp", "pypi.org.", dns.TypeTXT)       // deny (type refused): decision cache miss
	e.ask(t, "udp", long, dns.TypeA)                // allow, long_label: decision cache bypass, answer cache miss, upstream ok (NXDOMAIN)
	if got := e.rawUDP(t, header(1, 0x0100, 0, 0, 0, 0), 2*time.Second); got == nil {
		t.Fatal("no reply to a packet without a question")
	}
	if _, err := e.f.Resolver().LookupNetIP(context.Background(), "ip4", "pypi.org"); err != nil {
		t.Fatalf("LookupNetIP: %v", err)
	}

	tests := []struct {
		name   string
		metric string
		labels map[string]string
		want   float64
	}{
		{"allowed A", "airlock_dns_queries_total", map[string]string{"decision": "allow", "qtype": "A"}, 3},
		{"denied A", "airlock_dns_queries_total", map[string]string{"decision": "deny", "qtype": "A"}, 1},
		{"refused TXT", "airlock_dns_queries_total", map[string]string{"decision": "deny", "qtype": "TXT"}, 1},
		{"malformed", "airlock_dns_queries_total", map[string]string{"decision": "deny", "qtype": "none"}, 1},
		{"sandbox cache hit", "airlock_dns_cache_lookups_total", map[string]string{"source": "sandbox", "result": "hit"}, 1},
		{"sandbox cache miss", "airlock_dns_cache_lookups_total", map[string]string{"source": "sandbox", "result": "miss"}, 2},
		{"gateway cache hit", "airlock_dns_cache_lookups_total", map[string]string{"source": "gateway", "result": "hit"}, 1},
		{"decision cache hit", "airlock_dns_decision_cache_lookups_total", map[string]string{"result": "hit"}, 1},
		{"decision cache miss", "airlock_dns_decision_cache_lookups_total", map[string]string{"result": "miss"}, 3},
		{"decision cache bypass", "airlock_dns_decision_cache_lookups_total", map[string]string{"result": "bypass"}, 1},
		{"upstream ok", "airlock_dns_upstream_exchanges_total", map[string]string{"upstream": up.addr, "result": "ok"}, 2},
		{"upstream latency observed", "airlock_dns_upstream_exchange_seconds", map[string]string{"upstream": up.addr}, 2},
		{"long_label flag", "airlock_dns_flags_total", map[string]string{"flag": FlagLongLabel}, 1},
		{"no summaries", "airlock_dns_audit_summaries_total", map[string]string{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := metricValue(t, reg, tt.metric, tt.labels); got != tt.want {
				t.Errorf("%s%v: got %v, want %v", tt.metric, tt.labels, got, tt.want)
			}
		})
	}
	if n := up.count("pypi.org"); n != 1 {
		t.Errorf("upstream saw pypi.org %d times, want 1 (the metrics must match what happened)", n)
	}
}

func TestMetricsUpstreamFailureAndTCPRetry(t *testing.T) {
	// One upstream that truncates every UDP reply (TCP retry), one that refuses.
	trunc := startUpstream(t, func(network string, req *dns.Msg) *dns.Msg {
		resp := records(testZone)(network, req)
		if resp != nil && network == "udp" {
			resp.Answer, resp.Truncated = nil, true
		}
		return resp
	})
	refuse := startUpstream(t, func(_ string, req *dns.Msg) *dns.Msg {
		resp := new(dns.Msg)
		resp.SetRcode(req, dns.RcodeRefused)
		return resp
	})
	e := newEnv(t, Config{Upstreams: []string{refuse.addr, trunc.addr}}, refuse, policytest.AllowUnder("pypi.org"))
	if r := e.ask(t, "udp", "pypi.org.", dns.TypeA); r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
		t.Fatalf("got %s %v, want the answer via the second upstream over TCP", dns.RcodeToString[r.Rcode], r.Answer)
	}
	reg := e.f.Registry()
	for _, c := range []struct {
		metric string
		labels map[string]string
		want   float64
	}{
		{"airlock_dns_upstream_exchanges_total", map[string]string{"upstream": refuse.addr, "result": "rcode"}, 1},
		{"airlock_dns_upstream_exchanges_total", map[string]string{"upstream": trunc.addr, "result": "ok"}, 1},
		{"airlock_dns_upstream_tcp_retries_total", map[string]string{"upstream": trunc.addr}, 1},
		{"airlock_dns_upstream_exchange_seconds", map[string]string{"upstream": refuse.addr}, 1},
	} {
		if got := metricValue(t, reg, c.metric, c.labels); got != c.want {
			t.Errorf("%s%v: got %v, want %v", c.metric, c.labels, got, c.want)
		}
	}
}

func TestMetricsAuditSummaries(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{AuditBurst: 1, AuditRate: 0.001, AuditSummaryInterval: time.Hour}, up, policytest.AllowUnder("pypi.org"))
	reg := e.f.Registry()
	for range 5 {
		e.ask(t, "udp", "evil.example.com.", dns.TypeA)
	}
	if got := metricValue(t, reg, "airlock_dns_audit_summaries_pending", map[string]string{}); got != 1 {
		t.Errorf("pending summaries while over budget: got %v, want 1", got)
	}
	e.f.StopSandbox("sb-1")
	for _, c := range []struct {
		metric string
		want   float64
	}{
		{"airlock_dns_audit_summaries_total", 1},
		{"airlock_dns_audit_summarized_queries_total", 4},
		{"airlock_dns_audit_summaries_pending", 0},
		{"airlock_dns_audit_failures_total", 0},
	} {
		if got := metricValue(t, reg, c.metric, map[string]string{}); got != c.want {
			t.Errorf("%s: got %v, want %v", c.metric, got, c.want)
		}
	}
	if got := metricValue(t, reg, "airlock_dns_queries_total", map[string]string{"decision": "deny", "qtype": "A"}); got != 5 {
		t.Errorf("queries counted whether audited one by one or summarized: got %v, want 5", got)
	}
}

// TestMetricsNoQueryNameLabels: no label carries a query name (the sandbox's
// data, and unbounded), a sandbox id or an answer; every label takes its
// values from a fixed set (upstream: the configured upstreams).
func TestMetricsNoQueryNameLabels(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{BlockFlags: []string{}}, up, policytest.AllowUnder("pypi.org"))
	names := []string{
		"pypi.org", "evil.example.com", "allow.pypi.org", "hit.pypi.org", "ok.pypi.org",
		strings.Repeat("k", 60) + ".pypi.org", "x7q9zk2mv8p4w1rj5t3n6b.pypi.org", "other.pypi.org", "none.example.com",
	}
	for _, n := range names {
		for _, qt := range []uint16{dns.TypeA, dns.TypeTXT, 65280, dns.TypeAAAA} {
			e.ask(t, "udp", n+".", qt)
		}
	}
	e.rawUDP(t, cat(header(9, 0x0100, 1, 0, 0, 0), question(dns.TypeA, dns.ClassINET, "raw\\name", "org")), 2*time.Second)
	if _, err := e.f.Resolver().LookupNetIP(context.Background(), "ip4", "gw-only.pypi.org"); err == nil {
		t.Log("gw-only.pypi.org resolved") // NXDOMAIN expected; only the labels matter here
	}
	for _, sb := range []string{"sb-1", "sb-unknown"} {
		if _, err := e.f.Resolver().LookupForSandbox(context.Background(), sb, "gw-sb.pypi.org"); err == nil {
			t.Log("gw-sb.pypi.org resolved") // NXDOMAIN or refused; only the labels matter here
		}
	}

	allowed := map[string][]string{
		"decision": metricDecisions[:],
		"source":   {sourceSandbox, sourceGateway},
		"result": append([]string{resultHit, resultMiss, resultBypass, upstreamOK, upstreamRcode, upstreamBadReply, upstreamTimeout, upstreamError},
			metricLookupResults[:]...),
		"flag":     append(metricFlags[:], "other"),
		"upstream": {up.addr},
	}
	for i := range nQTypes {
		allowed["qtype"] = append(allowed["qtype"], qtypeLabel(i))
	}
	fams, err := e.f.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := 0
	for _, fam := range fams {
		for _, m := range fam.GetMetric() {
			series++
			for _, lp := range m.GetLabel() {
				checkLabel(t, fam, lp, allowed, append(names, "sb-1", "sb-unknown", "gw-only", "gw-sb", "raw", "151.101"))
			}
		}
	}
	if series == 0 {
		t.Fatal("no series gathered")
	}
}

func checkLabel(t *testing.T, fam *dto.MetricFamily, lp *dto.LabelPair, allowed map[string][]string, forbidden []string) {
	t.Helper()
	vals, ok := allowed[lp.GetName()]
	if !ok {
		t.Errorf("%s: label %q is not one of the known labels", fam.GetName(), lp.GetName())
		return
	}
	if !slices.Contains(vals, lp.GetValue()) {
		t.Errorf("%s: label %s=%q is outside its fixed set %v", fam.GetName(), lp.GetName(), lp.GetValue(), vals)
	}
	for _, f := range forbidden {
		if strings.Contains(lp.GetValue(), f) {
			t.Errorf("%s: label %s=%q carries %q", fam.GetName(), lp.GetName(), lp.GetValue(), f)
		}
	}
}

func TestMetricsRegistriesIndependent(t *testing.T) {
	// Two filters in one process: no global registration (a second New would
	// panic on duplicate registration), and one filter's queries do not move
	// the other's counters.
	up := startUpstream(t, records(testZone))
	a := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
	b := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
	a.ask(t, "udp", "pypi.org.", dns.TypeA)
	want := map[string]string{"decision": "allow", "qtype": "A"}
	if got := metricValue(t, a.f.Registry(), "airlock_dns_queries_total", want); got != 1 {
		t.Errorf("filter a: got %v, want 1", got)
	}
	if got := metricValue(t, b.f.Registry(), "airlock_dns_queries_total", want); got != 0 {
		t.Errorf("filter b: got %v, want 0", got)
	}
}
