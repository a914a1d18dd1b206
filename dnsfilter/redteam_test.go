package dnsfilter

// Attack battery: each test is something a sandbox could try to get data out
// (or bad data in) through the DNS filter. Each would pass only if the filter
// held, and each checks what the upstream received, so a missing block fails.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/policy/policytest"
	"github.com/airlock-dev/airlock/test/tcptest"
)

// rawUpstream is a fake upstream that keeps every UDP and TCP query exactly as
// its bytes arrived, so a test can check what left the filter byte for byte.
type rawUpstream struct {
	addr   string
	answer func(req *dns.Msg) *dns.Msg // nil reply: NXDOMAIN

	mu  sync.Mutex
	raw [][]byte
}

func startRawUpstream(t *testing.T, answer func(req *dns.Msg) *dns.Msg) *rawUpstream {
	t.Helper()
	u := &rawUpstream{answer: answer}
	var pc net.PacketConn
	var ln net.Listener
	for range 20 {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
		pc = nil
	}
	if pc == nil {
		t.Fatal("no free port for udp and tcp")
	}
	u.addr = pc.LocalAddr().String()
	t.Cleanup(func() { pc.Close(); ln.Close() })
	go func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if out := u.handle(buf[:n]); out != nil {
				pc.WriteTo(out, from)
			}
		}
	}()
	go tcptest.Serve(ln, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		for {
			var l [2]byte
			if _, err := io.ReadFull(c, l[:]); err != nil {
				return
			}
			b := make([]byte, binary.BigEndian.Uint16(l[:]))
			if _, err := io.ReadFull(c, b); err != nil {
				return
			}
			out := u.handle(b)
			if out == nil {
				return
			}
			c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...))
		}
	})
	return u
}

func (u *rawUpstream) handle(b []byte) []byte {
	u.mu.Lock()
	u.raw = append(u.raw, bytes.Clone(b))
	u.mu.Unlock()
	req := new(dns.Msg)
	if err := req.Unpack(b); err != nil || len(req.Question) != 1 {
		return nil
	}
	var resp *dns.Msg
	if u.answer != nil {
		resp = u.answer(req)
	}
	if resp == nil {
		resp = new(dns.Msg)
		resp.SetRcode(req, dns.RcodeNameError)
	}
	out, err := resp.Pack()
	if err != nil {
		return nil
	}
	return out
}

func (u *rawUpstream) queries() [][]byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.raw)
}

// canonicalQuery is the only shape of query the filter may send upstream for
// (name, qtype), apart from the random id: RD set and nothing else in the
// header, one question in lower case, and one OPT (our buffer size, DO clear,
// version 0, no options).
func canonicalQuery(t *testing.T, name string, qtype uint16) []byte {
	t.Helper()
	b := header(0, 0x0100, 1, 0, 0, 1)
	wire := make([]byte, 256)
	off, err := dns.PackDomainName(dns.Fqdn(name), wire, 0, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, wire[:off]...)
	b = binary.BigEndian.AppendUint16(b, qtype)
	b = binary.BigEndian.AppendUint16(b, dns.ClassINET)
	return append(b, 0, 0, 41, byte(DefaultEDNSSize>>8), byte(DefaultEDNSSize&0xff), 0, 0, 0, 0, 0, 0)
}

// checkCanonical fails unless every query the upstream saw is the canonical
// query for one of want (in any order, each at most once).
func checkCanonical(t *testing.T, u *rawUpstream, qtype uint16, want ...string) {
	t.Helper()
	got := u.queries()
	if len(got) != len(want) {
		t.Errorf("upstream got %d queries, want %d (%v)", len(got), len(want), want)
	}
	left := slices.Clone(want)
	for _, q := range got {
		if len(q) < 12 {
			t.Errorf("upstream got a %d-byte query", len(q))
			continue
		}
		body := slices.Clone(q)
		body[0], body[1] = 0, 0 // the id is random
		found := -1
		for i, name := range left {
			if bytes.Equal(body, canonicalQuery(t, name, qtype)) {
				found = i
				break
			}
		}
		if found < 0 {
			t.Errorf("upstream got a query that is not the canonical form of any of %v:\n got %x", left, body)
			continue
		}
		left = slices.Delete(left, found, found+1)
	}
}

