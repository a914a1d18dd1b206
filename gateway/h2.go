package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/policy"
)

// HTTP/2 on a sandbox's connection: an intercepted TLS connection whose client
// picked h2 by ALPN, or plaintext that starts with the HTTP/2 client preface
// (h2c with prior knowledge) on the explicit listener, the transparent
// listener or inside a CONNECT. net/http's HTTP/2 server (one http.Server per
// connection, serving just it) reads the frames under the limits of Config
// (H2*); every stream is one request run
// through the one pipeline (serve) on a per-stream httpSession whose h2 field
// is set: normalize, screen, decide, reserve, inject and dial as for HTTP/1.1,
// then relay (forwardH2) and, on error, refuse answer on the stream only.
// One audit record per stream (finish).

// h2Preface is the HTTP/2 client connection preface (RFC 9113 section 3.4).
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// h2ALPN is HTTP/2's ALPN protocol id over TLS (RFC 9113 section 3.2).
const h2ALPN = "h2"

// h2Target is what an HTTP/2 connection's streams may name.
type h2Target struct {
	scheme      string // https (intercepted) or http (h2c)
	intercepted bool
	sni         string
	// host and port pin every stream (an intercepted connection, h2c inside a
	// CONNECT). host "" (h2c on a listener): each stream names its own host
	// by :authority; port is then the original destination's (transparent,
	// a stream naming another port is host_mismatch) or 0 (explicit proxy:
	// the authority's port, else defaultPort).
	host        string
	port        int
	defaultPort int
}

// h2Conn is one sandbox HTTP/2 connection being served.
type h2Conn struct {
	g      *Gateway
	cc     *clientConn
	conn   net.Conn
	t      h2Target
	resets *rate.Limiter // streams the client cancelled (rapid reset)
	active atomic.Int64  // streams being served

	mu     sync.Mutex
	ups    map[upstreamKey]*upstreamConn // HTTP/2 upstream connections, shared by the streams
	h1only map[upstreamKey]bool          // upstreams that chose http/1.1 by ALPN
	closed bool
}

// h2Stream is the HTTP/2 side of one stream's httpSession.
type h2Stream struct {
	c      *h2Conn
	w      http.ResponseWriter
	rctl   *http.ResponseController
	abort  bool               // the response had begun when the stream failed: reset it
	cancel context.CancelFunc // ends the upstream request
	// streamed: a gRPC body, checked for placeholders as it streams, through
	// a StreamGuard when the sandbox holds placeholders (checkStream).
	streamed bool
	// What the upstream read of the request body, on its own goroutine when
	// it is HTTP/2: bytes, and the first error (a guard's denial).
	sent    atomic.Int64
	bodyErr *bodyErrBox
}

// h2Body is a stream's request body as it goes upstream.
type h2Body struct {
	atomicCountReader
	io.Closer
}

// h2Server is the net/http server of one sandbox HTTP/2 connection, with the
// gateway's limits: HTTP/2 only (over TLS, or h2c with prior knowledge; never
// HTTP/1), c's streams as its handler. ConnState reports the connection's end
// to l, so Serve returns once the connection is done.
func (g *Gateway) h2Server(c *h2Conn, l *connListener) *http.Server {
	cfg := &g.cfg
	var p http.Protocols
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:        c,
		Protocols:      &p,
		MaxHeaderBytes: cfg.MaxHeaderBytes, // the stream's header list limit
		IdleTimeout:    cfg.IdleTimeout,
		ErrorLog:       log.New(io.Discard, "", 0),
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          cfg.H2MaxConcurrentStreams,
			MaxReadFrameSize:              cfg.H2MaxReadFrameSize,
			MaxReceiveBufferPerConnection: cfg.H2ConnWindow,
			MaxReceiveBufferPerStream:     cfg.H2StreamWindow,
			MaxDecoderHeaderTableSize:     4096,
			MaxEncoderHeaderTableSize:     4096,
			WriteByteTimeout:              cfg.IdleTimeout,
			SendPingTimeout:               cfg.IdleTimeout,
			PingTimeout:                   cfg.HandshakeTimeout,
		},
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				l.Close()
			}
		},
	}
}

// connListener hands http.Server one connection, then waits until Close (the
// connection ended) and reports itself closed, so Serve returns.
type connListener struct {
	c    net.Conn // nil once accepted; read by Serve's goroutine only
	addr net.Addr
	done chan struct{}
	once sync.Once
}

func newConnListener(c net.Conn) *connListener {
	return &connListener{c: c, addr: c.LocalAddr(), done: make(chan struct{})}
}

func (l *connListener) Accept() (net.Conn, error) {
	if c := l.c; c != nil {
		l.c = nil
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }

// errNoH2Dial: the HTTP/2 transport only ever takes a connection dialUpstream
// made (through the guarded dialer and the parent proxy); it dials nothing.
var errNoH2Dial = errors.New("gateway: the HTTP/2 upstream transport never dials")

// h2ConnKey carries the connection dialUpstream made to the transport's
// DialTLSContext (NewClientConn).
type h2ConnKey struct{}

// h2Transport is the client side for HTTP/2 upstreams: net/http's HTTP/2
// only, handed each connection dialUpstream made (NewClientConn, through the
// context); it never dials, honours no proxy variables and never compresses
// (Accept-Encoding goes upstream as the sandbox sent it).
func (g *Gateway) h2Transport() *http.Transport {
	var p http.Protocols
	p.SetHTTP2(true)
	refuse := func(context.Context, string, string) (net.Conn, error) { return nil, errNoH2Dial }
	return &http.Transport{
		Protocols:   &p,
		Proxy:       nil,
		DialContext: refuse,
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			if c, ok := ctx.Value(h2ConnKey{}).(*tls.Conn); ok {
				return c, nil
			}
			return nil, errNoH2Dial
		},
		DisableCompression:     true,
		MaxResponseHeaderBytes: int64(g.cfg.MaxHeaderBytes),
		HTTP2: &http.HTTP2Config{
			MaxReadFrameSize: g.cfg.H2MaxReadFrameSize,
			SendPingTimeout:  g.cfg.IdleTimeout,
			PingTimeout:      g.cfg.HandshakeTimeout,
			WriteByteTimeout: g.cfg.IdleTimeout,
		},
	}
}

// serveH2 serves one HTTP/2 connection until it ends. conn must deliver the
// client preface first (h2c), or be the *tls.Conn whose client picked h2.
func (g *Gateway) serveH2(cc *clientConn, conn net.Conn, t h2Target) {
	c := &h2Conn{
		g: g, cc: cc, conn: conn, t: t,
		resets: rate.NewLimiter(rate.Limit(g.cfg.H2MaxResetsPerSecond), g.cfg.H2MaxResetBurst),
		ups:    map[upstreamKey]*upstreamConn{},
		h1only: map[upstreamKey]bool{},
	}
	cc.idle.Store(true)
	defer cc.idle.Store(false)
	l := newConnListener(conn)
	g.h2Server(c, l).Serve(l) // returns once the connection is closed
	c.close()
}

// close ends the connection's HTTP/2 upstreams.
func (c *h2Conn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for k, u := range c.ups {
		u.h2.Close()
		u.nc.Close()
		delete(c.ups, k)
	}
}

// ServeHTTP serves one stream: one request through the pipeline.
func (c *h2Conn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c.active.Add(1) == 1 {
		c.cc.idle.Store(false)
	}
	defer func() {
		if c.active.Add(-1) == 0 {
			c.cc.idle.Store(true)
		}
	}()
	st := &h2Stream{c: c, w: w, rctl: http.NewResponseController(w)}
	s := c.session(st, r)
	rc := c.g.newReqCtx(c.cc, s)
	rc.req, rc.kind = r, policy.KindHTTP
	sb, max := c.cc.sb, c.g.cfg.H2MaxStreamsPerSandbox
	defer sb.streams.Add(-1)
	if c.g.isDraining() {
		c.g.serveRefused(rc, &denial{reason: ReasonShuttingDown, status: http.StatusServiceUnavailable, msg: "the gateway is shutting down"})
		return
	}
	if sb.streams.Add(1) > int64(max) {
		c.g.serveRefused(rc, &denial{reason: ReasonStreamLimit, status: http.StatusTooManyRequests,
			msg: fmt.Sprintf("sandbox %s has %d HTTP/2 streams in flight (h2_max_streams_per_sandbox)", sb.info.ID, max)})
		return
	}
	c.g.serve(rc)
	s.release()
	if st.cancel != nil {
		st.cancel()
	}
	if r.Context().Err() != nil && !c.resets.Allow() {
		// Streams cancelled faster than H2MaxResetsPerSecond past the burst:
		// every one of them cost a policy decision and an audit record.
		c.g.logger.Warn("http/2 connection closed: too many cancelled streams", "sandbox", c.cc.sb.info.ID)
		c.conn.Close()
	}
	if st.abort {
		panic(http.ErrAbortHandler) // resets this stream only
	}
}

// session is the stream's httpSession: pinned to the connection's
// destination, or to the one the stream's :authority names (h2c).
func (c *h2Conn) session(st *h2Stream, r *http.Request) *httpSession {
	t := c.t
	s := &httpSession{
		g: c.g, cc: c.cc, conn: c.conn, scheme: t.scheme, defaultPort: t.defaultPort,
		intercepted: t.intercepted, sni: t.sni, h2: st,
		pinned: true, pinHost: t.host, pinPort: t.port,
	}
	s.rd = connReader{c: c.conn}
	if t.host == "" {
		if h, p, err := hostname.SplitHostPort(r.Host, t.defaultPort); err == nil {
			s.pinHost = h
			if s.pinPort == 0 {
				s.pinPort = p
			}
		}
	}
	return s
}

