package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/oplog"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/secrets"
)

// reqCtx is the one per-request (or per-tunnel, per-connection) context: created
// once by the listener side, filled by the stages, read by the one deferred
// audit call.
type reqCtx struct {
	g    *Gateway
	cc   *clientConn
	sess *httpSession // HTTP kinds and CONNECT: the session the request came on
	id   string
	kind policy.Kind

	start     time.Time
	policyDur time.Duration
	dialDur   time.Duration

	// Destination, normalized.
	host    string
	port    int
	ip      netip.Addr // the address dialed (or refused)
	sni     string
	origDst netip.AddrPort
	carries policy.Kind // CONNECT: what the tunnel turned out to carry (tls, http, tcp)
	named   bool        // kind tcp: host is the name the sandbox resolved to origDst
	socks   bool        // a SOCKS5 CONNECT (socks.go): answered in SOCKS, decided as kind connect
	parent  string      // the parent proxy's host:port, when the dial went through it

	// carriedDecided: what the CONNECT carried was decided a second time
	// (decideCarried); the record holds that decision.
	carriedDecided bool

	// HTTP.
	req        *http.Request
	scheme     string
	status     int
	keepAlive  bool   // the client connection may carry another request
	grpcStatus string // a gRPC call's grpc-status: the refusal's, or the upstream's

	// Raw inputs of the transparent listener (tls, tcp).
	br *bufio.Reader // holds the peeked bytes

	// The explicit proxy's goproxy front: responses go back to goproxy as an
	// *http.Response (refusal or upstream) instead of onto the connection.
	viaProxy bool
	refusal  *http.Response
	upOK     bool    // the upstream response was read to its end: the connection may be reused
	ws       *wsBody // a websocket goproxy relays

	// approval is a person's answer to what the policy asked (approval.go).
	approval *Answer

	in      policy.Input
	adm     *admitted              // what a long-lived connection was admitted with (redecide.go)
	revoked atomic.Pointer[denial] // set by Redecide when it closed the connection
	dec     policy.Decision
	decided bool
	mitm    bool
	applied *secrets.Applied  // what Inject did; scrubs the response, audited
	res     audit.Reservation // room reserved for the next record written

	up    *upstreamConn // HTTP: the upstream connection used
	upRaw net.Conn      // tunnels: the upstream connection
	route *route        // CONNECT: the checked destination, connected once the tunnel is decided

	bytesUp, bytesDown int64
	tunnel             bool // a close record follows the decision record
	opened             bool // the decision record was written
	responded          bool // bytes of a response already went to the client
	err                error
}

func (g *Gateway) newReqCtx(cc *clientConn, sess *httpSession) *reqCtx {
	return &reqCtx{g: g, cc: cc, sess: sess, id: g.newID(), start: time.Now()}
}

func kindOfMode(m listenerMode) policy.Kind {
	if m == modeExplicit {
		return policy.KindHTTP
	}
	return policy.KindTCP
}

// serve runs the pipeline of doc.go for one request, tunnel or connection and
// reports whether the client connection may carry another request.
func (g *Gateway) serve(rc *reqCtx) bool {
	defer g.finish(rc)
	if err := g.stages(rc); err != nil {
		rc.err = err
		g.refuse(rc)
		return false
	}
	return rc.keepAlive
}

// serveRefused audits and answers a refusal decided before the pipeline could
// start (a connection cap, a missing original destination).
func (g *Gateway) serveRefused(rc *reqCtx, err error) {
	defer g.finish(rc)
	rc.err = err
	g.refuse(rc)
}

// stages are the pipeline's stages in their fixed order. Each returns an error;
// the first error ends the request.
func (g *Gateway) stages(rc *reqCtx) error {
	if err := g.admit(rc); err != nil {
		return err
	}
	return g.relay(rc)
}