// aAnswer answers every A question with addr.
func aAnswer(addr string) func(*dns.Msg) *dns.Msg {
	return func(req *dns.Msg) *dns.Msg {
		resp := new(dns.Msg)
		resp.SetReply(req)
		if req.Question[0].Qtype == dns.TypeA {
			rr, _ := dns.NewRR(req.Question[0].Name + " 300 IN A " + addr)
			resp.Answer = []dns.RR{rr}
		}
		return resp
	}
}

// rawQuery builds a wire query with the labels given byte for byte.
func rawQuery(id uint16, qtype uint16, labels ...string) []byte {
	return cat(header(id, 0x0100, 1, 0, 0, 0), question(qtype, dns.ClassINET, labels...))
}

func TestAttackSpellingsReachUpstreamNormalized(t *testing.T) {
	up := startRawUpstream(t, aAnswer("151.101.0.223"))
	e := newEnv(t, Config{Upstreams: []string{up.addr}}, nil, policytest.AllowUnder("pypi.org", "xn--bcher-kva.example"))
	tests := []struct {
		name   string
		labels []string
		rcode  int
	}{
		// 0x20 case randomization: one normalized name upstream.
		{"0x20", []string{"fIlEs", "PyPi", "OrG"}, dns.RcodeSuccess},
		{"upper", []string{"FILES", "PYPI", "ORG"}, dns.RcodeSuccess},
		{"upper punycode", []string{"XN--BCHER-KVA", "EXAMPLE"}, dns.RcodeSuccess},
		{"mixed punycode", []string{"Xn--BcHeR-kVa", "example"}, dns.RcodeSuccess},
		// Bytes no host name has: never forwarded in any spelling.
		{"dot inside a label", []string{"files.pypi", "org"}, dns.RcodeFormatError},
		{"escaped dot spelled out", []string{`files\.pypi`, "org"}, dns.RcodeFormatError},
		{"ddd escape spelled out", []string{`files\046pypi`, "org"}, dns.RcodeFormatError},
		{"high byte", []string{"files\xff", "pypi", "org"}, dns.RcodeFormatError},
		{"raw utf-8 label", []string{"b\xc3\xbccher", "example"}, dns.RcodeFormatError},
		{"nul", []string{"files\x00", "pypi", "org"}, dns.RcodeFormatError},
		{"uppercase unicode-looking", []string{"B\xc3\x9cCHER", "example"}, dns.RcodeFormatError},
		{"trailing empty label via space", []string{"files ", "pypi", "org"}, dns.RcodeFormatError},
		{"bad punycode", []string{"xn--", "pypi", "org"}, dns.RcodeRefused},
		{"underscore", []string{"_dmarc", "pypi", "org"}, dns.RcodeRefused},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := e.rawUDP(t, rawQuery(uint16(100+i), dns.TypeA, tt.labels...), 2*time.Second)
			if len(got) < 12 {
				t.Fatalf("no reply")
			}
			if rc := int(got[3] & 0xf); rc != tt.rcode {
				t.Errorf("rcode: got %s, want %s", dns.RcodeToString[rc], dns.RcodeToString[tt.rcode])
			}
		})
	}
	// Exactly two upstream queries, each in canonical lower-case form: the four
	// spellings collapse onto two names and the cache.
	checkCanonical(t, up, dns.TypeA, "files.pypi.org", "xn--bcher-kva.example")
	// Policy saw only normalized names.
	for _, in := range e.dec.Inputs() {
		if in.DNS.QName != strings.ToLower(in.DNS.QName) || strings.ContainsAny(in.DNS.QName, "\\ \x00") {
			t.Errorf("policy saw a non-normalized name %q", in.DNS.QName)
		}
	}
}

