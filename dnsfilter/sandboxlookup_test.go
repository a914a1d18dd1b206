package dnsfilter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
)

// sandboxResolver mirrors gateway.SandboxResolver (dnsfilter must never import
// gateway); netns's tests hold the check against the real interface.
type sandboxResolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	LookupForSandbox(ctx context.Context, sandboxID, host string) ([]netip.Addr, error)
}

var _ sandboxResolver = (*Resolver)(nil)

// answerA answers every A question with ip and every other question NODATA.
func answerA(ip string) func(string, *dns.Msg) *dns.Msg {
	return func(_ string, req *dns.Msg) *dns.Msg {
		resp := new(dns.Msg)
		resp.SetReply(req)
		q := req.Question[0]
		if q.Qtype == dns.TypeA {
			rr, err := dns.NewRR(q.Name + " 300 IN A " + ip)
			if err != nil {
				panic(err)
			}
			resp.Answer = append(resp.Answer, rr)
		}
		return resp
	}
}

// serve makes the env's Filter serve one more sandbox, id, on loopback.
func (e *env) serve(t *testing.T, id string) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.f.ServeSandbox(policy.Sandbox{ID: id}, nil, pc, ln); err != nil {
		t.Fatalf("ServeSandbox %s: %v", id, err)
	}
}

// askOK asks name (A, over UDP) as the env's sandbox and fails unless it is answered.
func (e *env) askOK(t *testing.T, name string) {
	t.Helper()
	if r := e.ask(t, "udp", name+".", dns.TypeA); r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
		t.Fatalf("sandbox query %s: got %s with %d answers, want NOERROR with an address", name, rcodeString(r.Rcode), len(r.Answer))
	}
}

// askRefused asks name as the env's sandbox and fails unless the filter
// refused it (NXDOMAIN, flag_blocked) without asking the upstream.
func (e *env) askRefused(t *testing.T, name string) {
	t.Helper()
	before := e.up.count(name)
	if r := e.ask(t, "udp", name+".", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Fatalf("sandbox query %s: got %s, want NXDOMAIN", name, rcodeString(r.Rcode))
	}
	if rec := e.last(t, name); len(rec.Reasons) == 0 || rec.Reasons[0].ID != ReasonFlagBlocked {
		t.Fatalf("sandbox query %s: got reasons %v, want %s", name, rec.Reasons, ReasonFlagBlocked)
	}
	if n := e.up.count(name) - before; n != 0 {
		t.Fatalf("sandbox query %s: the upstream saw %d queries, want 0", name, n)
	}
}

// lookupOK is a LookupForSandbox that must answer want.
func lookupOK(t *testing.T, r *Resolver, sandbox, host, want string) {
	t.Helper()
	got, err := r.LookupForSandbox(context.Background(), sandbox, host)
	if err != nil || len(got) != 1 || got[0] != netip.MustParseAddr(want) {
		t.Fatalf("LookupForSandbox(%s, %s): got %v, %v; want [%s]", sandbox, host, got, err, want)
	}
}

// lookupRefused is a LookupForSandbox that must be refused with reason and
// send nothing upstream.
func lookupRefused(t *testing.T, e *env, sandbox, host, reason string) {
	t.Helper()
	before := e.up.count(host)
	got, err := e.f.Resolver().LookupForSandbox(context.Background(), sandbox, host)
	var re interface{ Reason() string } // what the gateway asserts
	if !errors.As(err, &re) || re.Reason() != reason {
		t.Fatalf("LookupForSandbox(%s, %s): got %v, %v; want a refusal with reason %s", sandbox, host, got, err, reason)
	}
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Sandbox != sandbox || refused.Host != host {
		t.Fatalf("LookupForSandbox(%s, %s): got %#v, want a *RefusedError naming the sandbox and host", sandbox, host, err)
	}
	if got != nil {
		t.Fatalf("LookupForSandbox(%s, %s): refused but returned %v", sandbox, host, got)
	}
	if n := e.up.count(host) - before; n != 0 {
		t.Fatalf("LookupForSandbox(%s, %s): refused, but the upstream saw %d queries for it, want 0", sandbox, host, n)
	}
}

func lookupMetric(t *testing.T, e *env, result string) float64 {
	t.Helper()
	return metricValue(t, e.f.Registry(), "airlock_dns_gateway_lookups_total", map[string]string{"result": result})
}

