package dnsfilter

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
)

var testZone = map[string][]string{
	"pypi.org.":          {"pypi.org. 300 IN A 151.101.0.223", "pypi.org. 300 IN A 151.101.64.223"},
	"files.pypi.org.":    {"files.pypi.org. 5 IN A 151.101.1.1"},
	"long.pypi.org.":     {"long.pypi.org. 864000 IN A 151.101.1.2"},
	"www.pypi.org.":      {"www.pypi.org. 300 IN CNAME pypi.org.", "pypi.org. 300 IN A 151.101.0.223"},
	"evil.example.com.":  {"evil.example.com. 300 IN A 1.2.3.4"},
	"rebind.pypi.org.":   {"rebind.pypi.org. 300 IN A 127.0.0.1", "rebind.pypi.org. 300 IN A 10.0.0.5", "rebind.pypi.org. 300 IN A 169.254.169.254", "rebind.pypi.org. 300 IN A 100.64.0.1", "rebind.pypi.org. 300 IN A 151.101.9.9"},
	"internal.pypi.org.": {"internal.pypi.org. 300 IN A 10.1.2.3", "internal.pypi.org. 300 IN A 192.168.1.1"},
	"meta.pypi.org.":     {"meta.pypi.org. 300 IN CNAME metadata.pypi.org.", "metadata.pypi.org. 300 IN A 169.254.169.254"},
	"txt.pypi.org.":      {`txt.pypi.org. 300 IN TXT "v=spf1 -all"`},
	"six.pypi.org.":      {"six.pypi.org. 300 IN AAAA 2001:db8::1", "six.pypi.org. 300 IN AAAA ::1", "six.pypi.org. 300 IN AAAA 2a04:4e42::223"},
}

func TestDeniedNameNeverForwarded(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
	for _, network := range []string{"udp", "tcp"} {
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeTXT, dns.TypeMX, dns.TypeANY, dns.TypeHTTPS} {
			t.Run(network+"/"+dns.TypeToString[qt], func(t *testing.T) {
				r := e.ask(t, network, "evil.example.com.", qt)
				if r.Rcode != dns.RcodeNameError {
					t.Errorf("rcode: got %s, want NXDOMAIN", dns.RcodeToString[r.Rcode])
				}
				if len(r.Answer) != 0 {
					t.Errorf("answers: got %v, want none", r.Answer)
				}
			})
		}
	}
	if n := up.count("evil.example.com"); n != 0 {
		t.Fatalf("upstream saw denied name %d times, want 0", n)
	}
	rec := e.last(t, "evil.example.com")
	if rec.Decision != audit.DecisionDeny || rec.RCode != "NXDOMAIN" || rec.Kind != audit.KindDNS || rec.Sandbox != "sb-1" || rec.PolicyRev != policytest.Rev {
		t.Errorf("audit: got %+v, want deny NXDOMAIN dns sb-1 rev-1", rec)
	}
	if len(rec.Reasons) == 0 || rec.Reasons[0].ID != policytest.ReasonNotAllowed {
		t.Errorf("audit reasons: got %v, want not_allowed", rec.Reasons)
	}
	// Policy saw the question as policy/DESIGN.md describes it.
	in := e.dec.Inputs()[0]
	if in.Kind != policy.KindDNS || in.Destination.Host != "evil.example.com" || in.Destination.Port != 53 ||
		in.DNS == nil || in.DNS.QName != "evil.example.com" || in.DNS.QType != "A" || in.Sandbox.ID != "sb-1" {
		t.Errorf("policy input: got %+v, want kind dns, host/qname evil.example.com, port 53, qtype A", in)
	}
	if !slices.Equal(in.Destination.Suffixes, []string{"evil.example.com", "example.com", "com"}) {
		t.Errorf("suffixes: got %v", in.Destination.Suffixes)
	}
}