func TestAttackEDNSOptionsNotForwarded(t *testing.T) {
	up := startRawUpstream(t, aAnswer("151.101.0.223"))
	e := newEnv(t, Config{Upstreams: []string{up.addr}}, nil, policytest.AllowUnder("pypi.org"))
	m := new(dns.Msg)
	m.SetQuestion("edns.pypi.org.", dns.TypeA)
	m.CheckingDisabled = true
	m.AuthenticatedData = true
	m.Zero = true
	m.SetEdns0(65535, true) // DO bit
	opt := m.IsEdns0()
	opt.SetVersion(0)
	opt.Option = append(opt.Option,
		&dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 32, Address: net.IPv4(203, 0, 113, 7).To4()},
		&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef"},
		&dns.EDNS0_PADDING{Padding: bytes.Repeat([]byte("secret"), 20)},
		&dns.EDNS0_NSID{Code: dns.EDNS0NSID},
		&dns.EDNS0_LOCAL{Code: 65001, Data: []byte("exfiltrated-bytes")},
		&dns.EDNS0_EXPIRE{Code: dns.EDNS0EXPIRE},
		&dns.EDNS0_TCP_KEEPALIVE{Code: dns.EDNS0TCPKEEPALIVE, Timeout: 100},
	)
	for _, network := range []string{"udp", "tcp"} {
		r := e.exchange(t, network, m)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("%s: got %s %v, want one answer", network, dns.RcodeToString[r.Rcode], r.Answer)
		}
		if o := r.IsEdns0(); o == nil || len(o.Option) != 0 || o.Do() {
			t.Errorf("%s: reply OPT %v: want one with no options and DO clear", network, o)
		}
	}
	// One exchange (the second question came from the cache), canonical: no
	// option, no DO, no CD/AD/Z, whatever the sandbox put in its query.
	checkCanonical(t, up, dns.TypeA, "edns.pypi.org")
}

func TestAttackCNAMEChainToDeniedName(t *testing.T) {
	// www.pypi.org is allowed; its chain runs through evil.example.com (denied)
	// and ends at a public address. priv.pypi.org's chain ends in a private and
	// a metadata address; own.pypi.org's at the gateway's own address.
	zone := map[string][]string{
		"www.pypi.org.": {
			"www.pypi.org. 300 IN CNAME evil.example.com.",
			"evil.example.com. 300 IN A 93.184.216.34",
		},
		"priv.pypi.org.": {
			"priv.pypi.org. 300 IN CNAME evil.example.com.",
			"evil.example.com. 300 IN CNAME internal.corp.",
			"internal.corp. 300 IN A 10.0.0.7",
			"internal.corp. 300 IN A 169.254.169.254",
		},
		"own.pypi.org.": {
			"own.pypi.org. 300 IN CNAME evil.example.com.",
			"evil.example.com. 300 IN A 198.51.100.9",
		},
		"evil.example.com.": {"evil.example.com. 300 IN A 6.6.6.6"},
	}
	up := startUpstream(t, records(zone))
	e := newEnv(t, Config{GatewayAddrs: []netip.Addr{netip.MustParseAddr("198.51.100.9")}}, up, policytest.AllowUnder("pypi.org"))

	r := e.ask(t, "udp", "www.pypi.org.", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || !slices.Equal(addrs(r.Answer), []string{"93.184.216.34"}) {
		t.Errorf("allowed chain: got %s %v, want the chain as resolved", dns.RcodeToString[r.Rcode], r.Answer)
	}
	for _, name := range []string{"priv.pypi.org.", "own.pypi.org."} {
		r = e.ask(t, "udp", name, dns.TypeA)
		if len(r.Answer) != 0 {
			t.Errorf("%s: got %v, want NODATA (every address refused)", name, r.Answer)
		}
		if rec := e.last(t, strings.TrimSuffix(name, ".")); !slices.Contains(rec.Flags, FlagRebindingDropped) {
			t.Errorf("%s: audit flags %v, want %s", name, rec.Flags, FlagRebindingDropped)
		}
	}
	// The chain's records were not cached under the denied name: asking it is
	// still NXDOMAIN from policy, and never forwarded.
	r = e.ask(t, "udp", "evil.example.com.", dns.TypeA)
	if r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
		t.Errorf("denied chain member asked directly: got %s %v, want NXDOMAIN", dns.RcodeToString[r.Rcode], r.Answer)
	}
	if n := up.count("evil.example.com"); n != 0 {
		t.Errorf("upstream saw the denied name %d times, want 0", n)
	}
	if _, hit := e.f.res.cached("evil.example.com", dns.TypeA, time.Now()); hit {
		t.Errorf("a chain member was cached under its own name")
	}
}