// TestGatewayLookupPastUniqueNameCap: once a sandbox has
// filled its unique-name cap with its own queries, the gateway resolved new
// names for it anyway (LookupNetIP charges nothing), an unlimited channel to
// the upstream. LookupForSandbox refuses them, sends nothing upstream, still
// answers the names the sandbox already used from the cache, and serves
// another sandbox.
func TestGatewayLookupPastUniqueNameCap(t *testing.T) {
	up := startUpstream(t, answerA("151.101.2.2"))
	e := newEnv(t, Config{UniqueNames: 3}, up, policytest.AllowUnder("pypi.org"))
	e.serve(t, "sb-2")
	res := e.f.Resolver()
	for i := range 3 {
		e.askOK(t, fmt.Sprintf("n%d.pypi.org", i))
	}
	e.askRefused(t, "n3.pypi.org") // the filter now refuses sb-1's new names

	lookupRefused(t, e, "sb-1", "exfil-6a6f.pypi.org", ReasonUniqueNames)
	lookupRefused(t, e, "sb-1", "EXFIL-7b7b.pypi.org.", ReasonUniqueNames)
	lookupOK(t, res, "sb-1", "n1.pypi.org", "151.101.2.2")
	if n := up.count("n1.pypi.org"); n != 1 {
		t.Errorf("n1.pypi.org: the upstream saw %d queries, want 1 (the gateway's lookup is a cache hit)", n)
	}
	lookupOK(t, res, "sb-2", "exfil-6a6f.pypi.org", "151.101.2.2")
	if n := up.count("exfil-6a6f.pypi.org"); n != 1 {
		t.Errorf("exfil-6a6f.pypi.org for sb-2: the upstream saw %d queries, want 1", n)
	}
	if got := lookupMetric(t, e, ReasonUniqueNames); got != 2 {
		t.Errorf("gateway_lookups_total{result=%s}: got %v, want 2", ReasonUniqueNames, got)
	}
	if got := lookupMetric(t, e, lookupAnswered); got != 2 {
		t.Errorf("gateway_lookups_total{result=answered}: got %v, want 2", got)
	}
}

// TestGatewayLookupsFillTheSandboxsCap: the gateway's lookups count in the
// same unique-name set as the sandbox's own queries, so names the gateway
// resolved for a sandbox bring its own queries to the cap.
func TestGatewayLookupsFillTheSandboxsCap(t *testing.T) {
	up := startUpstream(t, answerA("151.101.2.2"))
	e := newEnv(t, Config{UniqueNames: 3}, up, policytest.AllowUnder("pypi.org"))
	res := e.f.Resolver()
	for i := range 3 {
		lookupOK(t, res, "sb-1", fmt.Sprintf("g%d.pypi.org", i), "151.101.2.2")
	}
	e.askRefused(t, "g3.pypi.org")
	if rec := e.last(t, "g3.pypi.org"); !slices.Contains(rec.Flags, FlagManyUniqueNames) {
		t.Errorf("g3.pypi.org: got flags %v, want %s", rec.Flags, FlagManyUniqueNames)
	}
	e.askOK(t, "g0.pypi.org") // a name the gateway already resolved for it
	lookupRefused(t, e, "sb-1", "g4.pypi.org", ReasonUniqueNames)
}

// TestGatewayLookupPastRateLimit: the gateway's lookups take tokens from the
// sandbox's own rate bucket, and once it is empty they are refused, cached
// names included (as the sandbox's own query for a cached name is), while
// another sandbox is served.
func TestGatewayLookupPastRateLimit(t *testing.T) {
	up := startUpstream(t, answerA("151.101.2.2"))
	e := newEnv(t, Config{RateLimit: 0.001, RateBurst: 3}, up, policytest.AllowUnder("pypi.org"))
	e.serve(t, "sb-2")
	res := e.f.Resolver()
	e.askOK(t, "r0.pypi.org")
	e.askOK(t, "r1.pypi.org")
	lookupOK(t, res, "sb-1", "r2.pypi.org", "151.101.2.2") // the bucket's last token
	e.askRefused(t, "r3.pypi.org")

	lookupRefused(t, e, "sb-1", "r4.pypi.org", ReasonRateLimited)
	lookupRefused(t, e, "sb-1", "r0.pypi.org", ReasonRateLimited)
	lookupOK(t, res, "sb-2", "r4.pypi.org", "151.101.2.2")
	if n := up.count("r4.pypi.org"); n != 1 {
		t.Errorf("r4.pypi.org for sb-2: the upstream saw %d queries, want 1", n)
	}
	if got := lookupMetric(t, e, ReasonRateLimited); got != 2 {
		t.Errorf("gateway_lookups_total{result=%s}: got %v, want 2", ReasonRateLimited, got)
	}
}

// TestGatewayLookupChargesEachQueryType: with IPv6 on, one lookup asks A and
// AAAA, two questions, and takes two tokens, as the sandbox's two queries would.
func TestGatewayLookupChargesEachQueryType(t *testing.T) {
	up := startUpstream(t, answerA("151.101.2.2"))
	e := newEnv(t, Config{IPv6: true, RateLimit: 0.001, RateBurst: 3}, up, policytest.AllowUnder("pypi.org"))
	lookupOK(t, e.f.Resolver(), "sb-1", "v0.pypi.org", "151.101.2.2")
	e.askOK(t, "v1.pypi.org")
	e.askRefused(t, "v2.pypi.org")
}