// admit runs every stage before relay. The goproxy front calls it from its
// request handler and relays from its RoundTripper (proxyExchange).
func (g *Gateway) admit(rc *reqCtx) error {
	if err := g.normalize(rc); err != nil {
		if serr := g.screenRaw(rc); serr != nil {
			return serr // a placeholder in a malformed request is flagged too
		}
		return err
	}
	if err := g.screen(rc); err != nil {
		return err
	}
	if err := g.decide(rc); err != nil {
		return err
	}
	if err := g.reserve(rc); err != nil {
		return err
	}
	if err := g.inject(rc); err != nil {
		return err
	}
	return g.dial(rc)
}

// normalize fills host and port and enforces one destination per connection.
func (g *Gateway) normalize(rc *reqCtx) error {
	switch rc.kind {
	case policy.KindHTTP:
		return rc.sess.normalizeRequest(rc)
	case policy.KindConnect:
		return rc.sess.normalizeConnect(rc)
	case policy.KindTLS:
		if rc.sni != "" {
			h, err := hostname.Normalize(rc.sni)
			if err != nil {
				return deny(ReasonBadDestination, "tls server name: %v", err)
			}
			rc.host = h
		} else {
			rc.host = rc.origDst.Addr().Unmap().String()
			rc.ip = rc.origDst.Addr().Unmap()
		}
		rc.port = int(rc.origDst.Port())
		return g.claimTunnel(rc)
	case policy.KindTCP:
		// Decided by the name the sandbox resolved to the address, if the DNS
		// filter answered it one (dial then resolves the name again); else as
		// the bare address.
		rc.ip = rc.origDst.Addr().Unmap()
		rc.host = rc.ip.String()
		if name, ok := g.dialer.nameFor(rc.cc.sb.info.ID, rc.ip); ok {
			rc.host, rc.named = name, true
		}
		rc.port = int(rc.origDst.Port())
		return g.claimTunnel(rc)
	}
	return deny(ReasonBadRequest, "unknown kind %q", rc.kind)
}

// claimTunnel enforces max_tunnels_per_sandbox; finish releases the slot.
func (g *Gateway) claimTunnel(rc *reqCtx) error {
	rc.tunnel = true
	if rc.cc.sb.tunnels.Add(1) > int64(g.cfg.MaxTunnelsPerSandbox) {
		rc.cc.sb.tunnels.Add(-1)
		rc.tunnel = false
		return deny(ReasonTunnelLimit, "sandbox %s has %d tunnels open (max_tunnels_per_sandbox)", rc.cc.sb.info.ID, g.cfg.MaxTunnelsPerSandbox)
	}
	g.metrics.activeTunnels.Inc()
	return nil
}

// decide asks policy. It fails closed: a policy error is never permitted.
func (g *Gateway) decide(rc *reqCtx) error {
	if until := g.auditBlockedUntil.Load(); until != 0 && time.Now().UnixNano() < until {
		return deny(ReasonAuditUnavailable, "audit log is not accepting records")
	}
	// A plain request's record is written after its exchange; ask the log first,
	// so a broken log lets no request out at all (not one per blocked second).
	if h, ok := g.log.(audit.Health); ok {
		if err := h.Err(); err != nil {
			g.auditFailed(err)
			return deny(ReasonAuditUnavailable, "audit log is not accepting records")
		}
	}
	g.buildInput(rc)
	d := g.ask(rc)
	rc.dec, rc.decided = d, true
	if err := denialOf(d); err != nil {
		return err
	}
	defer func() { rc.adm = &admitted{opening: rc.in, mitm: rc.mitm} }()
	if rc.kind == policy.KindConnect || rc.kind == policy.KindTLS {
		rc.mitm = g.intercepts(rc, &rc.in, d)
		if rc.mitm && g.leaves == nil {
			return deny(ReasonMITMUnavailable, "interception of %s requested but no CA is configured", rc.host)
		}
	}
	return nil
}

