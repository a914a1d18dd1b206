package dnsfilter

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy"
)

// query packs a question the way a stub resolver sends it, after edit.
func packQuery(t *testing.T, name string, qtype uint16, edit func(*dns.Msg)) []byte {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.Id = 0x5a17
	if edit != nil {
		edit(m)
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParseRequestMatchesFullPath: for every plain query parseRequest takes,
// the reply written from it is byte for byte the reply written from the
// query miekg/dns unpacked (ID, flags, question as asked, answer TTL counted
// down, OPT and extended error), and so is its audit record (but for its id
// and duration); every query out of the ordinary is left to the full path.
func TestParseRequestMatchesFullPath(t *testing.T) {
	up := startUpstream(t, records(benchZone))
	eng, err := policy.New(policy.Config{Presets: []string{policy.PresetNone}, AllowHosts: []string{"pypi.org"}, EvalTimeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	aud := &audittest.Log{}
	f, err := New(Config{Upstreams: []string{up.addr}, AllowCIDRs: []string{"198.18.0.0/15"}, Timeout: 2 * time.Second}, eng, aud, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := newSandboxServer(f, policy.Sandbox{ID: "sb-1"}, nil)
	// Fill the answer cache, then age its entry by 7 s: both paths must
	// send the TTL counted down.
	s.ServeDNS(&recorder{}, (&dns.Msg{}).SetQuestion("pypi.org.", dns.TypeA))
	a := f.res.cache.get(cacheKey{"pypi.org", dns.TypeA})
	if a == nil {
		t.Fatal("pypi.org A not cached")
	}
	a.expires = a.expires.Add(-7 * time.Second)
	a.rendered.Store(nil)

	serve := func(r request) ([]byte, audit.Record) {
		w := &recorder{}
		n := len(aud.Records())
		s.serveDNS(w, &r, false)
		recs := aud.Records()
		if len(recs) != n+1 {
			t.Fatalf("%d audit records for one query, want 1", len(recs)-n)
		}
		rec := recs[n]
		rec.ID, rec.DurationMS, rec.TS = "", 0, time.Time{}
		return w.reply, rec
	}
	edns := func(size uint16, do bool) func(*dns.Msg) {
		return func(m *dns.Msg) { m.SetEdns0(size, do) }
	}
	for _, tc := range []struct {
		name, qname string
		qtype       uint16
		edit        func(*dns.Msg)
		rcode       int
		answers     int
	}{
		{"allowed", "pypi.org.", dns.TypeA, nil, dns.RcodeSuccess, 1},
		{"allowed mixed case", "PyPI.Org.", dns.TypeA, nil, dns.RcodeSuccess, 1},
		{"allowed no RD, CD", "pypi.org.", dns.TypeA, func(m *dns.Msg) { m.RecursionDesired, m.CheckingDisabled = false, true }, dns.RcodeSuccess, 1},
		{"allowed EDNS", "pypi.org.", dns.TypeA, edns(1232, false), dns.RcodeSuccess, 1},
		{"allowed EDNS DO, small size", "pypi.org.", dns.TypeA, edns(100, true), dns.RcodeSuccess, 1},
		{"denied", "evil.example.com.", dns.TypeA, nil, dns.RcodeNameError, 0},
		{"denied EDNS (extended error)", "evil.example.com.", dns.TypeA, edns(1232, false), dns.RcodeNameError, 0},
		{"AAAA without IPv6", "pypi.org.", dns.TypeAAAA, nil, dns.RcodeSuccess, 0},
		{"TXT refused", "pypi.org.", dns.TypeTXT, edns(1232, false), dns.RcodeRefused, 0},
		{"IP literal", "1.2.3.4.", dns.TypeA, nil, dns.RcodeNameError, 0},
		{"class CHAOS", "version.bind.", dns.TypeTXT, func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS }, dns.RcodeRefused, 0},
		{"underscore label (not a host name)", "_http._tcp.pypi.org.", dns.TypeA, nil, dns.RcodeRefused, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkt := packQuery(t, tc.qname, tc.qtype, tc.edit)
			fast, ok := parseRequest(pkt, s.names)
			if !ok {
				t.Fatalf("parseRequest did not take a plain query %x", pkt)
			}
			var m dns.Msg
			if err := m.Unpack(pkt); err != nil {
				t.Fatal(err)
			}
			if full := requestOf(&m); fast != full {
				t.Fatalf("got request %+v, want %+v (unpacked)", fast, full)
			}
			gotFast, recFast := serve(fast)
			gotFull, recFull := serve(requestOf(&m))
			if !bytes.Equal(gotFast, gotFull) {
				t.Fatalf("fast path reply\n%x\nwant (full path)\n%x", gotFast, gotFull)
			}
			if !equalRecords(recFast, recFull) {
				t.Fatalf("fast path record %+v, want %+v", recFast, recFull)
			}
			var r dns.Msg
			if err := r.Unpack(gotFast); err != nil {
				t.Fatal(err)
			}
			if r.Id != 0x5a17 || r.Rcode != tc.rcode || r.RecursionDesired != m.RecursionDesired || r.CheckingDisabled != m.CheckingDisabled ||
				r.Question[0] != m.Question[0] || (r.IsEdns0() != nil) != (m.IsEdns0() != nil) {
				t.Fatalf("reply %v does not answer %v with rcode %s", &r, &m, dns.RcodeToString[tc.rcode])
			}
			if tc.answers >= 0 && len(r.Answer) != tc.answers {
				t.Fatalf("got %d answers, want %d", len(r.Answer), tc.answers)
			}
			if tc.answers > 0 {
				if ttl := r.Answer[0].Header().Ttl; ttl != 300-7 {
					t.Fatalf("got TTL %d, want %d (300 counted down 7 s)", ttl, 300-7)
				}
			}
		})
	}

	// Queries the fast path leaves to miekg/dns's unpack.
	withCookie := func(m *dns.Msg) {
		m.SetEdns0(1232, false)
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"})
	}
	plain := packQuery(t, "pypi.org.", dns.TypeA, nil)
	for _, tc := range []struct {
		name string
		pkt  []byte
	}{
		{"EDNS option", packQuery(t, "pypi.org.", dns.TypeA, withCookie)},
		{"EDNS version 1", packQuery(t, "pypi.org.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, false); m.IsEdns0().SetVersion(1) })},
		{"escaped byte", packQuery(t, `py\.pi.org.`, dns.TypeA, nil)},
		{"star label", packQuery(t, "*.pypi.org.", dns.TypeA, nil)},
		{"root", packQuery(t, ".", dns.TypeA, nil)},
		{"trailing byte", append(bytes.Clone(plain), 0)},
		{"cut in the question", plain[:len(plain)-2]},
		{"compression pointer", append(bytes.Clone(plain[:12]), 0xc0, 12, 0, 1, 0, 1)},
		{"two questions", func() []byte { b := bytes.Clone(plain); binary.BigEndian.PutUint16(b[4:], 2); return b }()},
		{"opcode STATUS", func() []byte { b := bytes.Clone(plain); b[2] |= dns.OpcodeStatus << 3; return b }()},
		{"response bit", func() []byte { b := bytes.Clone(plain); b[2] |= 0x80; return b }()},
		{"additional A record", packQuery(t, "pypi.org.", dns.TypeA, func(m *dns.Msg) {
			rr, _ := dns.NewRR("x. 1 IN A 192.0.2.1")
			m.Extra = append(m.Extra, rr)
		})},
		{"label of 64", func() []byte {
			b := append(bytes.Clone(plain[:12]), 64)
			b = append(b, bytes.Repeat([]byte("a"), 64)...)
			return append(b, 0, 0, 1, 0, 1)
		}()},
	} {
		t.Run("full path/"+tc.name, func(t *testing.T) {
			if r, ok := parseRequest(tc.pkt, s.names); ok {
				t.Fatalf("parseRequest took %x as %+v, want it left to the full path", tc.pkt, r)
			}
		})
	}
}

// equalRecords compares two records by their fields that can be compared.
func equalRecords(a, b audit.Record) bool {
	return a.Decision == b.Decision && a.Host == b.Host && a.QName == b.QName && a.QType == b.QType &&
		a.RCode == b.RCode && a.Upstream == b.Upstream && a.Protocol == b.Protocol && a.PolicyRev == b.PolicyRev &&
		a.Error == b.Error && len(a.Answers) == len(b.Answers) && len(a.Reasons) == len(b.Reasons) &&
		len(a.Flags) == len(b.Flags) && (len(a.Answers) == 0 || a.Answers[0] == b.Answers[0]) &&
		(len(a.Reasons) == 0 || a.Reasons[0] == b.Reasons[0])
}

// TestCachedAnswerDeniedAfterPolicyChange: a name whose answer is cached
// (and served on the fast path) is NXDOMAIN from the first query after a
// policy change that denies it, whether the change is a policy reload (a new
// revision) or the sandbox's own rules (UpdateSandbox), and the upstream is
// not asked again.
func TestCachedAnswerDeniedAfterPolicyChange(t *testing.T) {
	const allow = "package airlock.egress\n\nallow if input.destination.host == \"pypi.org\"\n"
	const deny = "package airlock.egress\n\nallow if false\n"
	allowList := func(t *testing.T, e *env, hosts ...string) {
		l, err := policy.NewAllowList(hosts)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.f.UpdateSandbox(policy.Sandbox{ID: "sb-1", Allow: l}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name          string
		file          string // the policy as served
		setup, change func(t *testing.T, e *env, file string, eng *policy.Engine)
	}{
		{name: "policy reload", file: allow, change: func(t *testing.T, e *env, file string, eng *policy.Engine) {
			if err := os.WriteFile(file, []byte(deny), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := eng.Reload(context.Background()); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "sandbox rules", file: deny, setup: func(t *testing.T, e *env, file string, eng *policy.Engine) {
			allowList(t, e, "pypi.org")
		}, change: func(t *testing.T, e *env, file string, eng *policy.Engine) {
			allowList(t, e, "other.example")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "policy.rego")
			if err := os.WriteFile(file, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			eng, err := policy.New(policy.Config{Dir: dir, Presets: []string{policy.PresetNone}, EvalTimeout: 10 * time.Second}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { eng.Close() })
			up := startUpstream(t, records(benchZone))
			e := newEnv(t, Config{AllowCIDRs: []string{"198.18.0.0/15"}, AuditRate: 1e6, AuditBurst: 1e6}, up, eng)
			if tc.setup != nil {
				tc.setup(t, e, file, eng)
			}
			pkt := packQuery(t, "pypi.org.", dns.TypeA, nil)
			if _, ok := parseRequest(pkt, newNameCache(1)); !ok {
				t.Fatal("the query is not one the fast path takes")
			}
			ask := func() *dns.Msg {
				b := e.rawUDP(t, pkt, 5*time.Second)
				var r dns.Msg
				if err := r.Unpack(b); err != nil {
					t.Fatalf("reply %x: %v", b, err)
				}
				return &r
			}
			for i := range 3 { // the first from the upstream, then from the cache
				if r := ask(); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
					t.Fatalf("query %d before the change: got %v, want the answer", i, r)
				}
			}
			if rec := e.last(t, "pypi.org"); rec.Upstream != "cache" || rec.Decision != audit.DecisionAllow {
				t.Fatalf("before the change: record %+v, want an allowed answer from the cache", rec)
			}
			asked := up.count("pypi.org.")
			tc.change(t, e, file, eng)
			for i := range 2 {
				if r := ask(); r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
					t.Fatalf("query %d after the change: got %v, want NXDOMAIN and no answer", i, r)
				}
			}
			if rec := e.last(t, "pypi.org"); rec.Decision != audit.DecisionDeny || rec.RCode != "NXDOMAIN" {
				t.Fatalf("after the change: record %+v, want a denial", rec)
			}
			if n := up.count("pypi.org."); n != asked {
				t.Fatalf("the upstream was asked %d more times for a denied name", n-asked)
			}
		})
	}
}

// FuzzParseRequest: whatever parseRequest takes, miekg/dns unpacks without
// error, passes accept's header checks, and gives the same request: the query
// path cannot tell which way a query was read.
func FuzzParseRequest(f *testing.F) {
	for _, name := range []string{"pypi.org.", "PyPI.org.", "a-b_c.example.", "1.2.3.4."} {
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeTXT} {
			for _, edns := range []bool{false, true} {
				m := new(dns.Msg)
				m.SetQuestion(name, qt)
				if edns {
					m.SetEdns0(1232, true)
				}
				b, err := m.Pack()
				if err != nil {
					f.Fatal(err)
				}
				f.Add(b)
			}
		}
	}
	names := newNameCache(64)
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, ok := parseRequest(raw, names)
		if !ok {
			return
		}
		var m dns.Msg
		if err := m.Unpack(raw); err != nil {
			t.Fatalf("parseRequest took %x, which does not unpack: %v", raw, err)
		}
		if len(m.Question) != 1 || len(m.Answer) != 0 || len(m.Ns) != 0 || len(m.Extra) > 1 || m.Opcode != dns.OpcodeQuery || m.Response {
			t.Fatalf("parseRequest took %x, which accept refuses: %v", raw, &m)
		}
		if want := requestOf(&m); r != want {
			t.Fatalf("parseRequest(%x) = %+v, want %+v (unpacked)", raw, r, want)
		}
		if strings.IndexByte(r.q.Name, '\\') >= 0 {
			t.Fatalf("parseRequest took an escaped name %q", r.q.Name)
		}
	})
}

// TestRcodeQtypeStrings: the switches give miekg/dns's names.
func TestRcodeQtypeStrings(t *testing.T) {
	for rc := range 24 {
		want, ok := dns.RcodeToString[rc]
		if !ok {
			want = "RCODE" + strconv.Itoa(rc)
		}
		if got := rcodeString(rc); got != want {
			t.Errorf("rcodeString(%d): got %q, want %q", rc, got, want)
		}
	}
	for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeHTTPS, dns.TypeCNAME, dns.TypePTR, dns.TypeTXT, dns.TypeSVCB, 65280} {
		want, ok := dns.TypeToString[qt]
		if !ok {
			want = "TYPE" + strconv.Itoa(int(qt))
		}
		if got := qtypeString(qt); got != want {
			t.Errorf("qtypeString(%d): got %q, want %q", qt, got, want)
		}
	}
}
