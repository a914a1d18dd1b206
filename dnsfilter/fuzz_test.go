package dnsfilter

import (
	"encoding/binary"
	"net"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
)

// recorder is a dns.ResponseWriter that keeps the reply.
type recorder struct {
	reply []byte
	tcp   bool
}

func (r *recorder) LocalAddr() net.Addr {
	if r.tcp {
		return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
	}
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
}
func (r *recorder) RemoteAddr() net.Addr { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353} }
func (r *recorder) WriteMsg(m *dns.Msg) error {
	b, err := m.Pack()
	if err != nil {
		return err
	}
	r.reply = b
	return nil
}
func (r *recorder) Write(b []byte) (int, error) {
	r.reply = append([]byte(nil), b...)
	return len(b), nil
}
func (r *recorder) Close() error        { return nil }
func (r *recorder) TsigStatus() error   { return nil }
func (r *recorder) TsigTimersOnly(bool) {}
func (r *recorder) Hijack()             {}

// serveRaw feeds one raw packet through the same stages miekg/dns's server runs
// before the handler (header read, our accept func, unpack, FORMERR on failure)
// and then the handler. It returns the reply bytes, nil when the packet is dropped.
func serveRaw(s *sandboxServer, raw []byte, tcp bool) []byte {
	if len(raw) < 12 {
		return nil
	}
	dh := dns.Header{
		Id:      binary.BigEndian.Uint16(raw[0:]),
		Bits:    binary.BigEndian.Uint16(raw[2:]),
		Qdcount: binary.BigEndian.Uint16(raw[4:]),
		Ancount: binary.BigEndian.Uint16(raw[6:]),
		Nscount: binary.BigEndian.Uint16(raw[8:]),
		Arcount: binary.BigEndian.Uint16(raw[10:]),
	}
	w := &recorder{tcp: tcp}
	req := new(dns.Msg)
	action := s.accept(dh)
	if action == dns.MsgAccept {
		if err := req.Unpack(raw); err != nil {
			s.invalid(raw, err)
			action = dns.MsgReject
		}
	}
	switch action {
	case dns.MsgIgnore:
		return nil
	case dns.MsgReject, dns.MsgRejectNotImplemented:
		m := new(dns.Msg)
		m.Id = dh.Id
		m.Response = true
		m.Rcode = dns.RcodeFormatError
		if action == dns.MsgRejectNotImplemented {
			m.Rcode = dns.RcodeNotImplemented
		}
		_ = w.WriteMsg(m)
		return w.reply
	}
	s.ServeDNS(w, req)
	return w.reply
}

func FuzzServeDNS(f *testing.F) {
	up := startUpstream(f, records(testZone))
	cfg := Config{Upstreams: []string{up.addr}, RateLimit: 1e9, RateBurst: 1 << 30}
	aud := &audittest.Log{}
	fl, err := New(cfg, policytest.AllowUnder("pypi.org"), aud, nil)
	if err != nil {
		f.Fatal(err)
	}
	s := newSandboxServer(fl, policy.Sandbox{ID: "sb-fuzz"}, nil)
	for _, name := range []string{"pypi.org.", "evil.example.com.", "www.pypi.org.", "rebind.pypi.org."} {
		for _, qt := range []uint16{dns.TypeA, dns.TypeTXT, dns.TypeAAAA, dns.TypePTR} {
			m := new(dns.Msg)
			m.SetQuestion(name, qt)
			m.SetEdns0(1232, false)
			b, _ := m.Pack()
			f.Add(b, false)
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte, tcp bool) {
		before := up.count("evil.example.com")
		reply := serveRaw(s, raw, tcp)
		if reply == nil {
			return
		}
		m := new(dns.Msg)
		if err := m.Unpack(reply); err != nil {
			t.Fatalf("reply does not unpack: %v", err)
		}
		if !m.Response || m.Id != binary.BigEndian.Uint16(raw) {
			t.Fatalf("reply: response %v id %d, want a response with id %d", m.Response, m.Id, binary.BigEndian.Uint16(raw))
		}
		if !tcp && len(reply) > DefaultEDNSSize {
			t.Fatalf("udp reply of %d bytes", len(reply))
		}
		for _, rr := range m.Answer {
			owner := strings.ToLower(rr.Header().Name)
			if !strings.HasSuffix(owner, "pypi.org.") && rr.Header().Rrtype != dns.TypePTR {
				t.Fatalf("answer for a name policy does not allow: %v", rr)
			}
			if ip, ok := rrAddr(rr); ok && fl.res.guard.Check(ip) != nil {
				t.Fatalf("answer into a guarded range: %v", rr)
			}
		}
		if up.count("evil.example.com") != before {
			t.Fatalf("a denied name reached the upstream")
		}
	})
}
