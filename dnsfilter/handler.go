package dnsfilter

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/oplog"
	"github.com/airlock-dev/airlock/policy"
)

// Reason ids dnsfilter puts on the audit record for its own (non-policy) verdicts,
// and the one it reads from policy.
const (
	// ReasonQTypeOptIn, on an allowed decision, lets a restricted query type
	// (TXT, MX, SRV, NULL, ...) through for that name (dnsfilter/DESIGN.md).
	ReasonQTypeOptIn  = "dns_qtype_optin"
	ReasonMalformed   = "dns_malformed"
	ReasonBadName     = "dns_bad_name"
	ReasonIPLiteral   = "dns_ip_literal"
	ReasonFlagBlocked = "dns_flag_blocked"
	ReasonQTypeRefuse = "dns_qtype_refused"
	ReasonUpstream    = "dns_upstream_failed"
	// ReasonAuditUnavailable: the audit log has failed, so nothing is forwarded.
	ReasonAuditUnavailable = "audit_unavailable"
)

// query is the per-query context: created once in ServeDNS, filled by each stage,
// read by the audit record.
type query struct {
	start    time.Time
	name     string // normalized, no trailing dot ("" until normalized)
	qtype    uint16
	proto    string
	flags    []string // nil in the common no-flag case: no allocation
	dec      *decided
	reasons  []audit.Reason // when set, wins over dec.Reasons
	answers  []audit.Answer
	upstream string
	errMsg   string
	ansWire  []byte           // the answer records already packed (cached answers), or nil
	noWait   bool             // stop at a lookup that would wait for an upstream (pending)
	pending  bool             // stopped there
	findings []policy.Finding // content inspection of the name (Config.ScanName)
}

// ServeDNS is the request path, in the order dnsfilter/DESIGN.md gives. It writes
// exactly one audit record and then exactly one reply.
func (s *sandboxServer) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	r := requestOf(req)
	s.serveDNS(w, &r, false)
}

// pendingQuery is a query serveDNS left waiting for an upstream (noWait):
// every stage up to the lookup ran; finish looks up, audits and replies.
type pendingQuery struct {
	q   query
	req request
}

// serveDNS is ServeDNS; with noWait, a query whose lookup would wait for an
// upstream stops there and is returned, nothing written or audited yet. The
// query lives on the stack unless it is returned.
func (s *sandboxServer) serveDNS(w dns.ResponseWriter, req *request, noWait bool) *pendingQuery {
	q := query{start: time.Now(), proto: "udp", noWait: noWait}
	if w.LocalAddr().Network() == "tcp" {
		q.proto = "tcp"
	}
	rcode, rrs := s.resolve(&q, req)
	if q.pending {
		return &pendingQuery{q: q, req: *req}
	}
	s.reply(w, req, &q, rcode, rrs)
	return nil
}

// finish completes a pending query on w: lookup (waiting for the upstream),
// audit, reply.
func (s *sandboxServer) finish(w dns.ResponseWriter, p *pendingQuery) {
	p.q.noWait, p.q.pending = false, false
	rcode, rrs := s.lookup(&p.q)
	s.reply(w, &p.req, &p.q, rcode, rrs)
}