func TestAllowedAnsweredAndCached(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
	r := e.ask(t, "udp", "PyPI.org.", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess {
		t.Fatalf("rcode: got %s, want NOERROR", dns.RcodeToString[r.Rcode])
	}
	if got := addrs(r.Answer); !slices.Equal(got, []string{"151.101.0.223", "151.101.64.223"}) {
		t.Errorf("answers: got %v", got)
	}
	if r.Question[0].Name != "PyPI.org." {
		t.Errorf("question echoed as %q, want the name as asked", r.Question[0].Name)
	}
	rec := e.last(t, "pypi.org")
	if rec.Decision != audit.DecisionAllow || rec.RCode != "NOERROR" || rec.QType != "A" || rec.Upstream != up.addr || len(rec.Answers) != 2 {
		t.Errorf("audit: got %+v", rec)
	}
	if rec.Answers[0].Type != "A" || rec.Answers[0].Data != "151.101.0.223" || rec.Answers[0].TTL == 0 {
		t.Errorf("audit answer: got %+v", rec.Answers[0])
	}
	// Again, over TCP: from the cache.
	r = e.ask(t, "tcp", "pypi.org.", dns.TypeA)
	if len(r.Answer) != 2 {
		t.Fatalf("cached answers: got %v", r.Answer)
	}
	if n := up.count("pypi.org"); n != 1 {
		t.Errorf("upstream queries: got %d, want 1 (second answer from cache)", n)
	}
	if rec := e.last(t, "pypi.org"); rec.Upstream != "cache" || rec.Protocol != "tcp" {
		t.Errorf("cached audit: got upstream %q protocol %q, want cache tcp", rec.Upstream, rec.Protocol)
	}
	// A CNAME question gets the CNAME record.
	r = e.ask(t, "udp", "www.pypi.org.", dns.TypeCNAME)
	if len(r.Answer) != 1 || r.Answer[0].(*dns.CNAME).Target != "pypi.org." {
		t.Errorf("cname question: got %v", r.Answer)
	}
	// A CNAME chain is answered whole.
	r = e.ask(t, "udp", "www.pypi.org.", dns.TypeA)
	if len(r.Answer) != 2 || r.Answer[0].Header().Rrtype != dns.TypeCNAME {
		t.Errorf("cname chain: got %v", r.Answer)
	}
}

func TestTTLClamped(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{MinTTL: 30 * time.Second, MaxTTL: time.Hour}, up, policytest.AllowUnder("pypi.org"))
	tests := []struct {
		name     string
		min, max uint32
	}{
		{"files.pypi.org.", 29, 30},    // upstream says 5s
		{"long.pypi.org.", 3599, 3600}, // upstream says 10 days
		{"pypi.org.", 299, 300},        // inside the range
		{"nothere.pypi.org.", 0, 0},    // NXDOMAIN, negative cached
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.ask(t, "udp", tt.name, dns.TypeA)
			for _, rr := range r.Answer {
				if ttl := rr.Header().Ttl; ttl < tt.min || ttl > tt.max {
					t.Errorf("ttl: got %d, want %d..%d", ttl, tt.min, tt.max)
				}
			}
		})
	}
	// Negative caching: the NXDOMAIN is not asked for again.
	e.ask(t, "udp", "nothere.pypi.org.", dns.TypeA)
	if n := up.count("nothere.pypi.org"); n != 1 {
		t.Errorf("upstream queries for an NXDOMAIN name: got %d, want 1", n)
	}
}

func TestRebindingDropped(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{IPv6: true}, up, policytest.AllowUnder("pypi.org"))
	tests := []struct {
		name  string
		qtype uint16
		want  []string
	}{
		{"rebind.pypi.org.", dns.TypeA, []string{"151.101.9.9"}},
		{"internal.pypi.org.", dns.TypeA, nil},
		{"meta.pypi.org.", dns.TypeA, nil},
		{"six.pypi.org.", dns.TypeAAAA, []string{"2a04:4e42::223"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.ask(t, "udp", tt.name, tt.qtype)
			if r.Rcode != dns.RcodeSuccess {
				t.Errorf("rcode: got %s, want NOERROR", dns.RcodeToString[r.Rcode])
			}
			if got := addrs(r.Answer); !slices.Equal(got, tt.want) {
				t.Errorf("answers: got %v, want %v", got, tt.want)
			}
			if tt.want == nil && len(r.Answer) != 0 {
				t.Errorf("all addresses refused: got %v, want NODATA", r.Answer)
			}
			rec := e.last(t, strings.TrimSuffix(tt.name, "."))
			if !slices.Contains(rec.Flags, FlagRebindingDropped) {
				t.Errorf("audit flags: got %v, want %s", rec.Flags, FlagRebindingDropped)
			}
		})
	}
	// The gateway's resolver gets the same filtered view.
	got, err := e.f.Resolver().LookupNetIP(context.Background(), "ip4", "rebind.pypi.org")
	if err != nil || len(got) != 1 || got[0] != netip.MustParseAddr("151.101.9.9") {
		t.Errorf("LookupNetIP: got %v, %v, want [151.101.9.9]", got, err)
	}
	if _, err := e.f.Resolver().LookupNetIP(context.Background(), "ip4", "internal.pypi.org"); err == nil {
		t.Errorf("LookupNetIP of an all-private name: got no error")
	}
	if _, err := e.f.Resolver().LookupNetIP(context.Background(), "ip", "169.254.169.254"); err == nil {
		t.Errorf("LookupNetIP of the metadata address literal: got no error")
	}
	if n := up.count("rebind.pypi.org"); n != 1 {
		t.Errorf("upstream queries: got %d, want 1 (resolver shares the cache)", n)
	}
}