func TestAttackPoisoningOtherOwners(t *testing.T) {
	// The upstream (or an off-path spoofer that won the race) adds records for
	// other names in every section.
	poison := func(name string) dns.RR {
		rr, _ := dns.NewRR(name + " 86400 IN A 6.6.6.6")
		return rr
	}
	var mu sync.Mutex
	truth := map[string]string{"pypi.org.": "151.101.0.223", "files.pypi.org.": "151.101.1.1", "evil.example.com.": "93.184.216.34"}
	up := startUpstream(t, func(_ string, req *dns.Msg) *dns.Msg {
		q := req.Question[0]
		mu.Lock()
		ip, ok := truth[strings.ToLower(q.Name)]
		mu.Unlock()
		if !ok {
			return nil
		}
		resp := new(dns.Msg)
		resp.SetReply(req)
		rr, _ := dns.NewRR(q.Name + " 300 IN A " + ip)
		resp.Answer = []dns.RR{rr}
		for _, other := range []string{"files.pypi.org.", "evil.example.com."} {
			if other != strings.ToLower(q.Name) {
				resp.Answer = append(resp.Answer, poison(other))
			}
		}
		if q.Name == "pypi.org." {
			ns, _ := dns.NewRR("pypi.org. 86400 IN NS ns.evil.example.com.")
			resp.Ns = []dns.RR{ns, poison("files.pypi.org.")}
			resp.Extra = []dns.RR{poison("files.pypi.org."), poison("ns.evil.example.com."), poison("pypi.org.")}
		}
		return resp
	})
	e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
	r := e.ask(t, "udp", "pypi.org.", dns.TypeA)
	if got := addrs(r.Answer); !slices.Equal(got, []string{"151.101.0.223"}) {
		t.Errorf("pypi.org: got %v, want only its own record", got)
	}
	if len(r.Ns) != 0 || len(r.Extra) > 1 {
		t.Errorf("pypi.org: authority %v, additional %v passed on", r.Ns, r.Extra)
	}
	r = e.ask(t, "udp", "files.pypi.org.", dns.TypeA)
	if got := addrs(r.Answer); !slices.Equal(got, []string{"151.101.1.1"}) {
		t.Errorf("files.pypi.org after poisoning: got %v, want 151.101.1.1", got)
	}
	if n := up.count("files.pypi.org"); n != 1 {
		t.Errorf("files.pypi.org upstream queries: got %d, want 1 (not answered from poison)", n)
	}
	got, err := e.f.Resolver().LookupNetIP(t.Context(), "ip4", "evil.example.com")
	if err != nil || len(got) != 1 || got[0] != netip.MustParseAddr("93.184.216.34") {
		t.Errorf("gateway resolver for evil.example.com: got %v, %v, want its own answer", got, err)
	}
}

func TestAttackIPv6AndHTTPSLeaks(t *testing.T) {
	zone := map[string][]string{
		"six.pypi.org.": {
			"six.pypi.org. 300 IN AAAA ::ffff:127.0.0.1",
			"six.pypi.org. 300 IN AAAA ::ffff:169.254.169.254",
			"six.pypi.org. 300 IN AAAA ::ffff:a9fe:a9fe",
			"six.pypi.org. 300 IN AAAA 64:ff9b::a9fe:a9fe",
			"six.pypi.org. 300 IN AAAA 2002:a9fe:a9fe::1",
			"six.pypi.org. 300 IN AAAA 2002:0a00:0001::1",
			"six.pypi.org. 300 IN AAAA fd00:ec2::254",
			"six.pypi.org. 300 IN AAAA fe80::1",
			"six.pypi.org. 300 IN AAAA ::1",
			"six.pypi.org. 300 IN AAAA ::",
			"six.pypi.org. 300 IN AAAA ::127.0.0.1",
			"six.pypi.org. 300 IN AAAA ff02::1",
			"six.pypi.org. 300 IN AAAA 2a04:4e42::223",
		},
		"pypi.org.": {`pypi.org. 300 IN HTTPS 1 . alpn="h2" ipv4hint=10.0.0.1 ipv6hint=::1`},
	}
	t.Run("ipv6 off", func(t *testing.T) {
		up := startUpstream(t, records(zone))
		e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
		for _, qt := range []uint16{dns.TypeAAAA, dns.TypeHTTPS, dns.TypeSVCB} {
			for _, network := range []string{"udp", "tcp"} {
				r := e.ask(t, network, "six.pypi.org.", qt)
				if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
					t.Errorf("%s %s: got %s %v, want NODATA", network, dns.TypeToString[qt], dns.RcodeToString[r.Rcode], r.Answer)
				}
			}
		}
		if q := up.queries(); len(q) != 0 {
			t.Errorf("upstream saw %v, want nothing", q)
		}
		if got, err := e.f.Resolver().LookupNetIP(t.Context(), "ip", "six.pypi.org"); err == nil {
			t.Errorf("gateway resolver with ipv6 off: got %v", got)
		}
	})
	t.Run("ipv6 on", func(t *testing.T) {
		up := startUpstream(t, records(zone))
		e := newEnv(t, Config{IPv6: true}, up, policytest.AllowUnder("pypi.org"))
		r := e.ask(t, "udp", "six.pypi.org.", dns.TypeAAAA)
		if got := addrs(r.Answer); !slices.Equal(got, []string{"2a04:4e42::223"}) {
			t.Errorf("AAAA: got %v, want only the public address", got)
		}
		got, err := e.f.Resolver().LookupNetIP(t.Context(), "ip6", "six.pypi.org")
		if err != nil || len(got) != 1 || got[0] != netip.MustParseAddr("2a04:4e42::223") {
			t.Errorf("gateway resolver: got %v, %v", got, err)
		}
		r = e.ask(t, "udp", "pypi.org.", dns.TypeHTTPS)
		if len(r.Answer) != 0 || up.count("pypi.org") != 0 {
			t.Errorf("HTTPS: got %v with %d upstream queries, want NODATA and none", r.Answer, up.count("pypi.org"))
		}
	})
}