// intercepts reports whether an allowed CONNECT or TLS connection (opening
// input in, decision d) is intercepted: policy asks for it (mitm), a secret
// bound to the destination needs it, or report mode learns what it carries
// (reportIntercepts). Passthrough wins over all of them, placeholders
// included (policy.Decision.Passthrough).
func (g *Gateway) intercepts(rc *reqCtx, in *policy.Input, d policy.Decision) bool {
	switch {
	case d.Passthrough:
		return false
	case d.MITM:
		return true
	case g.cfg.Injector != nil && g.cfg.Injector.NeedsMITM(sandboxOf(rc), in.Destination.Host, in.Destination.Port):
		return true
	}
	return g.reportIntercepts(in, d)
}

// reportIntercepts: in report mode, a TLS connection (kind tls, or a CONNECT
// to port 443) that policy would refuse, and lets through only because it is
// reported, is intercepted, so that its records carry each request's method
// and path (what policy suggest learns HTTP rules from, and replay checks
// method and path rules against). Only where the gateway has a CA and the
// sandbox trusts it: sandboxes of airlock run and the daemon always do; an
// attached pod (input.sandbox.pod) may not, and stays tunnelled.
func (g *Gateway) reportIntercepts(in *policy.Input, d policy.Decision) bool {
	return g.leaves != nil && d.Mode == policy.ModeReport && !d.Allowed && d.Err == nil &&
		in.Sandbox.Pod == nil && (in.Kind == policy.KindTLS || in.Destination.Port == 443)
}

// ask runs one policy decision on rc.in, bounded by PolicyTimeout.
func (g *Gateway) ask(rc *reqCtx) policy.Decision {
	t0 := time.Now()
	ctx := newDecisionCtx(g.cfg.PolicyTimeout) // no timer unless the decider waits on it
	d := g.dec.Decide(ctx, &rc.in)
	ctx.stop()
	dur := time.Since(t0)
	rc.policyDur += dur
	g.metrics.policyEval.Observe(dur.Seconds())
	return g.approve(rc, d) // a question the policy asks waits for its answer (approval.go)
}

// denialOf is the denial a decision that does not permit stands for (nil when
// it permits): its first reason, or policy_error, with the policy's status.
func denialOf(d policy.Decision) error {
	if d.Permit() {
		return nil
	}
	reason, msg := policy.ReasonPolicyError, "policy error"
	if d.Err == nil {
		reason, msg = "denied", "denied by policy"
		if len(d.Reasons) > 0 {
			reason, msg = d.Reasons[0].ID, d.Reasons[0].Msg
		}
	}
	status := http.StatusForbidden
	if d.HTTPStatus >= 400 && d.HTTPStatus <= 599 {
		status = d.HTTPStatus
	}
	return &denial{reason: reason, msg: msg, status: status}
}

// decideCarried decides what an allowed CONNECT turned out to carry, a second
// time and for the same destination: kind tcp for opaque bytes (or none, a
// server-first protocol), kind tls with an empty sni for a ClientHello without
// a server name. A CONNECT allows a destination, not every protocol to it. The
// second decision is the one the tunnel's record carries.
func (g *Gateway) decideCarried(rc *reqCtx, kind policy.Kind) error {
	in := &rc.in
	in.Kind, in.HTTP, in.TLS, in.Destination.Protocol = kind, nil, nil, ""
	switch kind {
	case policy.KindTCP:
		in.Destination.Protocol = "tcp"
	case policy.KindTLS:
		in.TLS = &policy.TLS{}
	}
	first := rc.dec
	rc.dec = g.ask(rc)
	rc.carriedDecided = true
	if rc.adm != nil {
		carried := *in
		rc.adm.carried = &carried
	}
	if !first.Allowed && first.Err == nil && rc.dec.Err == nil && rc.dec.Mode == policy.ModeReport {
		// Report mode let the CONNECT through although enforce would have
		// refused it: the record keeps that, whatever the second decision.
		rc.dec.Allowed = false
		rc.dec.Reasons = append(slices.Clip(first.Reasons), rc.dec.Reasons...)
	}
	return denialOf(rc.dec)
}