// TestGatewayLookupUnknownSandbox: a lookup for a sandbox the filter does not
// serve (never served, stopped, or the filter shut down) is refused and sends
// nothing upstream: fail closed.
func TestGatewayLookupUnknownSandbox(t *testing.T) {
	up := startUpstream(t, answerA("151.101.2.2"))
	e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
	lookupRefused(t, e, "sb-nope", "pypi.org", ReasonUnknownSandbox)
	lookupRefused(t, e, "", "pypi.org", ReasonUnknownSandbox)
	e.serve(t, "sb-2")
	lookupOK(t, e.f.Resolver(), "sb-2", "pypi.org", "151.101.2.2")
	e.f.StopSandbox("sb-2")
	lookupRefused(t, e, "sb-2", "stopped.pypi.org", ReasonUnknownSandbox)
	if err := e.f.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	lookupRefused(t, e, "sb-1", "shutdown.pypi.org", ReasonUnknownSandbox)
	if got := lookupMetric(t, e, ReasonUnknownSandbox); got != 4 {
		t.Errorf("gateway_lookups_total{result=%s}: got %v, want 4", ReasonUnknownSandbox, got)
	}
}

// TestGatewayLookupBlockFlags: a flag Config.BlockFlags names refuses the
// gateway's lookup as it refuses the sandbox's query.
func TestGatewayLookupBlockFlags(t *testing.T) {
	up := startUpstream(t, answerA("151.101.2.2"))
	e := newEnv(t, Config{BlockFlags: []string{FlagLongLabel, FlagHighEntropy}}, up, policytest.AllowUnder("pypi.org"))
	tests := []struct {
		name, host, reason string
	}{
		{"long label", strings.Repeat("a", 41) + ".pypi.org", ReasonLongLabel},
		{"high entropy", "x7q9zk2mv8p4w1rj5t3n6b.pypi.org", ReasonHighEntropy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lookupRefused(t, e, "sb-1", tt.host, tt.reason)
			e.askRefused(t, tt.host)
		})
	}
	lookupOK(t, e.f.Resolver(), "sb-1", "pypi.org", "151.101.2.2")
}

// TestGatewayLookupBrokenAuditLog: with the audit log broken, a name that is
// not cached is not sent upstream for the gateway either.
func TestGatewayLookupBrokenAuditLog(t *testing.T) {
	up := startUpstream(t, answerA("151.101.2.2"))
	e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
	e.aud.Break(errors.New("audit: disk full"))
	lookupRefused(t, e, "sb-1", "pypi.org", ReasonAuditUnavailable)
}

// TestGatewayLookupLiteralsAndBadNames: an IP literal needs no resolution (the
// guard still applies) and a bad name is a failure, not a refusal.
func TestGatewayLookupLiteralsAndBadNames(t *testing.T) {
	up := startUpstream(t, answerA("151.101.2.2"))
	e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
	res := e.f.Resolver()
	lookupOK(t, res, "sb-1", "151.101.0.223", "151.101.0.223")
	for _, h := range []string{"10.0.0.1", "127.0.0.1", "bad name!"} {
		_, err := res.LookupForSandbox(context.Background(), "sb-1", h)
		var re interface{ Reason() string }
		if err == nil || errors.As(err, &re) {
			t.Errorf("LookupForSandbox(%q): got %v, want a failure that is not a refusal", h, err)
		}
	}
	if n := len(up.queries()); n != 0 {
		t.Errorf("the upstream saw %d queries, want 0", n)
	}
}

// BenchmarkLookupCached compares the gateway's lookup of a cached name charged
// to a sandbox (LookupForSandbox: the sandbox lookup, its rate bucket and
// unique-name set) with the uncharged LookupNetIP, serially and from parallel
// goroutines. Report the ratio of the two in one run.
func BenchmarkLookupCached(b *testing.B) {
	up := startUpstream(b, answerA("151.101.2.2"))
	f, err := New(Config{Upstreams: []string{up.addr}, RateLimit: 1e12, RateBurst: 1 << 30}, policytest.AllowUnder("pypi.org"), audittest.Discard{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	if err := f.ServeSandbox(policy.Sandbox{ID: "sb-1"}, nil, pc, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Shutdown(context.Background()) })
	res, ctx := f.Resolver(), context.Background()
	if _, err := res.LookupForSandbox(ctx, "sb-1", "pypi.org"); err != nil {
		b.Fatal(err)
	}
	lookups := []struct {
		name string
		fn   func() ([]netip.Addr, error)
	}{
		{"LookupNetIP", func() ([]netip.Addr, error) { return res.LookupNetIP(ctx, "ip", "pypi.org") }},
		{"LookupForSandbox", func() ([]netip.Addr, error) { return res.LookupForSandbox(ctx, "sb-1", "pypi.org") }},
	}
	for _, l := range lookups {
		b.Run(l.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.fn(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(l.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := l.fn(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
	if n := up.count("pypi.org"); n != 1 {
		b.Errorf("the upstream saw %d queries for pypi.org, want 1 (every other lookup a cache hit)", n)
	}
}