func TestAttackPTRNeverForwarded(t *testing.T) {
	up := startUpstream(t, records(testZone))
	dec := policytest.AllowUnder("in-addr.arpa", "ip6.arpa", "pypi.org")
	e := newEnv(t, Config{IPv6: true}, up, dec, netip.MustParseAddr("10.255.255.254"))
	for _, name := range []string{
		"1.0.0.127.in-addr.arpa.",
		"254.169.254.169.in-addr.arpa.",
		"1.0.168.192.in-addr.arpa.",
		"4.3.2.1.in-addr.arpa.",
		"in-addr.arpa.",
		"168.192.in-addr.arpa.",
		"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa.",
		"pypi.org.",
		"secretdata.pypi.org.",
	} {
		for _, network := range []string{"udp", "tcp"} {
			r := e.ask(t, network, name, dns.TypePTR)
			if r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
				t.Errorf("%s PTR %s: got %s %v, want NXDOMAIN", network, name, dns.RcodeToString[r.Rcode], r.Answer)
			}
		}
	}
	if q := up.queries(); len(q) != 0 {
		t.Errorf("upstream saw %v, want no PTR forwarded", q)
	}
}

func TestAttackUniqueNamesExfiltration(t *testing.T) {
	// Data carried in the names themselves: short, low-entropy, hyphenated
	// labels that no label heuristic flags, just under the rate limit. With the
	// default block flags, the new names after the threshold never leave.
	up := startUpstream(t, func(_ string, req *dns.Msg) *dns.Msg {
		resp := new(dns.Msg)
		resp.SetReply(req)
		rr, _ := dns.NewRR(req.Question[0].Name + " 60 IN A 151.101.7.7")
		resp.Answer = []dns.RR{rr}
		return resp
	})
	const limit = 5
	e := newEnv(t, Config{UniqueNames: limit, RateLimit: 1000, RateBurst: 1000}, up, policytest.AllowUnder("pypi.org"))
	chunk := func(i int) string { return fmt.Sprintf("mzxw6ytb-%03d-oi3tmnrx.pypi.org", i) }
	for i := range 3 * limit {
		name := chunk(i)
		r := e.ask(t, "udp", name+".", dns.TypeA)
		rec := e.last(t, name)
		if i < limit {
			if r.Rcode != dns.RcodeSuccess || len(rec.Flags) != 0 {
				t.Errorf("name %d: got %s flags %v, want an answer without flags", i, dns.RcodeToString[r.Rcode], rec.Flags)
			}
			continue
		}
		if r.Rcode != dns.RcodeNameError || !slices.Contains(rec.Flags, FlagManyUniqueNames) || rec.Reasons[0].ID != ReasonFlagBlocked {
			t.Errorf("name %d: got %s flags %v reasons %v, want NXDOMAIN blocked by many_unique_names", i, dns.RcodeToString[r.Rcode], rec.Flags, rec.Reasons)
		}
		if n := up.count(name); n != 0 {
			t.Errorf("name %d over the threshold reached the upstream %d times", i, n)
		}
	}
	// The names used before the threshold keep resolving (from the cache or
	// not): blocking the spray does not break what the sandbox already used.
	for i := range limit {
		if r := e.ask(t, "tcp", chunk(i)+".", dns.TypeA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Errorf("earlier name %d after the threshold: got %s %v", i, dns.RcodeToString[r.Rcode], r.Answer)
		}
	}
	// Other registered domains have their own count.
	if r := e.ask(t, "udp", "files.pythonhosted.org.", dns.TypeA); r.Rcode == dns.RcodeNameError {
		if rec := e.last(t, "files.pythonhosted.org"); slices.Contains(rec.Flags, FlagManyUniqueNames) {
			t.Errorf("another domain was flagged: %v", rec.Flags)
		}
	}
	if n := len(up.queries()); n != limit {
		t.Errorf("upstream queries: got %d, want %d (only names under the threshold)", n, limit)
	}
}