// buildInput fills rc.in from the normalized request.
func (g *Gateway) buildInput(rc *reqCtx) {
	in := &rc.in
	in.Kind = rc.kind
	in.Sandbox = rc.cc.sb.current()
	in.Destination = policy.Destination{Host: rc.host, Port: rc.port}
	if rc.sess != nil {
		in.Destination.Suffixes = rc.sess.suffixes(rc.host)
	} else {
		in.Destination.Suffixes = hostname.Suffixes(rc.host)
	}
	if rc.ip.IsValid() {
		in.Destination.IP = rc.ip.String()
	}
	if rc.kind == policy.KindTCP {
		in.Destination.Protocol = "tcp"
	}
	if rc.kind == policy.KindTLS {
		in.TLS = &policy.TLS{SNI: rc.host}
		if rc.sni == "" {
			in.TLS.SNI = ""
		}
	}
	if rc.kind == policy.KindHTTP {
		r := rc.req
		h := &policy.HTTP{Method: r.Method, Scheme: rc.scheme, Path: r.URL.Path}
		if h.Path == "" {
			h.Path = "/"
		}
		if r.URL.RawQuery != "" {
			h.Query = r.URL.Query()
		}
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			h.BodySize = max(r.ContentLength, -1) // -1: chunked, length unknown
		}
		if len(r.Header) > 0 {
			h.Headers = make(map[string]string, len(r.Header))
			for k, v := range r.Header {
				h.Headers[lowerHeader(k)] = strings.Join(v, ", ")
			}
		}
		in.HTTP = h
		if rc.sess.intercepted {
			in.TLS = &policy.TLS{SNI: rc.sess.sni, Intercepted: true}
		}
	}
}

// lowerHeader lowercases a canonical header name without allocating for the
// common names.
func lowerHeader(k string) string {
	switch k {
	case "Accept":
		return "accept"
	case "User-Agent":
		return "user-agent"
	case "Accept-Encoding":
		return "accept-encoding"
	case "Content-Type":
		return "content-type"
	case "Content-Length":
		return "content-length"
	case "Authorization":
		return "authorization"
	case "Connection":
		return "connection"
	}
	return strings.ToLower(k)
}

// dial connects to the upstream through the guarded dialer.
func (g *Gateway) dial(rc *reqCtx) error {
	t0 := time.Now()
	defer func() { rc.dialDur = time.Since(t0) }()
	switch rc.kind {
	case policy.KindHTTP:
		return rc.sess.upstream(rc, false)
	case policy.KindConnect, policy.KindTLS:
		if rc.mitm {
			return nil // each inner request dials
		}
	}
	if rc.kind == policy.KindConnect {
		// Resolve and check now, so the CONNECT's answer says whether the
		// destination can be reached; connect only once what the tunnel
		// carries is decided (relayConnect, connectRoute).
		ctx, cancel := context.WithTimeout(context.Background(), g.dialer.timeout)
		defer cancel()
		t, err := g.dialer.plan(ctx, rc.cc.sb.info.ID, rc.host, rc.port)
		rc.dialedAt(t.at)
		rc.route = t
		return err
	}
	c, at, err := g.dialer.dialHost(context.Background(), rc.cc.sb.info.ID, rc.host, rc.port)
	rc.dialedAt(at)
	if err != nil {
		return err
	}
	rc.upRaw = c
	return nil
}

// connectRoute opens the upstream connection of a CONNECT planned by dial,
// once everything that could refuse the tunnel has allowed it.
func (g *Gateway) connectRoute(rc *reqCtx) error {
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), g.dialer.timeout)
	defer cancel()
	c, at, err := g.dialer.connect(ctx, rc.route)
	rc.dialDur += time.Since(t0)
	rc.dialedAt(at)
	if err != nil {
		return err
	}
	rc.upRaw = c
	return nil
}