// resolve runs every stage and returns the rcode and answer records for the reply.
func (s *sandboxServer) resolve(q *query, req *request) (int, []dns.RR) {
	if req.opcode != dns.OpcodeQuery || req.response {
		q.reasons, q.errMsg = reasonMalformed, "not a query"
		return dns.RcodeNotImplemented, nil
	}
	if req.questions != 1 {
		q.reasons, q.errMsg = reasonMalformed, "want exactly one question"
		return dns.RcodeFormatError, nil
	}
	qq := req.q
	q.qtype = qq.Qtype
	switch qq.Qclass {
	case dns.ClassINET:
	case dns.ClassCHAOS, dns.ClassHESIOD:
		q.reasons, q.errMsg = reasonBadName, "class "+dns.ClassToString[qq.Qclass]+" is not served"
		return dns.RcodeRefused, nil
	default:
		q.reasons, q.errMsg = reasonMalformed, "bad class "+dns.Class(qq.Qclass).String()
		return dns.RcodeFormatError, nil
	}
	if strings.IndexByte(qq.Name, '\\') >= 0 {
		// miekg/dns escapes dots inside labels and bytes outside printable ASCII:
		// no host name has them.
		q.errMsg = "escaped bytes in name " + qq.Name
		q.reasons = reasonBadName
		return dns.RcodeFormatError, nil
	}
	name, err := s.names.normalize(qq.Name)
	if err != nil {
		q.reasons, q.errMsg = reasonBadName, err.Error()
		return dns.RcodeRefused, nil
	}
	q.name = name
	if isIPLiteral(name) {
		// "1.2.3.4" (or "0x7f.1") asked as a name: no such name, never forwarded.
		q.reasons = reasonIPLiteral
		return dns.RcodeNameError, nil
	}

	now := q.start
	q.flags = s.sig.flags(nil, name, now)
	for _, fl := range q.flags {
		if s.f.cfg.block[fl] {
			q.reasons = []audit.Reason{{ID: ReasonFlagBlocked, Msg: "flag " + fl + " blocks by configuration"}}
			return dns.RcodeNameError, nil
		}
	}
	// A secret placeholder in a question is refused and flagged whatever
	// policy would say (the name check; nil without secrets).
	if check := s.f.cfg.NameCheck; check != nil {
		if reason, flag, refused := check(s.rules().sb, name); refused {
			q.reasons = []audit.Reason{{ID: reason, Msg: "name refused before policy"}}
			if flag != "" {
				q.flags = append(q.flags, flag)
			}
			return dns.RcodeNameError, nil
		}
	}
	if scan := s.f.cfg.ScanName; scan != nil {
		q.findings = scan(s.sb, name)
	}
	q.dec = s.approve(q, s.decide(q)) // a question the policy asks waits for its answer (approval.go)
	if !q.dec.d.Permit() {
		return dns.RcodeNameError, nil
	}

	switch q.qtype {
	case dns.TypeA, dns.TypeCNAME:
		return s.lookup(q)
	case dns.TypeAAAA:
		if s.f.cfg.IPv6 {
			return s.lookup(q)
		}
		return dns.RcodeSuccess, nil
	case dns.TypeHTTPS, dns.TypeSVCB:
		return dns.RcodeSuccess, nil
	case dns.TypePTR:
		if target, ok := s.ptr[name]; ok {
			rr := &dns.PTR{Hdr: dns.RR_Header{Name: qq.Name, Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: uint32(s.f.cfg.MinTTL / time.Second)}, Ptr: target}
			q.answers = []audit.Answer{{Type: "PTR", Data: target, TTL: rr.Hdr.Ttl}}
			return dns.RcodeSuccess, []dns.RR{rr}
		}
		return dns.RcodeNameError, nil
	case dns.TypeANY, dns.TypeAXFR, dns.TypeIXFR, dns.TypeMAILA, dns.TypeMAILB,
		dns.TypeOPT, dns.TypeTSIG, dns.TypeTKEY, dns.TypeNone, dns.TypeReserved:
		q.reasons = reasonQTypeRefused
		return dns.RcodeRefused, nil
	}
	if q.dec.d.Allowed && hasReason(q.dec.d.Reasons, ReasonQTypeOptIn) {
		return s.lookup(q)
	}
	q.reasons = reasonQTypeRefused
	return dns.RcodeRefused, nil
}

var (
	reasonMalformed    = []audit.Reason{{ID: ReasonMalformed, Msg: "malformed query"}}
	reasonBadName      = []audit.Reason{{ID: ReasonBadName, Msg: "not a valid host name"}}
	reasonIPLiteral    = []audit.Reason{{ID: ReasonIPLiteral, Msg: "an IP literal is not a name"}}
	reasonQTypeRefused = []audit.Reason{{ID: ReasonQTypeRefuse, Msg: "query type not allowed for this name"}}
	reasonUpstream     = []audit.Reason{{ID: ReasonUpstream, Msg: "no upstream answered"}}
	reasonAuditDown    = []audit.Reason{{ID: ReasonAuditUnavailable, Msg: "audit log is not accepting records"}}
)

func hasReason(rs []policy.Reason, id string) bool {
	for _, r := range rs {
		if r.ID == id {
			return true
		}
	}
	return false
}

// decided is a policy decision with its reasons already in audit form, so a
// cached decision costs no conversion per query.
type decided struct {
	d       policy.Decision
	reasons []audit.Reason
}