func TestRebindingAllowCIDR(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{AllowCIDRs: []string{"10.1.2.0/24"}}, up, policytest.AllowUnder("pypi.org"))
	r := e.ask(t, "udp", "internal.pypi.org.", dns.TypeA)
	if got := addrs(r.Answer); !slices.Equal(got, []string{"10.1.2.3"}) {
		t.Errorf("answers: got %v, want [10.1.2.3] (allowed CIDR; 192.168.1.1 still dropped)", got)
	}
}

func TestQueryTypes(t *testing.T) {
	up := startUpstream(t, records(testZone))
	dec := policytest.AllowUnder("pypi.org")
	own := netip.MustParseAddr("10.255.255.254")
	e := newEnv(t, Config{}, up, dec, own)
	tests := []struct {
		name    string
		network string
		qname   string
		qtype   uint16
		rcode   int
		answers int
	}{
		{"txt refused", "udp", "txt.pypi.org.", dns.TypeTXT, dns.RcodeRefused, 0},
		{"any refused", "udp", "pypi.org.", dns.TypeANY, dns.RcodeRefused, 0},
		{"mx refused", "udp", "pypi.org.", dns.TypeMX, dns.RcodeRefused, 0},
		{"srv refused", "udp", "srv.pypi.org.", dns.TypeSRV, dns.RcodeRefused, 0},
		{"null refused", "udp", "pypi.org.", dns.TypeNULL, dns.RcodeRefused, 0},
		{"axfr refused", "tcp", "pypi.org.", dns.TypeAXFR, dns.RcodeRefused, 0},
		{"aaaa nodata", "udp", "six.pypi.org.", dns.TypeAAAA, dns.RcodeSuccess, 0},
		{"https nodata", "udp", "pypi.org.", dns.TypeHTTPS, dns.RcodeSuccess, 0},
		{"svcb nodata", "udp", "pypi.org.", dns.TypeSVCB, dns.RcodeSuccess, 0},
		{"ptr other nxdomain", "udp", "1.1.1.1.in-addr.arpa.", dns.TypePTR, dns.RcodeNameError, 0},
	}
	dec.AllowUnder("in-addr.arpa")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.ask(t, tt.network, tt.qname, tt.qtype)
			if r.Rcode != tt.rcode || len(r.Answer) != tt.answers {
				t.Errorf("got %s with %d answers, want %s with %d", dns.RcodeToString[r.Rcode], len(r.Answer), dns.RcodeToString[tt.rcode], tt.answers)
			}
		})
	}
	if q := up.queries(); len(q) != 0 {
		t.Fatalf("upstream saw %v, want nothing", q)
	}
	// PTR of the sandbox's own address is answered locally.
	r := e.ask(t, "udp", "254.255.255.10.in-addr.arpa.", dns.TypePTR)
	if len(r.Answer) != 1 || r.Answer[0].(*dns.PTR).Ptr != "sb-1.airlock.internal." {
		t.Errorf("own PTR: got %v", r.Answer)
	}
	// Policy opts txt.pypi.org in for TXT: now it is forwarded.
	dec.Amend(func(in *policy.Input, d *policy.Decision) {
		if d.Allowed && in.DNS != nil && in.DNS.QType == "TXT" && in.Destination.Host == "txt.pypi.org" {
			d.Reasons = []policy.Reason{{ID: ReasonQTypeOptIn, Msg: "txt allowed"}}
		}
	})
	e.dec.SetRev("rev-2")
	r = e.ask(t, "udp", "txt.pypi.org.", dns.TypeTXT)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Errorf("opted-in TXT: got %s %v", dns.RcodeToString[r.Rcode], r.Answer)
	}
	if n := up.count("txt.pypi.org"); n != 1 {
		t.Errorf("upstream queries for opted-in TXT: got %d, want 1", n)
	}
	if q := up.queries(); len(q) != 1 {
		t.Errorf("upstream saw %v, want only the opted-in TXT", q)
	}
}

