package dnsfilter

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy/policytest"
)

// readReply reads one reply from c, failing after a bound (a hang detector,
// not a timing assertion).
func readReply(t *testing.T, c net.Conn) *dns.Msg {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("reading a reply: %v", err)
	}
	r := new(dns.Msg)
	if err := r.Unpack(buf[:n]); err != nil {
		t.Fatalf("reply does not unpack: %v", err)
	}
	return r
}

// TestUDPBatchNoHeadOfLine: a batch holding a query that waits on a slow
// upstream and a cached one answers the cached one while the upstream still
// holds the other (it would never be answered first if the batch served its
// datagrams one after another), and then the slow one; each gets one record.
func TestUDPBatchNoHeadOfLine(t *testing.T) {
	release := make(chan struct{})
	zone := records(testZone)
	up := startUpstream(t, func(network string, req *dns.Msg) *dns.Msg {
		if req.Question[0].Name == "files.pypi.org." {
			<-release
		}
		return zone(network, req)
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	e := newEnv(t, Config{Timeout: 20 * time.Second}, up, policytest.AllowUnder("pypi.org"))
	if r := e.ask(t, "udp", "pypi.org.", dns.TypeA); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("warming the cache: got rcode %s", dns.RcodeToString[r.Rcode])
	}
	// A batch server of the sandbox's own on a socket of the test's, so the
	// two datagrams are read by one recvmmsg.
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	u := &udpServer{s: sandboxOf(t, e.f, "sb-1"), pc: pc, uc: pc, done: make(chan struct{})}
	rc, err := pc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i, name := range []string{"files.pypi.org.", "pypi.org."} {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		m.Id = uint16(i + 1)
		p, _ := m.Pack()
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	b, n, err := u.recvBatch(rc, nil)
	if err != nil || n != 2 {
		t.Fatalf("recv: got %d datagrams (%v), want 2 in one batch", n, err)
	}
	served := make(chan struct{})
	go func() {
		u.serveBatch(rc, b, n)
		putBatch(b)
		close(served)
	}()
	r := readReply(t, c)
	if r.Id != 2 || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 {
		t.Fatalf("first reply: got id %d rcode %s %d answers, want the cached pypi.org (id 2, NOERROR, 2 answers)", r.Id, dns.RcodeToString[r.Rcode], len(r.Answer))
	}
	if got := e.last(t, "pypi.org"); got.Upstream != "cache" {
		t.Errorf("cached record: got upstream %q, want cache", got.Upstream)
	}
	if _, ok := e.aud.Last(func(r audit.Record) bool { return r.QName == "files.pypi.org" }); ok {
		t.Fatal("the slow query was audited before its upstream answered")
	}
	close(release)
	r = readReply(t, c)
	if r.Id != 1 || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("second reply: got id %d rcode %s %d answers, want files.pypi.org (id 1, NOERROR, 1 answer)", r.Id, dns.RcodeToString[r.Rcode], len(r.Answer))
	}
	<-served
	for _, name := range []string{"pypi.org", "files.pypi.org"} {
		var count int
		for _, rec := range e.aud.Records() {
			if rec.QName == name {
				count++
			}
		}
		if want := map[string]int{"pypi.org": 2, "files.pypi.org": 1}[name]; count != want {
			t.Errorf("%s: got %d records, want %d", name, count, want)
		}
	}
	if got := e.last(t, "files.pypi.org"); got.Decision != audit.DecisionAllow || got.Upstream == "cache" || got.Upstream == "" {
		t.Errorf("slow record: got decision %s upstream %q, want allow from the upstream", got.Decision, got.Upstream)
	}
}

// TestUDPQueryTooLarge: a query longer than a batch slot is answered FORMERR
// and audited as malformed, never forwarded.
func TestUDPQueryTooLarge(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
	m := new(dns.Msg)
	m.SetQuestion("pypi.org.", dns.TypeA)
	opt := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
	opt.SetUDPSize(4096)
	opt.Option = append(opt.Option, &dns.EDNS0_PADDING{Padding: make([]byte, udpSlotSize)})
	m.Extra = append(m.Extra, opt)
	p, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	raw := e.rawUDP(t, p, 5*time.Second)
	r := new(dns.Msg)
	if raw == nil || r.Unpack(raw) != nil || r.Rcode != dns.RcodeFormatError || r.Id != m.Id {
		t.Fatalf("got reply %v (%d bytes), want FORMERR for id %d", r, len(raw), m.Id)
	}
	rec, ok := e.aud.Last(func(r audit.Record) bool { return strings.Contains(r.Error, "query larger than") })
	if !ok || rec.Decision != audit.DecisionDeny || rec.Reasons[0].ID != ReasonMalformed {
		t.Fatalf("got record %+v (found %v), want a malformed denial", rec, ok)
	}
	if n := up.count("pypi.org."); n != 0 {
		t.Errorf("upstream saw %d queries, want 0", n)
	}
}