// decide asks policy, or the decision cache when the query carries no flags.
func (s *sandboxServer) decide(q *query) *decided {
	var rev string
	cacheable := s.dcache != nil && len(q.flags) == 0 && len(q.findings) == 0
	key := decisionKey{q.name, q.qtype, q.proto}
	rules := s.rules()
	if cacheable {
		rev = s.f.revOf()
		if d := s.dcache.get(rev+rules.gen, key); d != nil {
			s.f.metrics.dcacheHit.Inc()
			return d
		}
		s.f.metrics.dcacheMiss.Inc()
	} else {
		s.f.metrics.dcacheBypass.Inc()
	}
	in := &policy.Input{
		Kind:    policy.KindDNS,
		Sandbox: rules.sb,
		Destination: policy.Destination{
			Host: q.name, Port: 53, Suffixes: hostname.Suffixes(q.name), Protocol: q.proto,
		},
		DNS: &policy.DNS{QName: q.name, QType: qtypeString(q.qtype), Flags: q.flags},
	}
	if len(q.findings) > 0 {
		in.Content = &policy.Content{Findings: q.findings}
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.f.cfg.PolicyTimeout)
	d := &decided{d: s.f.dec.Decide(ctx, in)}
	cancel()
	d.reasons = auditReasons(d.d.Reasons)
	if cacheable && d.d.Err == nil && d.d.Rev == rev {
		s.dcache.put(rev+rules.gen, key, d)
	}
	return d
}

// lookup answers from the shared cache or the upstreams.
func (s *sandboxServer) lookup(q *query) (int, []dns.RR) {
	a, hit := s.f.res.cached(q.name, q.qtype, q.start)
	var err error
	if !hit && q.noWait {
		q.pending = true
		return 0, nil
	}
	if !hit {
		// Forwarding is itself traffic: with a broken audit log nothing leaves.
		if err := s.f.auditErr(); err != nil {
			q.reasons, q.errMsg = reasonAuditDown, err.Error()
			return dns.RcodeServerFailure, nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.f.cfg.Timeout*time.Duration(len(s.f.res.upstreams)+1))
		a, hit, err = s.f.res.lookup(ctx, q.name, q.qtype)
		cancel()
	}
	s.f.metrics.cacheLookup(sourceSandbox, hit)
	if err != nil {
		q.reasons, q.errMsg = reasonUpstream, err.Error()
		return dns.RcodeServerFailure, nil
	}
	q.upstream = a.upstream
	if hit {
		q.upstream = "cache"
	}
	if a.dropped > 0 {
		q.flags = append(q.flags, FlagRebindingDropped)
	}
	v := a.view(q.start)
	q.answers = v.audit
	q.ansWire = v.wire
	return a.rcode, v.rrs
}

// reply writes the audit record (or counts the query into its sandbox's
// summary when the sandbox is over its audit budget), then the reply. When the
// audit logger refuses records, a reply that would have let the query through
// becomes SERVFAIL.
func (s *sandboxServer) reply(w dns.ResponseWriter, req *request, q *query, rcode int, rrs []dns.RR) {
	decision, reasons, errMsg := q.verdict()
	qt := qtypeNone
	if req.questions > 0 {
		qt = qtypeIndex(req.q.Qtype)
	}
	s.f.metrics.query(decision, qt)
	for _, fl := range q.flags {
		s.f.metrics.flag(fl)
	}
	if !s.meter.Allow(q.start) {
		if s.f.auditFailing.Load() && (rcode == dns.RcodeSuccess || len(rrs) > 0) {
			rcode, rrs = dns.RcodeServerFailure, nil
		}
		e := summaryEntry{
			name: q.name, decision: decision, rcode: rcodeString(rcode), flags: q.flags,
			forwarded: q.upstream != "" && q.upstream != "cache",
		}
		if req.questions > 0 {
			e.qtype = qtypeString(req.q.Qtype)
			if e.name == "" {
				e.name = req.q.Name
			}
		}
		if s.meter.Count(e.count) {
			s.write(w, req, q, rcode, rrs)
			return
		}
	}
	rec := &audit.Record{
		ID:       s.f.nextID(),
		Sandbox:  s.sb.ID,
		Kind:     audit.KindDNS,
		Decision: decision,
		Reasons:  reasons,
		Host:     q.name,
		Port:     53,
		Protocol: q.proto,
		QName:    q.name,
		RCode:    rcodeString(rcode),
		Answers:  q.answers,
		Upstream: q.upstream,
		Flags:    q.flags,
		Error:    errMsg,
	}
	for _, f := range q.findings {
		rec.Findings = append(rec.Findings, audit.Finding(f))
	}
	if secretIn(rec.Findings) {
		// The name carried a credential or canary (in some encoding): the
		// record keeps its last two labels only. A name flagged for entropy
		// alone stays whole: it is the auditor's evidence of the attempt.
		rec.Host = withheldName(q.name)
		rec.QName = rec.Host
	}
	if req.questions > 0 {
		rec.QType = qtypeString(req.q.Qtype)
		if q.name == "" {
			rec.QName = req.q.Name
		}
	}
	if q.dec != nil {
		rec.Mode, rec.PolicyRev = string(q.dec.d.Mode), q.dec.d.Rev
	}
	rec.DurationMS = float64(time.Since(q.start).Microseconds()) / 1000
	if err := s.f.logAudit(rec); err != nil {
		s.f.log.Error("audit failed, refusing query", oplog.SandboxKey, s.sb.ID, "qname", q.name, oplog.ErrorKey, err)
		if rcode == dns.RcodeSuccess || len(rrs) > 0 {
			rcode, rrs = dns.RcodeServerFailure, nil
		}
	}
	s.write(w, req, q, rcode, rrs)
}

