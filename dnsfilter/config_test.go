package dnsfilter

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/policy/policytest"
)

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // substring; "" means valid
	}{
		{"minimal", Config{Upstreams: []string{"1.1.1.1:53"}}, ""},
		{"dot", Config{Upstreams: []string{"tls://1.1.1.1:853#cloudflare-dns.com"}}, ""},
		{"udp scheme", Config{Upstreams: []string{"udp://[2606:4700::1111]:53"}}, ""},
		{"no upstreams", Config{}, "upstreams"},
		{"hostname upstream", Config{Upstreams: []string{"dns.google:53"}}, "upstreams[0]"},
		{"no port", Config{Upstreams: []string{"1.1.1.1"}}, "upstreams[0]"},
		{"dot without server name", Config{Upstreams: []string{"tls://1.1.1.1:853"}}, "SERVERNAME"},
		{"https scheme", Config{Upstreams: []string{"https://1.1.1.1/dns-query"}}, "upstreams[0]"},
		{"max below min", Config{Upstreams: []string{"1.1.1.1:53"}, MinTTL: time.Hour, MaxTTL: time.Minute}, "max_ttl"},
		{"negative min", Config{Upstreams: []string{"1.1.1.1:53"}, MinTTL: -time.Second}, "min_ttl"},
		{"bad cidr", Config{Upstreams: []string{"1.1.1.1:53"}, AllowCIDRs: []string{"10.0.0.0/33"}}, "allow_cidrs"},
		{"unknown flag", Config{Upstreams: []string{"1.1.1.1:53"}, BlockFlags: []string{"sus"}}, "block_flags"},
		{"long label too big", Config{Upstreams: []string{"1.1.1.1:53"}, LongLabel: 64}, "long_label"},
		{"entropy too big", Config{Upstreams: []string{"1.1.1.1:53"}, Entropy: 9}, "entropy"},
		{"bad ptr domain", Config{Upstreams: []string{"1.1.1.1:53"}, PTRDomain: "bad domain"}, "ptr_domain"},
		{"negative tcp conns", Config{Upstreams: []string{"1.1.1.1:53"}, MaxTCPConns: -1}, "max_tcp_conns"},
		{"negative audit rate", Config{Upstreams: []string{"1.1.1.1:53"}, AuditRate: -1}, "audit_rate"},
		{"negative audit burst", Config{Upstreams: []string{"1.1.1.1:53"}, AuditBurst: -5}, "audit_burst"},
		{"negative summary interval", Config{Upstreams: []string{"1.1.1.1:53"}, AuditSummaryInterval: -time.Second}, "audit_summary_interval"},
		{"too many top names", Config{Upstreams: []string{"1.1.1.1:53"}, AuditTopNames: MaxAuditTopNames + 1}, "audit_top_names"},
		{"missing ca file", Config{Upstreams: []string{"1.1.1.1:53"}, TLSCAFile: "/nonexistent/ca.pem"}, "tls_ca_file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.cfg.compile()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, want an error naming %q", err, tt.wantErr)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := Config{Upstreams: []string{"1.1.1.1:53"}}.compile()
	if err != nil {
		t.Fatal(err)
	}
	if c.MinTTL != DefaultMinTTL || c.MaxTTL != DefaultMaxTTL || c.RateLimit != DefaultRateLimit || c.LongLabel != DefaultLongLabel {
		t.Errorf("defaults: got %+v", c.Config)
	}
	if c.AuditRate != DefaultAuditRate || c.AuditBurst != DefaultAuditBurst ||
		c.AuditSummaryInterval != DefaultAuditSummaryInterval || c.AuditTopNames != DefaultAuditTopNames {
		t.Errorf("audit budget defaults: got rate %v burst %d interval %v top %d", c.AuditRate, c.AuditBurst, c.AuditSummaryInterval, c.AuditTopNames)
	}
	if !c.block[FlagRateLimited] || !c.block[FlagManyUniqueNames] || len(c.block) != 2 {
		t.Errorf("default block flags: got %v, want rate_limited and many_unique_names", c.block)
	}
	c, err = Config{Upstreams: []string{"1.1.1.1:53"}, BlockFlags: []string{}}.compile()
	if err != nil || len(c.block) != 0 {
		t.Errorf("empty block_flags: got %v, %v; want nothing blocked", c.block, err)
	}
}

func TestLabelSignals(t *testing.T) {
	tests := []struct {
		name           string
		long, entropic bool
	}{
		{"pypi.org", false, false},
		{"files.pythonhosted.org", false, false},
		{"registry.npmjs.org", false, false},
		{"d1a2b3c4.cloudfront.net", false, false},
		{"objects.githubusercontent.com", false, false},
		{strings.Repeat("a", 41) + ".example.com", true, false},
		{"mzxw6ytboi3tmnrxgq4dmzbrgi2dk.example.com", false, true},
		{"4a6f686e20446f6520736563726574.example.com", false, true},
		{"aGVsbG8gd29ybGQgdGhpcyBpcyBzZWNyZXQgZGF0YQ.example.com", true, true},
		{"7118def2c6293bc0ea9c3a571c401c74.example.com", false, true},
		{"eb7e903abbdf9588.example.com", false, true},
		{"production-api-gateway.example.com", false, false},
		{"githubusercontent.com", false, false},
		{"static-production-assets.cdn.example.com", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			long, entropic := labelSignals(tt.name, DefaultLongLabel, DefaultEntropyMinLen, DefaultEntropy)
			if long != tt.long || entropic != tt.entropic {
				t.Errorf("got long %v entropic %v, want %v %v", long, entropic, tt.long, tt.entropic)
			}
		})
	}
}

