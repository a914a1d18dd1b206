package dnsfilter

import (
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy/policytest"
)

// header builds a 12-byte DNS header.
func header(id, flags, qd, an, ns, ar uint16) []byte {
	b := make([]byte, 12)
	for i, v := range []uint16{id, flags, qd, an, ns, ar} {
		binary.BigEndian.PutUint16(b[2*i:], v)
	}
	return b
}

// question is a wire question for the raw labels given (no escaping).
func question(qtype, class uint16, labels ...string) []byte {
	var b []byte
	for _, l := range labels {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	b = append(b, 0)
	return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(b, qtype), class)
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func TestMalformedPackets(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org", "example.com"))
	twoQ := new(dns.Msg)
	twoQ.Id = 7
	twoQ.Question = []dns.Question{{Name: "pypi.org.", Qtype: dns.TypeA, Qclass: dns.ClassINET}, {Name: "example.com.", Qtype: dns.TypeA, Qclass: dns.ClassINET}}
	twoQBytes, err := twoQ.Pack()
	if err != nil {
		t.Fatal(err)
	}
	const rd = 0x0100
	const noReply = -1
	tests := []struct {
		name  string
		pkt   []byte
		rcode int // noReply: dropped
	}{
		{"zero questions", header(1, rd, 0, 0, 0, 0), dns.RcodeFormatError},
		{"two questions", twoQBytes, dns.RcodeFormatError},
		{"question count lies", cat(header(2, rd, 2, 0, 0, 0), question(dns.TypeA, dns.ClassINET, "pypi", "org")), dns.RcodeFormatError},
		{"answer section in a query", cat(header(3, rd, 1, 1, 0, 0), question(dns.TypeA, dns.ClassINET, "pypi", "org")), dns.RcodeFormatError},
		{"bad class zero", cat(header(4, rd, 1, 0, 0, 0), question(dns.TypeA, 0, "pypi", "org")), dns.RcodeFormatError},
		{"bad class any", cat(header(5, rd, 1, 0, 0, 0), question(dns.TypeA, dns.ClassANY, "pypi", "org")), dns.RcodeFormatError},
		{"chaos class", cat(header(6, rd, 1, 0, 0, 0), question(dns.TypeTXT, dns.ClassCHAOS, "version", "bind")), dns.RcodeRefused},
		{"compression loop", cat(header(8, rd, 1, 0, 0, 0), []byte{0xc0, 12, 0, 1, 0, 1}), dns.RcodeFormatError},
		{"compression pointer forward", cat(header(9, rd, 1, 0, 0, 0), []byte{0xc0, 40, 0, 1, 0, 1}), dns.RcodeFormatError},
		{"truncated question", cat(header(10, rd, 1, 0, 0, 0), []byte{4, 'p', 'y'}), dns.RcodeFormatError},
		{"oversize", cat(header(11, rd, 1, 0, 0, 0), []byte(strings.Repeat("\x3fa", 2000))), dns.RcodeFormatError},
		{"escaped dot in label", cat(header(12, rd, 1, 0, 0, 0), question(dns.TypeA, dns.ClassINET, "pypi.org", "org")), dns.RcodeFormatError},
		{"nul in label", cat(header(13, rd, 1, 0, 0, 0), question(dns.TypeA, dns.ClassINET, "py\x00pi", "org")), dns.RcodeFormatError},
		{"space in label", cat(header(14, rd, 1, 0, 0, 0), question(dns.TypeA, dns.ClassINET, "py pi", "org")), dns.RcodeFormatError},
		{"underscore label", cat(header(15, rd, 1, 0, 0, 0), question(dns.TypeA, dns.ClassINET, "_x", "pypi", "org")), dns.RcodeRefused},
		{"root name", cat(header(16, rd, 1, 0, 0, 0), question(dns.TypeA, dns.ClassINET)), dns.RcodeRefused},
		{"ip literal name", cat(header(17, rd, 1, 0, 0, 0), question(dns.TypeA, dns.ClassINET, "0x7f", "1")), dns.RcodeNameError},
		{"opcode update", cat(header(18, 5<<11, 1, 0, 0, 0), question(dns.TypeA, dns.ClassINET, "pypi", "org")), dns.RcodeNotImplemented},
		{"opcode notify", cat(header(19, 4<<11, 1, 0, 0, 0), question(dns.TypeSOA, dns.ClassINET, "pypi", "org")), dns.RcodeNotImplemented},
		{"short garbage", []byte{0xde, 0xad, 0xbe, 0xef}, noReply},
		{"empty", []byte{}, noReply},
		{"response bit", cat(header(20, 0x8000, 1, 0, 0, 0), question(dns.TypeA, dns.ClassINET, "pypi", "org")), noReply},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wait := 2 * time.Second
			if tt.rcode == noReply {
				wait = 200 * time.Millisecond
			}
			got := e.rawUDP(t, tt.pkt, wait)
			if tt.rcode == noReply {
				if got != nil {
					t.Fatalf("got a %d-byte reply, want none", len(got))
				}
				return
			}
			if got == nil {
				t.Fatalf("got no reply, want %s", dns.RcodeToString[tt.rcode])
			}
			if len(got) < 12 {
				t.Fatalf("reply too short: %x", got)
			}
			if id := binary.BigEndian.Uint16(got); id != binary.BigEndian.Uint16(tt.pkt) {
				t.Errorf("reply id: got %d, want %d", id, binary.BigEndian.Uint16(tt.pkt))
			}
			if rc := int(got[3] & 0xf); rc != tt.rcode {
				t.Errorf("rcode: got %s, want %s", dns.RcodeToString[rc], dns.RcodeToString[tt.rcode])
			}
			if an := binary.BigEndian.Uint16(got[6:]); an != 0 {
				t.Errorf("answers: got %d, want 0", an)
			}
		})
	}
	if q := up.queries(); len(q) != 0 {
		t.Errorf("upstream saw %v from malformed packets, want nothing", q)
	}
	// Every packet that got a reply has an audit record; the server still works.
	if r := e.ask(t, "udp", "pypi.org.", dns.TypeA); len(r.Answer) != 2 {
		t.Errorf("after malformed packets: got %v", r.Answer)
	}
	malformed := 0
	for _, rec := range e.aud.Records() {
		if rec.Decision == audit.DecisionDeny && rec.QName != "pypi.org" {
			malformed++
		}
	}
	if malformed < len(tests)-3 {
		t.Errorf("audit records for malformed packets: got %d, want at least %d", malformed, len(tests)-3)
	}
}

// TestOversizeTCP sends a length-prefixed 60 KB garbage message over TCP.
func TestOversizeTCP(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
	c, err := net.Dial("tcp", e.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := cat(header(21, 0x0100, 1, 0, 0, 0), []byte(strings.Repeat("\x01a", 30000)))
	msg := binary.BigEndian.AppendUint16(nil, uint16(len(body)))
	if _, err := c.Write(append(msg, body...)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 2+65535)
	n, err := c.Read(buf)
	if err == nil && n >= 6 {
		if rc := int(buf[2+3] & 0xf); rc != dns.RcodeFormatError {
			t.Errorf("rcode: got %s, want FORMERR", dns.RcodeToString[rc])
		}
	}
	if len(up.queries()) != 0 {
		t.Errorf("upstream saw %v", up.queries())
	}
}