func TestTruncatedRetriedOverTCP(t *testing.T) {
	var big []string
	for i := range 60 {
		big = append(big, fmt.Sprintf("big.pypi.org. 300 IN A 151.101.%d.%d", i/250, i%250+1))
	}
	table := records(map[string][]string{"big.pypi.org.": big})
	up := startUpstream(t, func(network string, req *dns.Msg) *dns.Msg {
		resp := table(network, req)
		if network == "udp" {
			resp.Answer = resp.Answer[:1]
			resp.Truncated = true
		}
		return resp
	})
	e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
	r := e.ask(t, "tcp", "big.pypi.org.", dns.TypeA)
	if len(r.Answer) != 60 {
		t.Errorf("answers over tcp: got %d, want 60", len(r.Answer))
	}
	var nets []string
	for _, q := range up.queries() {
		nets = append(nets, q.net)
	}
	if !slices.Equal(nets, []string{"udp", "tcp"}) {
		t.Errorf("upstream transports: got %v, want [udp tcp]", nets)
	}
	// A plain UDP client without EDNS gets a truncated reply (and retries itself).
	m := new(dns.Msg)
	m.SetQuestion("big.pypi.org.", dns.TypeA)
	c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	r, _, err := c.Exchange(m, e.udp)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Truncated {
		t.Errorf("60 records over 512-byte udp: got TC=false, want true")
	}
}

func TestClientSubnetStripped(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
	m := new(dns.Msg)
	m.SetQuestion("pypi.org.", dns.TypeA)
	m.SetEdns0(4096, true)
	m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: netip.MustParseAddr("203.0.113.0").AsSlice()})
	r := e.exchange(t, "udp", m)
	if r.Rcode != dns.RcodeSuccess || r.IsEdns0() == nil {
		t.Fatalf("got %s, edns %v; want NOERROR with OPT", dns.RcodeToString[r.Rcode], r.IsEdns0())
	}
	for _, q := range up.queries() {
		if q.ecs {
			t.Errorf("upstream got a client subnet option in %+v", q)
		}
	}
	if len(up.queries()) != 1 {
		t.Errorf("upstream queries: got %d, want 1", len(up.queries()))
	}
}

func TestSingleflight(t *testing.T) {
	release := make(chan struct{})
	table := records(testZone)
	up := startUpstream(t, func(network string, req *dns.Msg) *dns.Msg {
		<-release
		return table(network, req)
	})
	e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
	var wg sync.WaitGroup
	results := make(chan int, 8)
	for range 8 {
		wg.Go(func() {
			c := &dns.Client{Net: "tcp", Timeout: 5 * time.Second}
			m := new(dns.Msg)
			m.SetQuestion("pypi.org.", dns.TypeA)
			r, _, err := c.Exchange(m, e.tcp)
			if err != nil {
				results <- -1
				return
			}
			results <- len(r.Answer)
		})
	}
	// Let the first miss reach the upstream, then wait for the others to queue.
	deadline := time.Now().Add(5 * time.Second)
	for up.count("pypi.org") == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	for e.f.res.waiting.Load() < 8 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	close(results)
	for n := range results {
		if n != 2 {
			t.Errorf("answers: got %d, want 2", n)
		}
	}
	if n := up.count("pypi.org"); n != 1 {
		t.Errorf("upstream queries for 8 concurrent misses: got %d, want 1", n)
	}
}