// dialedAt records where a dial went.
func (rc *reqCtx) dialedAt(at dialed) {
	if at.ip.IsValid() {
		rc.ip = at.ip
	}
	if at.parent != "" {
		rc.parent = at.parent
	}
}

// relay moves the bytes.
func (g *Gateway) relay(rc *reqCtx) error {
	switch rc.kind {
	case policy.KindHTTP:
		if rc.sess.h2 != nil {
			return rc.sess.forwardH2(rc)
		}
		return rc.sess.forward(rc)
	case policy.KindConnect:
		return g.relayConnect(rc)
	case policy.KindTLS, policy.KindTCP:
		if rc.mitm {
			return g.intercept(rc, &prefixConn{Conn: rc.cc.nc, r: rc.br})
		}
		head, _ := rc.br.Peek(rc.br.Buffered())
		return g.tunnel(rc, rc.cc.nc, head, rc.upRaw)
	}
	return nil
}

// reserve takes room in the audit log for the record of an allowed HTTP
// request before anything of it leaves, when the log can hold room
// (audit.Reserver, audit.overflow deny): that record is written after the
// exchange, by finish, through the reservation, and must not be refused
// then. A tunnel's decision record is written before its bytes flow
// (openTunnel), so it needs none here.
func (g *Gateway) reserve(rc *reqCtx) error {
	r, ok := g.log.(audit.Reserver)
	if !ok || rc.kind != policy.KindHTTP {
		return nil
	}
	res, err := r.Reserve()
	if err != nil {
		return deny(ReasonAuditUnavailable, "audit log cannot take the record: %v", err)
	}
	rc.res = res
	return nil
}

// openTunnel writes a tunnel's decision record before its bytes flow, so a
// long-lived tunnel is visible at once; finish writes the close record, into
// room reserved here when the log can hold room.
func (g *Gateway) openTunnel(rc *reqCtx) error {
	var closeRes audit.Reservation
	if r, ok := g.log.(audit.Reserver); ok {
		var err error
		if closeRes, err = r.Reserve(); err != nil {
			return deny(ReasonAuditUnavailable, "audit log cannot take the tunnel's close record: %v", err)
		}
	}
	if err := g.writeRecord(rc, decisionRecord(rc)); err != nil {
		if closeRes != nil {
			closeRes.Cancel()
		}
		g.auditFailed(err)
		return deny(ReasonAuditUnavailable, "audit log refused the record")
	}
	rc.opened, rc.res = true, closeRes
	g.holdOpen(rc)
	return nil
}

// writeRecord writes r through rc's reservation, if it holds one, else
// straight to the log.
func (g *Gateway) writeRecord(rc *reqCtx, r *audit.Record) error {
	if res := rc.res; res != nil {
		rc.res = nil
		return res.Log(r)
	}
	return g.log.Log(r)
}

// refuse is the one place that answers a refusal to the client: 403 (or the
// policy's status, or 502/504 for a failure) with a reason phrase and a body
// that explain it (refusalText: what, why, how to allow it, the decision id),
// and headers X-Airlock-Decision and X-Airlock-Reason. Where no HTTP answer is
// possible (TLS passthrough, raw TCP, a response already begun) it closes.
func (g *Gateway) refuse(rc *reqCtx) {
	status, reason := refusalOf(rc.err)
	if rc.sess != nil && rc.sess.h2 != nil {
		// One stream of an HTTP/2 connection: the others go on.
		_, body := refusalText(rc, status, reason)
		rc.sess.h2.refuse(rc, status, reason, body)
		return
	}
	if rc.socks {
		if !rc.responded {
			rc.status = status
			writeSOCKSReply(rc.sess.bw, socksReplyOf(rc.err))
			rc.responded = true
		}
		rc.cc.nc.Close()
		return
	}
	if rc.responded || rc.sess == nil {
		rc.cc.nc.Close()
		return
	}
	rc.status = status
	phrase, body := refusalText(rc, status, reason)
	if rc.viaProxy {
		// goproxy writes it through the connection's http.Server.
		h := http.Header{}
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("X-Airlock-Decision", rc.id)
		h.Set("X-Airlock-Reason", reason)
		h.Set("Content-Length", strconv.Itoa(len(body)))
		h.Set("Connection", "close")
		rc.refusal = &http.Response{
			StatusCode: status, Status: strconv.Itoa(status) + " " + phrase,
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h, Close: true,
			ContentLength: int64(len(body)), Body: io.NopCloser(strings.NewReader(body)), Request: rc.req,
		}
		rc.responded = true
		return
	}
	bw := rc.sess.bw
	bw.WriteString("HTTP/1.1 " + strconv.Itoa(status) + " " + phrase + "\r\n")
	bw.WriteString("Content-Type: text/plain; charset=utf-8\r\nX-Airlock-Decision: " + rc.id + "\r\n")
	bw.WriteString("X-Airlock-Reason: " + reason + "\r\n")
	bw.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n")
	if rc.req == nil || rc.req.Method != http.MethodHead {
		bw.WriteString(body)
	}
	bw.Flush()
	rc.responded = true
}