func TestAttackSeenNamesBounded(t *testing.T) {
	// A flood of distinct names over many domains must not grow the per-sandbox
	// memory without bound (every query is counted, rate-limited or not).
	c, err := Config{Upstreams: []string{"127.0.0.1:53"}}.compile()
	if err != nil {
		t.Fatal(err)
	}
	s := newSignals(c)
	now := time.Now()
	for i := range 3 * maxSeenNames {
		s.unique(fmt.Sprintf("n%d.d%d.example", i, i%(2*maxTrackedDomains)), now)
	}
	s.mu.RLock()
	seen, domains := len(s.seen), len(s.domains)
	s.mu.RUnlock()
	if seen > maxSeenNames || domains > maxTrackedDomains {
		t.Errorf("tracked %d names over %d domains, want at most %d and %d", seen, domains, maxSeenNames, maxTrackedDomains)
	}
	if !s.unique("brand-new.other.example", now) {
		t.Errorf("a new name after the memo is full: not flagged")
	}
}

func TestAttackTCPPipelining(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{RateLimit: 0.001, RateBurst: 20}, up, policytest.AllowUnder("pypi.org"))
	c, err := net.Dial("tcp", e.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// 40 queries written back to back before reading anything: every other one
	// for a denied name. The first 20 are within the burst.
	var out []byte
	const n = 40
	for i := range n {
		m := new(dns.Msg)
		m.Id = uint16(1000 + i)
		name := "pypi.org."
		if i%2 == 1 {
			name = fmt.Sprintf("leak%d.example.com.", i)
		}
		m.SetQuestion(name, dns.TypeA)
		m.Id = uint16(1000 + i)
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, binary.BigEndian.AppendUint16(nil, uint16(len(b)))...)
		out = append(out, b...)
	}
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i := range n {
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		b := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		r := new(dns.Msg)
		if err := r.Unpack(b); err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		if r.Id != uint16(1000+i) {
			t.Errorf("reply %d: id %d, want %d (in order)", i, r.Id, 1000+i)
		}
		wantOK := i%2 == 0 && i < 20
		if wantOK != (r.Rcode == dns.RcodeSuccess && len(r.Answer) == 2) {
			t.Errorf("reply %d: got %s %v, want answered %v", i, dns.RcodeToString[r.Rcode], r.Answer, wantOK)
		}
	}
	for _, q := range up.queries() {
		if q.name != "pypi.org." {
			t.Errorf("upstream saw %q from a pipelined connection", q.name)
		}
	}
	if got := len(e.aud.Records()); got != n {
		t.Errorf("audit records: got %d, want %d (one per pipelined query)", got, n)
	}
}