func TestDecisionCache(t *testing.T) {
	up := startUpstream(t, records(testZone))
	dec := policytest.AllowUnder("pypi.org")
	e := newEnv(t, Config{}, up, dec)
	for range 3 {
		e.ask(t, "udp", "pypi.org.", dns.TypeA)
		e.ask(t, "udp", "evil.example.com.", dns.TypeA)
	}
	if n := len(dec.Inputs()); n != 2 {
		t.Errorf("policy evaluations for 6 repeated questions: got %d, want 2", n)
	}
	dec.SetRev("rev-2")
	e.ask(t, "udp", "pypi.org.", dns.TypeA)
	if n := len(dec.Inputs()); n != 3 {
		t.Errorf("policy evaluations after a new revision: got %d, want 3", n)
	}
	if rec := e.last(t, "pypi.org"); rec.PolicyRev != "rev-2" {
		t.Errorf("audit policy_rev: got %q, want rev-2", rec.PolicyRev)
	}
	if n := up.count("evil.example.com"); n != 0 {
		t.Errorf("upstream saw the denied name %d times", n)
	}
}

func TestExfiltrationFlags(t *testing.T) {
	long := strings.Repeat("a", 50) + ".pypi.org"
	entropic := "mzxw6ytboi3tmnrxgq4dmzbrgi2dk.pypi.org" // base32 of data
	tests := []struct {
		name       string
		cfg        Config
		policyDeny bool
		qname      string
		flag       string
		blocked    bool
	}{
		{"long label flagged", Config{}, false, long, FlagLongLabel, false},
		{"high entropy flagged", Config{}, false, entropic, FlagHighEntropy, false},
		{"long label blocked by policy", Config{}, true, long, FlagLongLabel, true},
		{"high entropy blocked by policy", Config{}, true, entropic, FlagHighEntropy, true},
		{"long label blocked by config", Config{BlockFlags: []string{FlagLongLabel}}, false, long, FlagLongLabel, true},
		{"high entropy blocked by config", Config{BlockFlags: []string{FlagHighEntropy}}, false, entropic, FlagHighEntropy, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := startUpstream(t, func(_ string, req *dns.Msg) *dns.Msg {
				resp := new(dns.Msg)
				resp.SetReply(req)
				rr, _ := dns.NewRR(req.Question[0].Name + " 60 IN A 151.101.7.7")
				resp.Answer = []dns.RR{rr}
				return resp
			})
			dec := policytest.AllowUnder("pypi.org")
			if tt.policyDeny {
				dec.DenyIf(func(in *policy.Input) bool { return in.DNS != nil && len(in.DNS.Flags) > 0 })
			}
			e := newEnv(t, tt.cfg, up, dec)
			r := e.ask(t, "udp", tt.qname+".", dns.TypeA)
			rec := e.last(t, tt.qname)
			if !slices.Contains(rec.Flags, tt.flag) {
				t.Errorf("audit flags: got %v, want %s", rec.Flags, tt.flag)
			}
			if calls := dec.Inputs(); len(calls) > 0 && !slices.Contains(calls[0].DNS.Flags, tt.flag) {
				t.Errorf("policy input flags: got %v, want %s", calls[0].DNS.Flags, tt.flag)
			}
			if tt.blocked {
				if r.Rcode != dns.RcodeNameError || rec.Decision != audit.DecisionDeny {
					t.Errorf("got %s decision %s, want NXDOMAIN deny", dns.RcodeToString[r.Rcode], rec.Decision)
				}
				if n := len(up.queries()); n != 0 {
					t.Errorf("upstream queries for a blocked exfiltration name: got %d, want 0", n)
				}
			} else {
				if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
					t.Errorf("got %s %v, want an answer", dns.RcodeToString[r.Rcode], r.Answer)
				}
				if n := len(up.queries()); n != 1 {
					t.Errorf("upstream queries: got %d, want 1", n)
				}
			}
		})
	}
	// Ordinary names carry no flags.
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
	e.ask(t, "udp", "files.pypi.org.", dns.TypeA)
	if rec := e.last(t, "files.pypi.org"); len(rec.Flags) != 0 {
		t.Errorf("flags for files.pypi.org: got %v, want none", rec.Flags)
	}
}