func TestNegativeCacheUsesSOA(t *testing.T) {
	up := startUpstream(t, func(_ string, req *dns.Msg) *dns.Msg {
		resp := new(dns.Msg)
		resp.SetRcode(req, dns.RcodeNameError)
		soa, _ := dns.NewRR("pypi.org. 3600 IN SOA ns.pypi.org. host.pypi.org. 1 7200 3600 1209600 120")
		resp.Ns = []dns.RR{soa}
		return resp
	})
	e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
	e.ask(t, "udp", "gone.pypi.org.", dns.TypeA)
	a, ok := e.f.res.cached("gone.pypi.org", dns.TypeA, time.Now())
	if !ok || a.rcode != dns.RcodeNameError || a.ttl != 120 {
		t.Fatalf("negative entry: got %+v ok %v, want NXDOMAIN for 120s (SOA minimum)", a, ok)
	}
	e.ask(t, "udp", "gone.pypi.org.", dns.TypeA)
	if n := up.count("gone.pypi.org"); n != 1 {
		t.Errorf("upstream queries: got %d, want 1", n)
	}
}

func TestLookupNetIP(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{}, up, policytest.AllowUnder())
	r := e.f.Resolver()
	ctx := context.Background()
	got, err := r.LookupNetIP(ctx, "ip", "PyPI.org.")
	if err != nil || len(got) != 2 {
		t.Fatalf("got %v, %v", got, err)
	}
	if _, err := r.LookupNetIP(ctx, "ip6", "pypi.org"); err == nil {
		t.Errorf("ip6 with ipv6 off: got no error")
	}
	if _, err := r.LookupNetIP(ctx, "tcp", "pypi.org"); err == nil {
		t.Errorf("network tcp: got no error")
	}
	if got, err := r.LookupNetIP(ctx, "ip", "151.101.0.223"); err != nil || got[0] != netip.MustParseAddr("151.101.0.223") {
		t.Errorf("public literal: got %v, %v", got, err)
	}
	for _, h := range []string{"127.0.0.1", "0x7f.1", "2130706433", "[::ffff:169.254.169.254]", "10.0.0.1"} {
		if got, err := r.LookupNetIP(ctx, "ip", h); err == nil {
			t.Errorf("guarded literal %s: got %v, want an error", h, got)
		}
	}
	if _, err := r.LookupNetIP(ctx, "ip", "bad name!"); err == nil {
		t.Errorf("invalid name: got no error")
	}
	var dnsErr *net.DNSError
	if _, err := r.LookupNetIP(ctx, "ip", "nothere.pypi.org"); err == nil || !errorsAs(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Errorf("NXDOMAIN: got %v, want a not-found *net.DNSError", err)
	}
	if n := len(e.dec.Inputs()); n != 0 {
		t.Errorf("the resolver asked policy %d times, want 0 (the gateway already did)", n)
	}
}

// TestDNSOverTLS runs a DoT upstream with a test certificate: the filter
// resolves through it when it trusts the certificate for the configured name,
// and fails closed (SERVFAIL) when the name does not match.
func TestDNSOverTLS(t *testing.T) {
	cert, pool := testCert(t, "dns.test")
	u := &fakeUpstream{answer: records(testZone)}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	u.addr = ln.Addr().String()
	srv := &dns.Server{Listener: ln, Net: "tcp-tls", Handler: u}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })

	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	e := newEnv(t, Config{Upstreams: []string{"tls://" + u.addr + "#dns.test"}, TLSConfig: tc}, u, policytest.AllowUnder("pypi.org"))
	r := e.ask(t, "udp", "pypi.org.", dns.TypeA)
	if len(r.Answer) != 2 {
		t.Fatalf("over DoT: got %s %v", dns.RcodeToString[r.Rcode], r.Answer)
	}
	if q := u.queries(); len(q) != 1 || q[0].net != "tcp" {
		t.Errorf("upstream saw %v, want one query over TLS", q)
	}
	bad := newEnv(t, Config{Upstreams: []string{"tls://" + u.addr + "#other.test"}, TLSConfig: tc}, u, policytest.AllowUnder("pypi.org"))
	r = bad.ask(t, "udp", "files.pypi.org.", dns.TypeA)
	if r.Rcode != dns.RcodeServerFailure {
		t.Errorf("wrong server name: got %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
	if n := u.count("files.pypi.org"); n != 0 {
		t.Errorf("a query went to an unverified upstream %d times", n)
	}
}

func testCert(t *testing.T, name string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }
