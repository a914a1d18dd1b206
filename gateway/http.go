package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/policy"
)

// httpSession is an HTTP/1.1 request loop on one client connection: the explicit
// proxy, a transparent plain-HTTP connection or an intercepted TLS connection.
type httpSession struct {
	g    *Gateway
	cc   *clientConn
	conn net.Conn // the raw connection, or the tls.Conn when intercepted
	rd   connReader
	br   *bufio.Reader
	bw   *bufio.Writer
	dw   deadlineWriter // under bw: the client connection with a write deadline per write

	// Pinned destination: when pinned, every request must name pinHost:pinPort.
	pinned      bool
	pinHost     string
	pinPort     int
	defaultPort int
	scheme      string
	intercepted bool
	sni         string

	// rawHost is the Host header as sent (net/http drops it for absolute-form
	// requests), peeked by the explicit proxy (explicitConn.readHead).
	rawHost string

	up      *upstreamConn // upstream kept for the next request
	untrack func()

	sufHost string
	suf     []string

	h2 *h2Stream // an HTTP/2 stream (h2.go): one request, answered on the stream

	bufs *sessionBufs // br and bw when they came from the gateway's pool (tunnel.go)
}

func (g *Gateway) newSession(cc *clientConn, conn net.Conn, br *bufio.Reader) *httpSession {
	s := &httpSession{g: g, cc: cc, conn: conn, scheme: "http", defaultPort: 80}
	s.rd = connReader{c: conn}
	s.dw = deadlineWriter{c: conn, timeout: g.cfg.IdleTimeout, batch: batchOf(conn)}
	if br == nil {
		s.takeBuffers() // pooled (tunnel.go)
		return s
	}
	s.br = br
	s.bw = bufio.NewWriterSize(s.dw, 4096)
	return s
}

// newPinnedSession is a session whose every request must name host:port: a
// transparent plain-HTTP connection, plaintext HTTP inside a CONNECT, an
// intercepted TLS connection. head holds bytes a peeker already read from
// conn; they are read first.
func (g *Gateway) newPinnedSession(cc *clientConn, conn net.Conn, head []byte, host string, port int) *httpSession {
	s := g.newSession(cc, conn, nil)
	if len(head) > 0 {
		s.br = bufio.NewReaderSize(io.MultiReader(bytesReader(head), &s.rd), maxPeekBytes)
	}
	s.pinned, s.pinHost, s.pinPort, s.defaultPort = true, host, port, port
	return s
}

func bytesReader(b []byte) io.Reader {
	c := make([]byte, len(b))
	copy(c, b)
	return &sliceReader{b: c}
}

type sliceReader struct{ b []byte }

func (r *sliceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

func (s *httpSession) suffixes(host string) []string {
	if host != s.sufHost {
		s.sufHost, s.suf = host, hostname.Suffixes(host)
	}
	return s.suf
}

// dropBuffers lets the session's buffers go once a tunnel owns its
// connection: nothing reads or writes through them again.
func (s *httpSession) dropBuffers() {
	s.br, s.bw = nil, nil
}

// release hands the kept upstream back to the pool (or closes it).
func (s *httpSession) release() {
	if s.up != nil {
		s.untrack()
		s.g.pool.put(s.up)
		s.up = nil
	}
}

func (s *httpSession) dropUpstream() {
	if s.up != nil {
		s.untrack()
		s.up.nc.Close()
		s.up = nil
	}
}

// readRequest waits for the next request: IdleTimeout for its first byte,
// ReadHeaderTimeout and MaxHeaderBytes for its header block.
func (s *httpSession) readRequest() (*http.Request, error) {
	g := s.g
	s.cc.idle.Store(true)
	// The header limit counts from the first byte read for this request.
	s.rd.limited, s.rd.limit, s.rd.progress = true, g.cfg.MaxHeaderBytes-s.br.Buffered(), 0
	s.conn.SetReadDeadline(time.Now().Add(g.cfg.IdleTimeout))
	if _, err := s.br.Peek(1); err != nil {
		s.cc.idle.Store(false)
		return nil, err
	}
	s.cc.idle.Store(false)
	if g.isDraining() {
		return nil, net.ErrClosed
	}
	s.conn.SetReadDeadline(time.Now().Add(g.cfg.ReadHeaderTimeout))
	req, err := http.ReadRequest(s.br)
	s.rd.limited, s.rd.progress = false, g.cfg.IdleTimeout
	s.conn.SetReadDeadline(time.Time{})
	return req, err
}

// loop serves requests until the connection ends or one of them may not be
// followed by another.
func (s *httpSession) loop(kind policy.Kind) {
	defer s.release()
	for {
		req, err := s.readRequest()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isTimeout(err) && s.br.Buffered() == 0 {
				return
			}
			rc := s.g.newReqCtx(s.cc, s)
			rc.kind = kind
			s.g.serveRefused(rc, deny(ReasonBadRequest, "unreadable request: %v", err))
			return
		}
		rc := s.g.newReqCtx(s.cc, s)
		rc.req = req
		rc.kind = policy.KindHTTP
		if !s.g.serve(rc) {
			return
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// normalizeRequest finds the one host a request names and checks it against the
// Host header and the connection's pinned destination.
func (s *httpSession) normalizeRequest(rc *reqCtx) error {
	req := rc.req
	rc.scheme = s.scheme
	if req.ProtoMajor != 1 && (s.h2 == nil || req.ProtoMajor != 2) {
		return deny(ReasonBadRequest, "protocol %s not supported here", req.Proto)
	}
	if req.Method == http.MethodConnect {
		return deny(ReasonHostMismatch, "CONNECT inside a tunnel or transparent connection")
	}
	if req.Host == "" && req.ProtoMinor >= 1 {
		return deny(ReasonBadRequest, "missing Host header")
	}
	// URL host: absolute-form only.
	var urlHost string
	var urlPort int
	if req.URL.IsAbs() || req.URL.Host != "" {
		sch := strings.ToLower(req.URL.Scheme)
		if sch != s.scheme {
			return deny(ReasonHostMismatch, "request URL scheme %q on a %s connection", req.URL.Scheme, s.scheme)
		}
		h, p, err := hostname.SplitHostPort(req.URL.Host, s.defaultPort)
		if err != nil {
			return deny(ReasonBadDestination, "request URL host: %v", err)
		}
		urlHost, urlPort = h, p
	} else if !s.pinned {
		return deny(ReasonBadRequest, "origin-form request to the explicit proxy (want an absolute URL or CONNECT)")
	}
	var hostHdr string
	var hostPort int
	rawHost := req.Host
	if !s.pinned {
		if s.rawHost == "" {
			return deny(ReasonBadRequest, "missing Host header")
		}
		rawHost = s.rawHost
	}
	if rawHost != "" {
		h, p, err := hostname.SplitHostPort(rawHost, s.defaultPort)
		if err != nil {
			return deny(ReasonBadDestination, "Host header: %v", err)
		}
		hostHdr, hostPort = h, p
	}
	switch {
	case s.pinned:
		rc.host, rc.port = s.pinHost, s.pinPort
	case urlHost != "":
		rc.host, rc.port = urlHost, urlPort
	}
	if urlHost != "" && (urlHost != rc.host || urlPort != rc.port) {
		return deny(ReasonHostMismatch, "request URL names %s:%d on a connection to %s:%d", urlHost, urlPort, rc.host, rc.port)
	}
	if hostHdr != "" && (hostHdr != rc.host || hostPort != rc.port) {
		return deny(ReasonHostMismatch, "Host header names %s:%d, request is for %s:%d", hostHdr, hostPort, rc.host, rc.port)
	}
	if rc.host == "" {
		return deny(ReasonBadRequest, "request names no host (missing :authority)")
	}
	if ip, ok := hostname.ParseIP(rc.host); ok {
		rc.ip = ip
	}
	if max := s.g.cfg.MaxQueryParams; queryParams(req.URL.RawQuery, max) > max {
		return deny(ReasonTooManyParams, "more than %d query parameters (max_query_params)", max)
	}
	if hasDotSegment(req.URL.Path) {
		return deny(ReasonBadRequest, "the path has a . or .. segment (plain or percent-encoded): policy would decide on another path than the server serves")
	}
	return nil
}

// hasDotSegment reports whether the decoded path has a "." or ".." segment.
// Policy decides on the path as sent; a server that resolves the segments
// (RFC 3986, 5.2.4) would serve another one: /v1/../admin passes a rule on
// /v1/ and reaches /admin.
func hasDotSegment(path string) bool {
	for path != "" {
		var seg string
		seg, path, _ = strings.Cut(path, "/")
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// normalizeConnect parses a CONNECT target (authority form, port required) and
// checks the Host header, if any, names the same.
func (s *httpSession) normalizeConnect(rc *reqCtx) error {
	req := rc.req
	target := req.RequestURI
	if strings.Contains(target, "/") || !strings.Contains(target, ":") {
		return deny(ReasonBadRequest, "CONNECT target %q: want host:port", target)
	}
	h, p, err := hostname.SplitHostPort(target, 0)
	if err != nil {
		return deny(ReasonBadDestination, "CONNECT target: %v", err)
	}
	rc.host, rc.port = h, p
	// net/http sets req.Host to the CONNECT target and drops the Host header;
	// the explicit front kept the header as sent (rawHost).
	if host := s.rawHost; host != "" && host != target {
		hh, hp, err := hostname.SplitHostPort(host, p)
		if err != nil || hh != h || hp != p {
			return deny(ReasonHostMismatch, "CONNECT %s with Host %q", target, host)
		}
	}
	if ip, ok := hostname.ParseIP(h); ok {
		rc.ip = ip
	}
	return rc.g.claimTunnel(rc)
}

// upstream makes rc.up the upstream connection for rc's destination: the one
// kept from the previous request, one from the pool, or a new guarded dial.
func (s *httpSession) upstream(rc *reqCtx, fresh bool) error {
	key := upstreamKey{sb: s.cc.sb, host: rc.host, port: rc.port, tls: s.scheme == "https"}
	if s.up != nil && (fresh || s.up.key != key) {
		if fresh {
			s.dropUpstream()
		} else {
			s.release()
		}
	}
	if s.h2 != nil && s.up == nil {
		u, shared, err := s.h2.c.upstream(rc, key, fresh)
		if err != nil {
			return err
		}
		if shared {
			rc.up, rc.ip, rc.parent = u, u.ip, u.parent
			return nil
		}
		if u != nil {
			s.up = u
			s.untrack = s.cc.track(u.nc)
		}
	}
	if s.up == nil && !fresh {
		if u := s.g.pool.get(key); u != nil {
			s.up = u
			s.untrack = s.cc.track(u.nc)
		}
	}
	if s.up == nil {
		u, err := s.g.dialUpstream(rc, key, false)
		if err != nil {
			return err
		}
		s.up = u
		s.untrack = s.cc.track(u.nc)
	}
	rc.up = s.up
	rc.ip, rc.parent = s.up.ip, s.up.parent
	return nil
}

// dialUpstream makes a new upstream connection: guarded dial, then verified
// TLS for https, offering h2 when offerH2 (the protocol chosen is u.proto).
func (g *Gateway) dialUpstream(rc *reqCtx, key upstreamKey, offerH2 bool) (*upstreamConn, error) {
	if key.tls {
		g.rootsUp.load() // parses while the name resolves and the connection opens
	}
	c, at, err := g.dialer.dialHost(context.Background(), rc.cc.sb.info.ID, key.host, key.port)
	rc.dialedAt(at)
	if err != nil {
		return nil, err
	}
	proto := ""
	var ahead *readAhead
	if key.tls {
		var under net.Conn = c
		if ahead = newReadAhead(c, &g.tlsBufs); ahead != nil {
			under = ahead // one read(2) brings every record the socket holds (tlsio.go)
		}
		tc := tls.Client(under, g.upstreamTLS(key.host, offerH2))
		ctx, cancel := context.WithTimeout(context.Background(), g.cfg.HandshakeTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			c.Close()
			return nil, fail(ReasonUpstreamTLS, http.StatusBadGateway, fmt.Errorf("tls to %s: %w", key.host, err))
		}
		proto = tc.ConnectionState().NegotiatedProtocol
		if proto != "" && proto != "http/1.1" && !(offerH2 && proto == h2ALPN) {
			tc.Close()
			return nil, fail(ReasonUpstreamTLS, http.StatusBadGateway, fmt.Errorf("tls to %s negotiated %q", key.host, proto))
		}
		c = tc
	}
	u := newUpstreamConn(key, c, at.ip)
	u.parent, u.proto = at.parent, proto
	u.rd.ahead = ahead
	return u, nil
}

// hopHeaders are removed in both directions (RFC 9110 section 7.6.1).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Upgrade"}

func removeHop(h http.Header) (upgrade string) {
	for _, f := range h["Connection"] {
		for _, name := range strings.Split(f, ",") {
			name = strings.TrimSpace(name)
			if name != "" && !strings.EqualFold(name, "upgrade") {
				h.Del(name)
			}
		}
	}
	if hasToken(h["Connection"], "upgrade") {
		upgrade = h.Get("Upgrade")
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
	return upgrade
}

func hasToken(vals []string, tok string) bool {
	for _, v := range vals {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), tok) {
				return true
			}
		}
	}
	return false
}

// exchange is one request/response with the upstream: what forward and
// forwardH2 share.
type exchange struct {
	resp        *http.Response
	upgrade     string // "websocket" when the client asked for one
	clientClose bool
}

// sendUpstream sends rc's request on the session's upstream connection
// (retrying once, without a body, when a reused connection turned out dead),
// reads the response header and scrubs an injected request's response. Nothing
// has been written to the client when it returns.
func (s *httpSession) sendUpstream(rc *reqCtx) (exchange, error) {
	g := s.g
	req := rc.req
	x := exchange{clientClose: req.Close}
	teTrailers := hasToken(req.Header["Te"], "trailers")
	upgrade := removeHop(req.Header)
	if teTrailers && rc.up.h2 != nil {
		req.Header.Set("Te", "trailers") // the one TE HTTP/2 allows; gRPC servers want it
	}
	websocket := strings.EqualFold(upgrade, "websocket")
	if upgrade != "" && !websocket {
		upgrade = "" // h2c and other upgrades are never passed through
	}
	x.upgrade = upgrade
	if websocket {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", upgrade)
		if inj := g.cfg.Injector; inj != nil && inj.HoldsPlaceholders(sandboxOf(rc)) {
			// Compressed frames could not be checked for a placeholder.
			req.Header.Del("Sec-Websocket-Extensions")
		}
		g.stripWSExtensions(req.Header)
	}
	if hasToken(req.Header["Expect"], "100-continue") {
		req.Header.Del("Expect")
		if s.h2 == nil { // the HTTP/2 server answers 100 Continue itself when the body is read
			s.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
			if err := s.bw.Flush(); err != nil {
				return x, fail(ReasonUpstream, http.StatusBadGateway, err)
			}
		}
	}
	req.Host = hostname.JoinHostPort(rc.host, rc.port)
	if rc.port == s.defaultPort {
		req.Host = rc.host
		if strings.Contains(rc.host, ":") {
			req.Host = "[" + rc.host + "]"
		}
	}
	req.URL.Scheme, req.URL.Host = "", ""
	req.Close = false
	req.RequestURI = ""
	replayable := req.Body == nil || req.Body == http.NoBody
	bodyErrs := &bodyErrBox{}
	if !replayable {
		var body io.Reader = bodyErrReader{req.Body, bodyErrs}
		if s.h2 != nil {
			s.h2.bodyErr = bodyErrs
			req.Body = h2Body{atomicCountReader{body, &s.h2.sent}, req.Body}
		} else {
			req.Body = countReadCloser{countReader{body, &rc.bytesUp}, req.Body}
		}
	}

	var resp *http.Response
	for attempt := 0; ; attempt++ {
		up := rc.up
		var err error
		reused := false
		if up.h2 != nil {
			resp, err = s.roundTripH2(up, req) // shared by streams: no reuse bookkeeping, no retry
		} else {
			reused = up.used
			up.used = true
			resp, err = up.roundTrip(req, g.cfg.ResponseHeaderTimeout, g.cfg.MaxHeaderBytes)
		}
		if err == nil {
			break
		}
		s.dropUpstream()
		if bodyErr := bodyErrs.get(); bodyErr != nil {
			if err := rc.lateDenial(bodyErr); err != nil {
				return x, err // content inspection denied the body mid-stream
			}
			// A streamed body scan cut the request off before a placeholder left.
			var d *denial
			if serr := secretsErr(bodyErr); errors.As(serr, &d) {
				return x, serr
			}
		}
		if reused && replayable && attempt == 0 {
			if err := s.upstream(rc, true); err != nil {
				return x, err
			}
			continue
		}
		if isTimeout(err) {
			return x, fail(ReasonTimeout, http.StatusGatewayTimeout, err)
		}
		return x, fail(ReasonUpstream, http.StatusBadGateway, err)
	}
	resp, err := s.reauthorize(rc, resp) // secrets.go: a 401 to a minted token
	if err != nil {
		return x, err
	}
	if err := s.g.scrub(rc, resp); err != nil {
		s.dropUpstream()
		return x, err
	}
	if err := s.g.inspectResponse(rc, resp, s); err != nil {
		s.dropUpstream()
		return x, err
	}
	x.resp = resp
	return x, nil
}

// forward sends rc's request upstream and relays the response on the
// session's own connection (transparent HTTP and intercepted requests).
func (s *httpSession) forward(rc *reqCtx) error {
	g := s.g
	x, err := s.sendUpstream(rc)
	if err != nil {
		return err
	}
	resp, upgrade, clientClose := x.resp, x.upgrade, x.clientClose
	websocket := upgrade != ""
	rc.status = resp.StatusCode
	rc.responded = true
	upClose := resp.Close
	removeHop(resp.Header)
	resp.ProtoMajor, resp.ProtoMinor, resp.Proto = 1, 1, "HTTP/1.1"

	if resp.StatusCode == http.StatusSwitchingProtocols {
		if !websocket {
			s.dropUpstream()
			return fail(ReasonUpstream, http.StatusBadGateway, errors.New("upstream switched protocols without a websocket upgrade"))
		}
		resp.Header.Set("Connection", "Upgrade")
		resp.Header.Set("Upgrade", upgrade)
		if err := resp.Write(s.bw); err != nil {
			return err
		}
		if err := s.bw.Flush(); err != nil {
			return err
		}
		up := s.up
		s.untrack()
		s.up = nil
		defer up.nc.Close()
		untrack := s.cc.track(up.nc)
		defer untrack()
		cHead, _ := s.br.Peek(s.br.Buffered())
		uHead, _ := up.br.Peek(up.br.Buffered())
		s.conn.SetDeadline(time.Time{})
		rc.tunnel = false
		g.holdOpen(rc) // re-decided on a policy change, as a tunnel is
		rc.wsScan = g.newWSScan(rc)
		pipe(rc, s.conn, cHead, up.nc, uHead, g.streamGuard(rc, true))
		return nil
	}

	keep := !clientClose && !g.isDraining()
	resp.Close = !keep
	if resp.Body != nil && resp.Body != http.NoBody {
		resp.Body = countReadCloser{countReader{resp.Body, &rc.bytesDown}, resp.Body}
	}
	if resp.ContentLength < 0 && !isChunked(resp.TransferEncoding) && resp.Body != http.NoBody {
		keep = false // delimited by close; Response.Write says Connection: close
	}
	var from *upstreamConn // the HTTP/1.1 upstream the body is read from
	if rc.up.h2 == nil {
		from = rc.up
	}
	err = s.writeResponse(resp, from)
	upOK := err == nil && !upClose
	if !upOK {
		s.dropUpstream()
	}
	if err != nil {
		return relayFailure(rc, err)
	}
	rc.keepAlive = keep
	return nil
}

func isChunked(te []string) bool { return len(te) > 0 && te[0] == "chunked" }