func TestUniqueNamesAndRateLimit(t *testing.T) {
	up := startUpstream(t, nil)
	dec := policytest.AllowUnder("pypi.org")
	e := newEnv(t, Config{UniqueNames: 3, RateLimit: 0.001, RateBurst: 6, BlockFlags: []string{FlagRateLimited}}, up, dec)
	var got [][]string
	for i := range 7 {
		name := fmt.Sprintf("n%d.pypi.org", i)
		e.ask(t, "udp", name+".", dns.TypeA)
		got = append(got, e.last(t, name).Flags)
	}
	for i, fl := range got {
		wantUnique := i >= 3
		if slices.Contains(fl, FlagManyUniqueNames) != wantUnique {
			t.Errorf("query %d flags %v: many_unique_names want %v", i, fl, wantUnique)
		}
		wantRate := i >= 6
		if slices.Contains(fl, FlagRateLimited) != wantRate {
			t.Errorf("query %d flags %v: rate_limited want %v", i, fl, wantRate)
		}
	}
	if n := up.count("n6.pypi.org"); n != 0 {
		t.Errorf("rate-limited query reached the upstream %d times", n)
	}
	if rec := e.last(t, "n6.pypi.org"); rec.RCode != "NXDOMAIN" || rec.Reasons[0].ID != ReasonFlagBlocked {
		t.Errorf("rate-limited audit: got %+v", rec)
	}
}

func TestAuditFailureRefuses(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
	e.aud.Refuse(audittest.Full)
	r := e.ask(t, "udp", "pypi.org.", dns.TypeA)
	if r.Rcode != dns.RcodeServerFailure || len(r.Answer) != 0 {
		t.Errorf("got %s %v, want SERVFAIL without answers", dns.RcodeToString[r.Rcode], r.Answer)
	}
}

// TestBrokenAuditLogForwardsNothing: with a failed audit log an allowed name is
// answered SERVFAIL and never sent upstream. Regression: the name was forwarded
// first and only the reply was refused when its record could not be written.
func TestBrokenAuditLogForwardsNothing(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
	e.aud.Break(errors.New("audit: writer failed: no space left on device"))
	for _, network := range []string{"udp", "tcp"} {
		if r := e.ask(t, network, "pypi.org.", dns.TypeA); r.Rcode != dns.RcodeServerFailure || len(r.Answer) != 0 {
			t.Errorf("%s: got %s %v, want SERVFAIL without answers", network, dns.RcodeToString[r.Rcode], r.Answer)
		}
	}
	if n := up.count("pypi.org"); n != 0 {
		t.Fatalf("the upstream saw pypi.org %d times with the audit log broken, want 0", n)
	}
}