// finish is the one deferred audit call: the decision record (unless a tunnel
// already wrote it) and, for tunnels, the close record, through the room
// reserved for it when there is one.
func (g *Gateway) finish(rc *reqCtx) {
	g.letGo(rc)
	if r := rc.revoked.Load(); r != nil {
		rc.err = r // closed by Redecide: that is why it ended
	}
	result := resultOf(rc)
	g.metrics.decided(rc.kind, result)
	if rc.upRaw != nil {
		rc.upRaw.Close()
	}
	rec := decisionRecord
	if rc.opened {
		rec = closeRecord // the decision record was written when it opened
	}
	if err := g.writeRecord(rc, rec(rc)); err != nil {
		g.auditFailed(err)
	}
	if rc.tunnel {
		rc.cc.sb.tunnels.Add(-1)
		g.metrics.activeTunnels.Dec()
		g.metrics.bytesUp.Add(float64(rc.bytesUp))
		g.metrics.bytesDown.Add(float64(rc.bytesDown))
	}
	var f *failure
	if errors.As(rc.err, &f) {
		g.metrics.upstreamErrors.WithLabelValues(f.reason).Inc()
	}
	g.logDecision(rc, result)
}

func resultOf(rc *reqCtx) string {
	var d *denial
	switch {
	case rc.decided && rc.dec.Err != nil:
		return audit.DecisionError
	case errors.As(rc.err, &d):
		return audit.DecisionDeny
	case rc.decided && !rc.dec.Allowed:
		return audit.DecisionDeny // report mode: what enforce would have done
	}
	return audit.DecisionAllow
}

func (g *Gateway) auditFailed(err error) {
	g.auditBlockedUntil.Store(time.Now().Add(time.Second).UnixNano())
	g.logger.Error("audit record refused; refusing new requests for 1s", oplog.ErrorKey, err)
}

// recordOf starts a record of rc with what every record of it carries: id,
// sandbox, kind and destination.
func recordOf(rc *reqCtx) *audit.Record {
	r := &audit.Record{
		ID:      rc.id,
		Sandbox: rc.cc.sb.info.ID,
		Kind:    string(rc.kind),
		Host:    rc.host,
		Port:    rc.port,
	}
	if rc.ip.IsValid() {
		r.IP = rc.ip.String()
	}
	return r
}

// closeRecord builds a tunnel's close record: bytes, duration, and the denial
// that cut it off mid-stream, if any.
func closeRecord(rc *reqCtx) *audit.Record {
	r := recordOf(rc)
	r.Kind = audit.KindClose
	r.BytesUp, r.BytesDown = rc.bytesUp, rc.bytesDown
	r.DurationMS = float64(time.Since(rc.start).Microseconds()) / 1000
	parentExtra(r, rc)
	if rc.err != nil {
		r.Error = rc.err.Error()
	}
	var d *denial
	if errors.As(rc.err, &d) {
		// Cut off mid-stream (a placeholder in a tunnel): the reason and
		// flag go on the close record, the decision record being written.
		r.Reasons = []audit.Reason{{ID: d.reason, Msg: d.msg}}
		if d.flag != "" {
			r.Flags = []string{d.flag}
		}
	}
	boundText(r)
	return r
}