// upstream finds the HTTP/2 upstream connection for key or dials one,
// offering h2 and http/1.1. It returns (u, true) for an HTTP/2 connection
// shared by the streams, (u, false) for a new HTTP/1.1 connection the stream
// owns, and (nil, false) when the stream should use the HTTP/1.1 pool (plain
// http, or an upstream known to speak only http/1.1).
func (c *h2Conn) upstream(rc *reqCtx, key upstreamKey, fresh bool) (*upstreamConn, bool, error) {
	if !key.tls {
		return nil, false, nil // h2c upstream is never assumed: plain HTTP/1.1
	}
	c.mu.Lock()
	defer c.mu.Unlock() // one destination per intercepted connection: dials do not wait on each other
	if u := c.ups[key]; u != nil {
		if !fresh && u.h2.Err() == nil && u.h2.Available() > 0 {
			return u, true, nil
		}
		delete(c.ups, key)
		u.h2.Close()
		u.nc.Close()
	}
	if c.h1only[key] {
		return nil, false, nil
	}
	u, err := c.g.dialUpstream(rc, key, true)
	if err != nil {
		return nil, false, err
	}
	if u.proto != h2ALPN {
		c.h1only[key] = true
		return u, false, nil
	}
	ctx := context.WithValue(context.Background(), h2ConnKey{}, u.nc)
	cc, err := c.g.h2tr.NewClientConn(ctx, "https", hostname.JoinHostPort(key.host, key.port))
	if err != nil {
		u.nc.Close()
		return nil, false, fail(ReasonUpstream, http.StatusBadGateway, err)
	}
	u.h2 = cc
	if c.closed {
		cc.Close()
		u.nc.Close()
		return nil, false, fail(ReasonUpstream, http.StatusBadGateway, net.ErrClosed)
	}
	c.cc.track(u.nc)
	c.ups[key] = u
	return u, true, nil
}

// roundTripH2 sends req on an HTTP/2 upstream connection and waits at most
// ResponseHeaderTimeout for the response header. The request's context is
// the stream's: a stream the client resets is reset upstream too.
func (s *httpSession) roundTripH2(u *upstreamConn, req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	s.h2.cancel = cancel
	timer := time.AfterFunc(s.g.cfg.ResponseHeaderTimeout, cancel)
	out := req.WithContext(ctx)
	out.URL.Scheme, out.URL.Host = "https", req.Host
	resp, err := u.h2.RoundTrip(out)
	if !timer.Stop() && err != nil {
		return nil, timeoutError{err}
	}
	return resp, err
}

// timeoutError is an upstream that sent no response header in time.
type timeoutError struct{ error }

func (timeoutError) Timeout() bool { return true }

// forwardH2 sends rc's request upstream and relays the response on the
// stream: header, body as it arrives (flushed chunk by chunk, so gRPC
// streams flow both ways), then trailers. A streamed body whose guard found
// a placeholder ends the stream with that flagged denial.
func (s *httpSession) forwardH2(rc *reqCtx) error {
	err := s.relayH2(rc)
	rc.bytesUp = s.h2.sent.Load()
	if b := s.h2.bodyErr; b != nil {
		var d *denial
		if serr := secretsErr(b.get()); errors.As(serr, &d) {
			s.dropUpstream()
			return serr // the guard cut the body off before a placeholder left
		}
	}
	return err
}

// relayH2 is forwardH2's exchange.
func (s *httpSession) relayH2(rc *reqCtx) error {
	if u := s.up; u != nil {
		// An HTTP/1.1 upstream has no stream to reset: a stream the client
		// cancels (or a connection that ends) cuts its exchange short at once.
		stop := context.AfterFunc(rc.req.Context(), func() { u.nc.SetDeadline(time.Unix(1, 0)) })
		defer func() {
			if !stop() {
				s.dropUpstream() // the deadline may have hit it: never reuse
			}
		}()
	}
	x, err := s.sendUpstream(rc)
	if err != nil {
		return err
	}
	resp := x.resp
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		s.dropUpstream()
		return fail(ReasonUpstream, http.StatusBadGateway, errors.New("upstream switched protocols on an HTTP/2 stream"))
	}
	rc.status, rc.responded = resp.StatusCode, true
	upClose := resp.Close
	removeHop(resp.Header)
	w := s.h2.w
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	if resp.ContentLength < 0 {
		h.Del("Content-Length")
	}
	// The header goes out with the first body bytes, or with END_STREAM
	// when there are none: a gRPC trailers-only answer stays one frame.
	w.WriteHeader(resp.StatusCode)
	if err := s.h2.copyBody(rc, resp.Body); err != nil {
		s.dropUpstream()
		return err
	}
	for k, vs := range resp.Trailer {
		h[http.TrailerPrefix+k] = vs
	}
	if isGRPC(rc.req) {
		rc.grpcStatus = resp.Trailer.Get("Grpc-Status")
		if rc.grpcStatus == "" {
			rc.grpcStatus = resp.Header.Get("Grpc-Status") // trailers-only
		}
	}
	if upClose {
		s.dropUpstream()
	}
	return nil
}