func TestPolicyErrorFailsClosed(t *testing.T) {
	up := startUpstream(t, records(testZone))
	dec := policytest.AllowUnder("pypi.org")
	dec.SetMode(policy.ModeReport)
	dec.DenyIf(func(*policy.Input) bool { return true })
	e := newEnv(t, Config{}, up, dec)
	// Report mode lets a policy deny pass, and says so in the audit record.
	r := e.ask(t, "udp", "pypi.org.", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess {
		t.Errorf("report mode: got %s, want NOERROR", dns.RcodeToString[r.Rcode])
	}
	if rec := e.last(t, "pypi.org"); rec.Decision != audit.DecisionDeny || rec.Mode != "report" {
		t.Errorf("report audit: got decision %q mode %q, want deny report", rec.Decision, rec.Mode)
	}
	// A decision with Err never passes, in any mode.
	e = newEnv(t, Config{}, up, policytest.Failing("eval: deadline exceeded"))
	r = e.ask(t, "udp", "files.pypi.org.", dns.TypeA)
	if r.Rcode != dns.RcodeNameError {
		t.Errorf("policy error: got %s, want NXDOMAIN", dns.RcodeToString[r.Rcode])
	}
	if rec := e.last(t, "files.pypi.org"); rec.Decision != audit.DecisionError || rec.Error == "" {
		t.Errorf("policy error audit: got %+v", rec)
	}
	if n := up.count("files.pypi.org"); n != 0 {
		t.Errorf("upstream queries on a policy error: got %d, want 0", n)
	}
}

func TestUpstreamFailover(t *testing.T) {
	bad := startUpstream(t, func(_ string, req *dns.Msg) *dns.Msg {
		resp := new(dns.Msg)
		resp.SetRcode(req, dns.RcodeServerFailure)
		return resp
	})
	good := startUpstream(t, records(testZone))
	e := newEnv(t, Config{Upstreams: []string{bad.addr, good.addr}}, good, policytest.AllowUnder("pypi.org"))
	r := e.ask(t, "udp", "pypi.org.", dns.TypeA)
	if len(r.Answer) != 2 {
		t.Errorf("answers: got %v", r.Answer)
	}
	if bad.count("pypi.org") != 1 || good.count("pypi.org") != 1 {
		t.Errorf("upstream queries: bad %d good %d, want 1 and 1", bad.count("pypi.org"), good.count("pypi.org"))
	}
	if rec := e.last(t, "pypi.org"); rec.Upstream != good.addr {
		t.Errorf("audit upstream: got %q, want %q", rec.Upstream, good.addr)
	}
}

func TestStopSandbox(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
	e.f.StopSandbox("sb-1")
	c := &dns.Client{Net: "tcp", Timeout: 500 * time.Millisecond}
	m := new(dns.Msg)
	m.SetQuestion("pypi.org.", dns.TypeA)
	if _, _, err := c.Exchange(m, e.tcp); err == nil {
		t.Errorf("query after StopSandbox: got an answer, want the listener closed")
	}
	if err := e.f.ServeSandbox(policy.Sandbox{ID: ""}, nil, nil, nil); err == nil {
		t.Errorf("ServeSandbox with an empty id: got no error")
	}
}

func TestAllUpstreamsFail(t *testing.T) {
	bad := startUpstream(t, func(_ string, req *dns.Msg) *dns.Msg {
		resp := new(dns.Msg)
		resp.SetRcode(req, dns.RcodeRefused)
		return resp
	})
	e := newEnv(t, Config{}, bad, policytest.AllowUnder("pypi.org"))
	for range 2 {
		r := e.ask(t, "udp", "pypi.org.", dns.TypeA)
		if r.Rcode != dns.RcodeServerFailure {
			t.Errorf("got %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
		}
	}
	if n := bad.count("pypi.org"); n != 2 {
		t.Errorf("upstream queries: got %d, want 2 (failures are not cached)", n)
	}
	if rec := e.last(t, "pypi.org"); rec.Decision != audit.DecisionError || rec.RCode != "SERVFAIL" || rec.Error == "" {
		t.Errorf("audit: got %+v, want error SERVFAIL with the upstream error", rec)
	}
}

// TestNameCheckRefusesBeforePolicy: a question the name check refuses (the
// daemon's check for secret placeholders) is answered NXDOMAIN, audited with the
// check's reason and flag, never decided by policy and never forwarded, even
// under an allowed domain. Before the hook, a placeholder in a name under an
// allowed wildcard went upstream unflagged.
func TestNameCheckRefusesBeforePolicy(t *testing.T) {
	zone := map[string][]string{"ok.pypi.org.": {"ok.pypi.org. 300 IN A 151.101.0.1"}}
	up := startUpstream(t, records(zone))
	check := func(sb policy.Sandbox, name string) (string, string, bool) {
		if sb.ID == "sb-1" && strings.Contains(name, "phtoken") {
			return "secret_placeholder_misuse", "secret_placeholder", true
		}
		return "", "", false
	}
	dec := policytest.AllowUnder("pypi.org")
	e := newEnv(t, Config{NameCheck: check}, up, dec)
	r := e.ask(t, "udp", "phtoken.pypi.org.", dns.TypeA)
	if r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
		t.Fatalf("placeholder name: got %s %v, want NXDOMAIN and no answer", dns.RcodeToString[r.Rcode], r.Answer)
	}
	if n := up.count("phtoken.pypi.org"); n != 0 {
		t.Fatalf("upstream saw the placeholder name %d times, want 0", n)
	}
	for _, in := range dec.Inputs() {
		if in.Destination.Host == "phtoken.pypi.org" {
			t.Fatalf("policy was asked about a refused name: %+v", in)
		}
	}
	rec := e.last(t, "phtoken.pypi.org")
	if rec.Decision != audit.DecisionDeny || !audittest.HasReason(rec, "secret_placeholder_misuse") || !slices.Contains(rec.Flags, "secret_placeholder") {
		t.Fatalf("record: got %+v, want deny with the check's reason and flag", rec)
	}
	if r := e.ask(t, "udp", "ok.pypi.org.", dns.TypeA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("a clean name: got %s %v, want one answer", dns.RcodeToString[r.Rcode], r.Answer)
	}
}