// decisionRecord builds the record of a request's, tunnel's or connection's
// decision.
func decisionRecord(rc *reqCtx) *audit.Record {
	r := recordOf(rc)
	r.Decision = resultOf(rc)
	if rc.carries != "" {
		r.Extra = map[string]json.RawMessage{"carries": json.RawMessage(strconv.Quote(string(rc.carries)))}
		if rc.carriedDecided {
			r.Extra["carried_decided"] = json.RawMessage("true")
		}
	}
	if rc.named {
		// The host is the name the sandbox resolved; this is the address it
		// connected to (r.IP is the one dialed).
		extra(r, "original_ip", rc.origDst.Addr().Unmap().String())
	}
	if rc.socks {
		extra(r, "proxy_protocol", "socks5")
	}
	if rc.req != nil && rc.req.ProtoMajor == 2 {
		extra(r, "http_version", "2")
		if n, err := strconv.Atoi(rc.grpcStatus); err == nil {
			r.Extra["grpc_status"] = json.RawMessage(strconv.Itoa(n))
		}
	}
	parentExtra(r, rc)
	if rc.decided {
		r.Mode = string(rc.dec.Mode)
		r.PolicyRev = rc.dec.Rev
		for _, x := range rc.dec.Reasons {
			r.Reasons = append(r.Reasons, audit.Reason{ID: x.ID, Msg: x.Msg})
		}
	}
	var d *denial
	if errors.As(rc.err, &d) && (!rc.decided || rc.dec.Permit()) {
		// The gateway's own denial (fronting, guard, caps): its reason is the record's.
		r.Reasons = append(r.Reasons, audit.Reason{ID: d.reason, Msg: d.msg})
	}
	if d != nil && d.flag != "" {
		r.Flags = append(r.Flags, d.flag)
	}
	if d != nil && rc.decided && rc.dec.Allowed && r.Mode == string(policy.ModeReport) {
		// Policy allowed it; the gateway's own refusal is enforced in every
		// mode. The record must not read as report mode's would-deny
		// (audit.WouldDeny: let through).
		r.Mode = string(policy.ModeEnforce)
	}
	if rc.err != nil {
		if _, isDenial := rc.err.(*denial); !isDenial {
			r.Error = rc.err.Error()
		}
	}
	if rc.dec.Err != nil {
		r.Error = rc.dec.Err.Error()
	}
	if rc.req != nil {
		r.Method = rc.req.Method
		r.Path = clip(rc.req.URL.Path, maxRecordPathBytes)
		if q := rc.req.URL.RawQuery; q != "" {
			r.Query = queryKeys(q)
		}
	}
	r.Status = rc.status
	if rc.up != nil {
		// Only a request that had a verified upstream connection carried the secret.
		r.Secrets = rc.applied.Audit()
	}
	if !rc.tunnel {
		r.BytesUp, r.BytesDown = rc.bytesUp, rc.bytesDown
		r.DurationMS = float64(time.Since(rc.start).Microseconds()) / 1000
	}
	boundText(r)
	return r
}

// parentExtra names the parent proxy a connection went through (host:port,
// never its credential) and, when it refused, its status.
func parentExtra(r *audit.Record, rc *reqCtx) {
	if rc.parent == "" {
		return
	}
	extra(r, "parent_proxy", rc.parent)
	var pe *parentError
	if errors.As(rc.err, &pe) {
		r.Extra["parent_status"] = json.RawMessage(strconv.Itoa(pe.status))
	}
}

// extra sets one string field of the record's Extra.
func extra(r *audit.Record, key, val string) {
	if r.Extra == nil {
		r.Extra = map[string]json.RawMessage{}
	}
	r.Extra[key] = json.RawMessage(strconv.Quote(val))
}