// copyBody relays a response body to the stream, flushing every chunk. A
// client that reads nothing for IdleTimeout (flow control never reopens)
// fails the write and the stream is reset.
func (st *h2Stream) copyBody(rc *reqCtx, body io.Reader) error {
	bp := st.c.g.h2bufs.Get().(*[]byte)
	defer st.c.g.h2bufs.Put(bp)
	buf := *bp
	timeout := st.c.g.cfg.IdleTimeout
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			rc.bytesDown += int64(n)
			st.rctl.SetWriteDeadline(time.Now().Add(timeout))
			if _, err := st.w.Write(buf[:n]); err != nil {
				return fail("client_closed", http.StatusBadGateway, err)
			}
			if err := st.rctl.Flush(); err != nil {
				return fail("client_closed", http.StatusBadGateway, err)
			}
		}
		if rerr == io.EOF {
			st.rctl.SetWriteDeadline(time.Time{})
			return nil
		}
		if rerr != nil {
			return relayFailure(rc, rerr)
		}
	}
}

// refuse answers a refusal on the stream (refuse, pipeline.go): the status,
// X-Airlock-Decision and X-Airlock-Reason as for HTTP/1.1 and the short body;
// a gRPC request gets a gRPC status instead (HTTP 200, trailers only,
// grpc-status and grpc-message naming the reason and decision id), which is
// what gRPC clients read. A stream whose response had begun is reset.
func (st *h2Stream) refuse(rc *reqCtx, status int, reason, body string) {
	if rc.responded {
		st.abort = true
		return
	}
	rc.status, rc.responded = status, true
	h := st.w.Header()
	clear(h)
	h.Set("X-Airlock-Decision", rc.id)
	h.Set("X-Airlock-Reason", reason)
	if isGRPC(rc.req) {
		rc.grpcStatus = strconv.Itoa(grpcCodeOf(status))
		h.Set("Content-Type", "application/grpc")
		h.Set("Grpc-Status", rc.grpcStatus)
		h.Set("Grpc-Message", grpcEscape(strings.TrimSpace(body)))
		st.w.WriteHeader(http.StatusOK)
		return
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	st.w.WriteHeader(status)
	if rc.req.Method != http.MethodHead {
		io.WriteString(st.w, body)
	}
}

// isGRPC reports whether r is a gRPC call (content-type application/grpc,
// application/grpc+proto, ...).
func isGRPC(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+") || strings.HasPrefix(ct, "application/grpc;")
}

// gRPC status codes a refusal maps to.
const (
	grpcInvalidArgument   = 3
	grpcDeadlineExceeded  = 4
	grpcPermissionDenied  = 7
	grpcResourceExhausted = 8
	grpcUnavailable       = 14
	grpcUnauthenticated   = 16
)

// grpcCodeOf maps a refusal's HTTP status to a gRPC status code.
func grpcCodeOf(status int) int {
	switch {
	case status == http.StatusBadRequest:
		return grpcInvalidArgument
	case status == http.StatusUnauthorized || status == http.StatusProxyAuthRequired:
		return grpcUnauthenticated
	case status == http.StatusRequestTimeout || status == http.StatusGatewayTimeout:
		return grpcDeadlineExceeded
	case status == http.StatusTooManyRequests:
		return grpcResourceExhausted
	case status >= 500:
		return grpcUnavailable
	}
	return grpcPermissionDenied
}

// grpcEscape percent-encodes a grpc-message value (gRPC over HTTP/2:
// bytes outside printable ASCII, and '%').
func grpcEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '%' {
			b.WriteString("%" + strings.ToUpper(strconv.FormatUint(uint64(c)|0x100, 16)[1:]))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// isH2Preface waits (under the caller's read deadline) for the first bytes
// of br and reports whether they are the HTTP/2 client preface. It stops at
// the first byte that differs, so an HTTP/1.x request ("PUT ...") is not
// held back; nothing is consumed.
func isH2Preface(br *bufio.Reader) (bool, error) {
	for n := 1; n <= len(h2Preface); n++ {
		b, err := br.Peek(n)
		if err != nil {
			return false, err
		}
		if b[n-1] != h2Preface[n-1] {
			return false, nil
		}
	}
	return true, nil
}