// verdict is the query's audit decision, reasons and error text.
func (q *query) verdict() (decision string, reasons []audit.Reason, errMsg string) {
	decision, errMsg = audit.DecisionDeny, q.errMsg
	if q.dec != nil {
		d := &q.dec.d
		switch {
		case d.Err != nil:
			decision = audit.DecisionError
			errMsg = d.Err.Error()
		case d.Allowed && q.reasons == nil:
			decision = audit.DecisionAllow
		}
		reasons = q.dec.reasons
	}
	if q.reasons != nil {
		reasons = q.reasons
		if q.reasons[0].ID == ReasonUpstream {
			decision = audit.DecisionError // policy allowed it; resolving failed
		}
	}
	return decision, reasons, errMsg
}

// write sends the reply. The addresses of a successful answer are remembered
// first (NameFor), so a connection the sandbox makes as soon as it reads the
// reply finds its name.
func (s *sandboxServer) write(w dns.ResponseWriter, req *request, q *query, rcode int, rrs []dns.RR) {
	if rcode == dns.RcodeSuccess && len(rrs) > 0 && q.name != "" {
		s.remember(q.name, rrs, q.start)
	}
	size := dns.MaxMsgSize
	var ede *explanation
	if req.edns {
		decision, reasons, _ := q.verdict()
		if e, ok := q.explain(decision, reasons); ok {
			ede = &e
		}
	}
	if q.proto == "udp" {
		size = dns.MinMsgSize
		if req.edns {
			size = max(dns.MinMsgSize, min(int(req.udpSize), DefaultEDNSSize))
		}
	}
	bp := replyBufs.Get().(*[]byte)
	defer replyBufs.Put(bp)
	if b, ok := appendReply((*bp)[:0], req, rcode, rrs, q.ansWire, ede, size); ok {
		*bp = b
		if _, err := w.Write(b); err != nil && !errors.Is(err, net.ErrClosed) {
			s.f.log.Warn("write reply", oplog.SandboxKey, s.sb.ID, oplog.ErrorKey, err)
		}
		return
	}
	// Too big for the client's buffer (or unpackable): miekg/dns truncates.
	resp := new(dns.Msg)
	resp.Id, resp.Response, resp.Opcode, resp.Rcode = req.id, true, req.opcode, rcode // as SetRcode
	if req.opcode == dns.OpcodeQuery {
		resp.RecursionDesired, resp.CheckingDisabled = req.rd, req.cd
	}
	resp.RecursionAvailable = true
	if req.questions > 0 {
		resp.Question = []dns.Question{req.q}
	}
	resp.Answer = rrs
	if req.edns {
		resp.SetEdns0(DefaultEDNSSize, false)
		if ede != nil {
			o := resp.IsEdns0()
			o.Option = append(o.Option, &dns.EDNS0_EDE{InfoCode: ede.code, ExtraText: ede.text})
		}
	}
	resp.Truncate(size)
	if err := w.WriteMsg(resp); err != nil && !errors.Is(err, net.ErrClosed) {
		s.f.log.Warn("write reply", oplog.SandboxKey, s.sb.ID, oplog.ErrorKey, err)
	}
}

var replyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// appendReply appends the reply's wire form to dst: header, the question as
// asked, the answer records (packed, or packed here when ansWire is nil) and an
// OPT when the query had one, carrying ede when set. It reports false when the reply would exceed size
// or a record cannot be packed; the caller then builds it with miekg/dns.
func appendReply(dst []byte, req *request, rcode int, rrs []dns.RR, ansWire []byte, ede *explanation, size int) ([]byte, bool) {
	if rcode > 0xf || req.questions != 1 {
		return dst, false
	}
	if ansWire == nil && len(rrs) > 0 {
		var err error
		if ansWire, err = packRRs(rrs); err != nil {
			return dst, false
		}
	}
	var flags uint16 = 1<<15 | 1<<7 | uint16(rcode) // QR, RA, rcode; opcode QUERY
	if req.rd {
		flags |= 1 << 8
	}
	if req.cd {
		flags |= 1 << 4
	}
	var ar uint16
	if req.edns {
		ar = 1
	}
	dst = binary.BigEndian.AppendUint16(dst, req.id)
	dst = binary.BigEndian.AppendUint16(dst, flags)
	dst = binary.BigEndian.AppendUint16(dst, 1)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(rrs)))
	dst = binary.BigEndian.AppendUint16(dst, 0)
	dst = binary.BigEndian.AppendUint16(dst, ar)
	q := req.q
	start := len(dst)
	dst = append(dst, make([]byte, 256)...)
	off, err := dns.PackDomainName(q.Name, dst, start, nil, false)
	if err != nil {
		return dst[:start], false
	}
	dst = dst[:off]
	dst = binary.BigEndian.AppendUint16(dst, q.Qtype)
	dst = binary.BigEndian.AppendUint16(dst, q.Qclass)
	dst = append(dst, ansWire...)
	if req.edns {
		dst = appendOPT(dst, ede)
	}
	if len(dst) > size {
		return dst, false
	}
	return dst, true
}

// auditReasons converts policy reasons; the common no-reason case allocates nothing.
func auditReasons(rs []policy.Reason) []audit.Reason {
	if len(rs) == 0 {
		return nil
	}
	out := make([]audit.Reason, len(rs))
	for i, r := range rs {
		out[i] = audit.Reason{ID: r.ID, Msg: r.Msg}
	}
	return out
}

// lowerASCII lowercases s only when it has an upper-case ASCII letter, so that
// the common lower-case name takes hostname.Normalize's fast path.
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}

// isIPLiteral reports whether a hostname.Normalize output is an IP literal: IPv6
// has a colon, and IPv4 is the only output whose last label is all digits.
func isIPLiteral(name string) bool {
	if strings.IndexByte(name, ':') >= 0 {
		return true
	}
	last := name[strings.LastIndexByte(name, '.')+1:]
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			return false
		}
	}
	_, err := netip.ParseAddr(name)
	return err == nil
}

// nameCache memoizes hostname.Normalize (a pure function) for names as they
// arrive on the wire, so a repeated question costs a map lookup. Failures are
// not cached. It also interns the presentation form of wire-form names
// (wireName). Each map is emptied when full.
type nameCache struct {
	mu   sync.RWMutex
	max  int
	m    map[string]string
	wire map[string]string // wire form -> presentation form
}

func newNameCache(max int) *nameCache {
	return &nameCache{max: max, m: make(map[string]string), wire: make(map[string]string)}
}

func (c *nameCache) normalize(raw string) (string, error) {
	c.mu.RLock()
	name, ok := c.m[raw]
	c.mu.RUnlock()
	if ok {
		return name, nil
	}
	name, err := hostname.Normalize(lowerASCII(raw))
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	if len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[strings.Clone(raw)] = name
	c.mu.Unlock()
	return name, nil
}

// decisionCache holds one sandbox's decisions for flagless questions under one
// policy revision; a new revision empties it.
type decisionCache struct {
	mu  sync.RWMutex
	rev string
	max int
	m   map[decisionKey]*decided
}

// decisionKey is everything in a flagless dns input that varies per query for
// one sandbox.
type decisionKey struct {
	name  string
	qtype uint16
	proto string
}

func newDecisionCache(max int) *decisionCache {
	return &decisionCache{max: max, m: make(map[decisionKey]*decided)}
}

func (c *decisionCache) get(rev string, k decisionKey) *decided {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.rev != rev {
		return nil
	}
	return c.m[k]
}

func (c *decisionCache) put(rev string, k decisionKey, d *decided) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rev != rev || len(c.m) >= c.max {
		clear(c.m)
		c.rev = rev
	}
	c.m[k] = d
}

// secretIn reports whether a finding is a credential or canary (in whatever
// encoding): what a record must not keep.
func secretIn(fs []audit.Finding) bool {
	for _, f := range fs {
		if f.Class == audit.FindingClassCredential || f.Class == audit.FindingClassCanary || f.Class == "encoded" {
			return true
		}
	}
	return false
}

// withheldName is name with every label but the last two replaced, for the
// record of a question content inspection found something in.
func withheldName(name string) string {
	labels := strings.Split(name, ".")
	if len(labels) <= 2 {
		return "[withheld]"
	}
	return "[withheld]." + strings.Join(labels[len(labels)-2:], ".")
}