// boundText cuts the record's free-text fields: messages and errors can
// quote what the sandbox sent (a request line, a target, a header).
func boundText(r *audit.Record) {
	r.Method = clip(r.Method, maxRecordTextBytes)
	r.Error = clip(r.Error, maxRecordTextBytes)
	for i := range r.Reasons {
		r.Reasons[i].ID = clip(r.Reasons[i].ID, maxRecordTextBytes)
		r.Reasons[i].Msg = clip(r.Reasons[i].Msg, maxRecordTextBytes)
	}
}

// Bounds on what a request puts in its audit record, so that a hostile
// request cannot make records huge (the request line alone may be
// MaxHeaderBytes long).
const (
	maxRecordQueryKeys = 64   // distinct query keys listed
	maxRecordKeyBytes  = 64   // bytes of one query key
	maxRecordPathBytes = 2048 // bytes of the path
	maxRecordTextBytes = 512  // bytes of a method, reason message or error
)

// queryKeys returns the distinct keys of a raw query, never its values: at
// most maxRecordQueryKeys of them, each cut at maxRecordKeyBytes, then one
// element "(+N more parameters)" (never a key: a raw query has no space)
// counting the parameters whose keys are not listed. Linear in the query's
// length.
func queryKeys(q string) []string {
	const scan = 8 // up to this many keys a scan beats a map
	var keys []string
	var seen map[string]struct{}
	more := 0
	for q != "" {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		k, _, _ := strings.Cut(kv, "=")
		if k == "" {
			continue
		}
		k = clip(k, maxRecordKeyBytes)
		if seen != nil {
			if _, dup := seen[k]; dup {
				continue
			}
		} else if slices.Contains(keys, k) {
			continue
		}
		if len(keys) == maxRecordQueryKeys {
			more++
			continue
		}
		keys = append(keys, k)
		if seen != nil {
			seen[k] = struct{}{}
		} else if len(keys) > scan {
			seen = make(map[string]struct{}, maxRecordQueryKeys)
			for _, x := range keys {
				seen[x] = struct{}{}
			}
		}
	}
	if more > 0 {
		keys = append(keys, "(+"+strconv.Itoa(more)+" more parameters)")
	}
	return keys
}

// queryParams counts the parameters of a raw query ('&'-separated, empty
// ones not counted), stopping once past max.
func queryParams(q string, max int) int {
	n := 0
	for q != "" && n <= max {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		if kv != "" {
			n++
		}
	}
	return n
}

// clip cuts s to at most n bytes (on a UTF-8 boundary when s is valid there)
// and says how much was cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > n-utf8.UTFMax && cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "...[cut " + strconv.Itoa(len(s)-cut) + " bytes]"
}

func (g *Gateway) logDecision(rc *reqCtx, result string) {
	switch {
	case result == audit.DecisionAllow && rc.err == nil:
		if g.logger.Enabled(context.Background(), slog.LevelInfo) { // skip building attrs when off
			g.logger.Info("allow", oplog.IDKey, rc.id, oplog.SandboxKey, rc.cc.sb.info.ID, oplog.KindKey, rc.kind, oplog.HostKey, rc.host, oplog.PortKey, rc.port)
		}
	case result == audit.DecisionAllow:
		g.logger.Error("upstream failure", oplog.IDKey, rc.id, oplog.SandboxKey, rc.cc.sb.info.ID, oplog.KindKey, rc.kind, oplog.HostKey, rc.host, oplog.PortKey, rc.port, oplog.ErrorKey, rc.err)
	default:
		g.logger.Warn("deny", oplog.IDKey, rc.id, oplog.SandboxKey, rc.cc.sb.info.ID, oplog.KindKey, rc.kind, oplog.HostKey, rc.host, oplog.PortKey, rc.port, oplog.ErrorKey, rc.err)
	}
}