func TestAttackTCPLengthPrefix(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
	q := rawQuery(77, dns.TypeA, "leak", "example", "com")
	tests := []struct {
		name string
		send []byte
	}{
		// Claims 65535 bytes, sends a query and stalls: never parsed, closed
		// on the read timeout.
		{"length larger than the message", append([]byte{0xff, 0xff}, q...)},
		// Zero-length message, then a valid one: the connection closes first.
		{"zero length", append([]byte{0, 0}, append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)...)},
		// A length shorter than a header.
		{"length shorter than a header", append([]byte{0, 5}, q...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", e.tcp)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(tt.send); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(15 * time.Second))
			b, err := io.ReadAll(c)
			// The server closes the connection (EOF) without answering a
			// query it never fully read; a reset is also a close.
			if err != nil && !isReset(err) {
				t.Fatalf("read: %v, want the server to close the connection", err)
			}
			if len(b) > 2 {
				r := new(dns.Msg)
				if r.Unpack(b[2:]) == nil && len(r.Answer) > 0 {
					t.Errorf("got answers %v", r.Answer)
				}
			}
		})
	}
	if n := up.count("leak.example.com"); n != 0 {
		t.Errorf("upstream saw the name %d times", n)
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

func TestAttackTCPSlowloris(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{MaxTCPConns: 2}, up, policytest.AllowUnder("pypi.org"))
	// Two connections that send one byte of a length prefix and stall hold
	// both slots.
	var idle []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", e.tcp)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte{0}); err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	time.Sleep(200 * time.Millisecond) // let the server accept both
	// A third connection is not served while they hold the slots ...
	c, err := net.Dial("tcp", e.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := new(dns.Msg)
	m.SetQuestion("pypi.org.", dns.TypeA)
	b, _ := m.Pack()
	if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err == nil {
		t.Fatalf("third connection served while the cap (2) was held by stalled ones")
	}
	// ... and is once the read timeout drops the stalled ones.
	for _, ic := range idle {
		ic.SetReadDeadline(time.Now().Add(15 * time.Second))
		if _, err := io.ReadAll(ic); err != nil && !isReset(err) {
			t.Errorf("stalled connection: %v, want closed by the server", err)
		}
	}
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.ReadFull(c, l[:]); err != nil {
		t.Fatalf("third connection after the stalled ones were dropped: %v", err)
	}
	reply := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, reply); err != nil {
		t.Fatal(err)
	}
	r := new(dns.Msg)
	if err := r.Unpack(reply); err != nil || len(r.Answer) != 2 {
		t.Errorf("third connection: got %v, %v", r.Answer, err)
	}
}

func TestAttackNonOPTAdditionalRecord(t *testing.T) {
	// The one additional record a query may carry is meant for OPT; a sandbox
	// puts data (or a TSIG, or a fake glue record) there instead.
	up := startRawUpstream(t, aAnswer("151.101.0.223"))
	e := newEnv(t, Config{Upstreams: []string{up.addr}}, nil, policytest.AllowUnder("pypi.org"))
	txt, _ := dns.NewRR(`leak.example.com. 300 IN TXT "secret-data-in-additional"`)
	glue, _ := dns.NewRR("pypi.org. 300 IN A 6.6.6.6")
	tsig := &dns.TSIG{Hdr: dns.RR_Header{Name: "key.", Rrtype: dns.TypeTSIG, Class: dns.ClassANY}, Algorithm: dns.HmacSHA256, TimeSigned: 1700000000, Fudge: 300, MAC: "", OrigId: 42}
	for i, rr := range []dns.RR{txt, glue, tsig} {
		extra := rr.String()
		m := new(dns.Msg)
		m.SetQuestion(fmt.Sprintf("a%d.pypi.org.", i), dns.TypeA)
		m.Extra = []dns.RR{rr}
		b, err := m.Pack()
		if err != nil {
			t.Fatalf("pack %s: %v", extra, err)
		}
		got := e.rawUDP(t, b, 2*time.Second)
		r := new(dns.Msg)
		if got == nil || r.Unpack(got) != nil {
			t.Fatalf("%s: no reply", extra)
		}
		for _, a := range r.Answer {
			if strings.Contains(a.String(), "6.6.6.6") {
				t.Errorf("answer took the sandbox's own additional record: %v", r.Answer)
			}
		}
	}
	var names []string
	for i := range 3 {
		names = append(names, fmt.Sprintf("a%d.pypi.org", i))
	}
	got := up.queries()
	for _, q := range got {
		if bytes.Contains(q, []byte("secret-data")) || bytes.Contains(q, []byte{6, 6, 6, 6}) || bytes.Contains(q, []byte("hmac-sha256")) {
			t.Errorf("upstream got the sandbox's additional record: %x", q)
		}
	}
	checkCanonical(t, up, dns.TypeA, names...)
}
