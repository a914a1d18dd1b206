package dnsfilter

import (
	"encoding/binary"
	"strings"

	"github.com/miekg/dns"
)

// request is what the query path reads of a query: the header bits that
// shape the reply, the question as asked and whether it had EDNS. A query
// served over TCP, or any datagram out of the ordinary, comes from a
// dns.Msg miekg/dns unpacked (requestOf); a plain datagram is read straight
// from its wire form (parseRequest), which allocates nothing.
type request struct {
	id        uint16
	opcode    int
	response  bool
	rd, cd    bool
	questions int          // how many questions the query had
	q         dns.Question // the first, Name in presentation form as asked; zero without one
	edns      bool         // the query had an OPT record
	udpSize   uint16       // its advertised UDP payload size (edns only)
}

// requestOf is the request of an unpacked query.
func requestOf(m *dns.Msg) request {
	r := request{
		id: m.Id, opcode: m.Opcode, response: m.Response,
		rd: m.RecursionDesired, cd: m.CheckingDisabled, questions: len(m.Question),
	}
	if len(m.Question) > 0 {
		r.q = m.Question[0]
	}
	if opt := m.IsEdns0(); opt != nil {
		r.edns, r.udpSize = true, opt.UDPSize()
	}
	return r
}

// parseRequest reads a plain query from its wire form without unpacking it:
// opcode QUERY, one question whose name is labels of letters, digits, '-'
// and '_' (nothing miekg/dns would escape, no compression pointer), no
// answer or authority records, and at most one additional record, an OPT of
// version 0 without options; nothing after them. For anything else it
// reports false and the caller unpacks the message as miekg/dns does, so
// the fast path decides nothing the full one would decide differently. The
// question's name is the interned string names keeps for its wire form.
func parseRequest(m []byte, names *nameCache) (request, bool) {
	if len(m) < 12 {
		return request{}, false
	}
	bits := binary.BigEndian.Uint16(m[2:])
	const qr, opcodeMask, rd, cd = 1 << 15, 0xF << 11, 1 << 8, 1 << 4
	if bits&(qr|opcodeMask) != 0 ||
		binary.BigEndian.Uint16(m[4:]) != 1 || binary.BigEndian.Uint16(m[6:]) != 0 ||
		binary.BigEndian.Uint16(m[8:]) != 0 {
		return request{}, false
	}
	ar := binary.BigEndian.Uint16(m[10:])
	if ar > 1 {
		return request{}, false
	}
	off := 12
	for {
		if off >= len(m) {
			return request{}, false
		}
		n := int(m[off])
		if n == 0 {
			break
		}
		if n > 63 || off+1+n >= len(m) {
			return request{}, false // a pointer, a reserved label type, or cut short
		}
		for _, c := range m[off+1 : off+1+n] {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c >= 'A' && c <= 'Z') {
				return request{}, false
			}
		}
		off += 1 + n
	}
	wire := m[12 : off+1]
	if len(wire) == 1 || len(wire) > 255 || off+5 > len(m) {
		return request{}, false // the root, a name too long, or no type and class
	}
	r := request{
		id: binary.BigEndian.Uint16(m), rd: bits&rd != 0, cd: bits&cd != 0, questions: 1,
		q: dns.Question{Qtype: binary.BigEndian.Uint16(m[off+1:]), Qclass: binary.BigEndian.Uint16(m[off+3:])},
	}
	off += 5
	if ar == 1 {
		// An OPT: root owner, type 41, class the UDP size, TTL extended
		// rcode 0, version 0 and flags, no data.
		if off+11 != len(m) || m[off] != 0 || binary.BigEndian.Uint16(m[off+1:]) != dns.TypeOPT ||
			m[off+5] != 0 || m[off+6] != 0 || binary.BigEndian.Uint16(m[off+9:]) != 0 {
			return request{}, false
		}
		r.edns, r.udpSize = true, binary.BigEndian.Uint16(m[off+3:])
		off += 11
	}
	if off != len(m) {
		return request{}, false
	}
	r.q.Name = names.wireName(wire)
	return r, true
}

// wireName returns the presentation form of a wire-form name parseRequest
// checked (plain labels, so no escaping), interned: a name asked again
// costs a map lookup and no allocation.
func (c *nameCache) wireName(wire []byte) string {
	c.mu.RLock()
	name, ok := c.wire[string(wire)]
	c.mu.RUnlock()
	if ok {
		return name
	}
	var b strings.Builder
	b.Grow(len(wire))
	for off := 0; wire[off] != 0; off += 1 + int(wire[off]) {
		b.Write(wire[off+1 : off+1+int(wire[off])])
		b.WriteByte('.')
	}
	name = b.String()
	c.mu.Lock()
	if len(c.wire) >= c.max {
		clear(c.wire)
	}
	c.wire[string(wire)] = name
	c.mu.Unlock()
	return name
}
