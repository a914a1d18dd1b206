package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/secrets"
)

// The explicit proxy's front is a goproxy.ProxyHttpServer served by one
// http.Server per sandbox listener:
//
//   - the listener wraps every accepted connection in an explicitConn, which
//     owns the connection's httpSession (pinned upstream, byte counts) and reads
//     each request header block itself before http.Server parses it: the
//     header limit counts from the first byte, an unreadable request is refused
//     and audited like any other, and the raw Host header (which net/http drops
//     for absolute-form requests) is kept for the fronting check;
//   - CONNECT: a HandleConnectFunc answers ConnectHijack, and the hijack hands the
//     raw *net.TCPConn (splice) and the session to the pipeline (tunnel or MITM);
//   - absolute-form HTTP: OnRequest().DoFunc runs the pipeline up to the dial;
//     the round trip runs on the per-request ctx.RoundTripper over the session's
//     pooled, guarded upstream connection. goproxy's own transport, CA, MITM and
//     HTTP/2 are never used: proxy.Tr refuses to dial, proxy.Tr.Proxy is nil.
//
// Exactly one function (refuse) builds refusals; on this path goproxy writes
// them. Exactly one deferred call (finish) writes each request's audit record.

type ctxKey int

const explicitConnKey ctxKey = 0

// currentReq returns the explicitReq of the request r on its connection.
func currentReq(r *http.Request) *explicitReq {
	return r.Context().Value(explicitConnKey).(*explicitConn).cur
}

// explicitReq carries a request's reqCtx from the outer handler through goproxy.
type explicitReq struct {
	rc     *reqCtx
	served bool // the CONNECT hijack ran the pipeline
}

var errNoGoproxyTransport = errors.New("gateway: goproxy's own transport is never used")

// newExplicitProxy builds the goproxy front shared by every explicit listener.
func (g *Gateway) newExplicitProxy() *goproxy.ProxyHttpServer {
	p := goproxy.NewProxyHttpServer()
	p.Logger = log.New(io.Discard, "", 0)
	p.Verbose = false
	p.KeepHeader = true         // hop-by-hop headers are removed by sendUpstream, after policy saw them
	p.KeepAcceptEncoding = true // the client's Accept-Encoding goes upstream as sent
	p.AllowHTTP2 = false
	p.CertStore = nil
	refuseDial := func(context.Context, string, string) (net.Conn, error) { return nil, errNoGoproxyTransport }
	p.Tr = &http.Transport{Proxy: nil, DialContext: refuseDial, DialTLSContext: refuseDial}
	p.ConnectDial = func(string, string) (net.Conn, error) { return nil, errNoGoproxyTransport }
	p.ConnectDialWithReq = nil
	p.NonproxyHandler = http.HandlerFunc(g.explicitNonproxy)
	p.OnRequest().HandleConnectFunc(func(host string, _ *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
		return &goproxy.ConnectAction{Action: goproxy.ConnectHijack, Hijack: g.explicitConnect}, host
	})
	p.OnRequest().DoFunc(g.explicitRequest)
	return p
}

// serveExplicitListener serves one sandbox's explicit listener until it closes.
func (g *Gateway) serveExplicitListener(s *sandbox, l net.Listener) {
	defer g.wg.Done()
	srv := &http.Server{
		Handler:           g.explicitHandler(),
		ReadHeaderTimeout: g.cfg.ReadHeaderTimeout,
		IdleTimeout:       g.cfg.IdleTimeout,
		MaxHeaderBytes:    g.cfg.MaxHeaderBytes + 4096, // explicitConn enforces the real limit first
		ErrorLog:          log.New(io.Discard, "", 0),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, explicitConnKey, c.(*explicitConn))
		},
		ConnState: func(c net.Conn, st http.ConnState) {
			ec := c.(*explicitConn)
			switch st {
			case http.StateIdle:
				ec.expectHead()
			case http.StateHijacked:
				ec.mu.Lock()
				ec.hijacked, ec.held = true, false // a websocket's frames come through here
				ec.mu.Unlock()
			case http.StateClosed:
				ec.done()
			}
		},
	}
	srv.SetKeepAlivesEnabled(true)
	err := srv.Serve(&explicitListener{Listener: l, g: g, s: s})
	if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, http.ErrServerClosed) {
		g.logger.Error("explicit listener stopped", "sandbox", s.info.ID, "err", err)
	}
}

// explicitListener applies the per-sandbox connection cap at accept and wraps
// each connection.
type explicitListener struct {
	net.Listener
	g *Gateway
	s *sandbox
}

func (l *explicitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		cc := l.g.newClientConn(l.s, c, modeExplicit)
		if cc == nil {
			continue // refused (and audited) by the cap, or the sandbox stopped
		}
		l.g.wg.Add(1)
		ec := &explicitConn{Conn: c, cc: cc}
		ec.sess = l.g.newSession(cc, c, nil)
		ec.wantHead = true
		return ec, nil
	}
}

// explicitConn is what http.Server reads from. Before each request it reads
// the header block into the session's buffer (limits, refusal, raw Host), and
// it hands http.Server no byte past a CONNECT's header block, so the bytes a
// client sends right behind a CONNECT stay in the session for the tunnel.
type explicitConn struct {
	net.Conn
	cc   *clientConn
	sess *httpSession

	mu       sync.Mutex
	wantHead bool          // the next read starts a request
	headLeft int           // bytes of the current header block not yet handed out
	head     peekedRequest // the current request's header block as sent
	headOK   bool          // head was read and not yet claimed by a request
	bodyLeft int64         // request body bytes not yet handed out; -1: chunked, unknown
	held     bool          // the request's bytes are all out: hand out nothing more
	hijacked bool          // http.Server handed the connection over
	cur      *explicitReq  // the request being served
	unhold   chan struct{} // closed when http.Server aborts its pending read
	closed   sync.Once
	// ownAnswer: http.Server answered a request by itself (a request its
	// parser rejects, OPTIONS *): that answer is replaced by a refusal.
	ownAnswer bool
}

// Write passes on what http.Server writes, except an answer it gives by
// itself to a request no handler saw: a header block this wrapper read
// (headOK) but no handler claimed. net/http's parser rejects some blocks the
// peeker accepts (conflicting Content-Length, unsupported Transfer-Encoding,
// a URL it cannot parse, an Expect it does not know) and answers OPTIONS *
// itself; each such request is refused and audited like any other, once, and
// net/http's own bytes never reach the client.
func (c *explicitConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	first := c.headOK && !c.hijacked && !c.ownAnswer
	if first {
		c.ownAnswer, c.headOK = true, false
	}
	own, head := c.ownAnswer, c.head
	c.mu.Unlock()
	if !own {
		return c.Conn.Write(p)
	}
	if first {
		c.refuseOwnAnswer(head, p)
	}
	return len(p), nil
}

// refuseOwnAnswer refuses and audits the request http.Server answered by
// itself with the response that starts in p.
func (c *explicitConn) refuseOwnAnswer(head peekedRequest, p []byte) {
	g, s := c.cc.g, c.sess
	rc := g.newReqCtx(c.cc, s)
	rc.kind = policy.KindHTTP
	if head.Method == http.MethodConnect {
		rc.kind = policy.KindConnect
	}
	if h, port, err := hostname.SplitHostPort(head.Host, 80); err == nil {
		rc.host, rc.port = h, port
	}
	status, msg := http.StatusBadRequest, "request answered by the HTTP server itself"
	line, rest, _ := bytes.Cut(p, []byte("\r\n"))
	if f := bytes.Fields(line); len(f) >= 2 {
		if n, err := strconv.Atoi(string(f[1])); err == nil && n >= 400 && n <= 599 {
			status = n
			msg = "rejected by the HTTP parser"
			if _, body, ok := bytes.Cut(rest, []byte("\r\n\r\n")); ok && len(body) > 0 {
				msg += ": " + strings.TrimSpace(string(body[:min(len(body), 200)]))
			}
		}
	}
	var err error = &denial{reason: ReasonBadRequest, msg: msg, status: status}
	if inj := g.cfg.Injector; inj != nil {
		if perr := inj.CheckName(sandboxOf(rc), head.Target+" "+head.Host); perr != nil {
			err = secretsErr(perr)
		}
	}
	g.serveRefused(rc, err)
	c.Conn.Close() // http.Server would go on serving the connection
}

func (c *explicitConn) expectHead() {
	c.mu.Lock()
	c.wantHead, c.headOK, c.held = true, false, false
	if c.unhold != nil {
		close(c.unhold)
		c.unhold = nil
	}
	c.mu.Unlock()
}

// hold stops handing out bytes: the request's head and body are all out, and
// what follows belongs to the next request, read only once http.Server asks
// for it (StateIdle). http.Server's background read parks here until it
// aborts it with a past deadline. Called with c.mu held.
func (c *explicitConn) hold() {
	c.held = true
	if c.unhold == nil {
		c.unhold = make(chan struct{})
	}
}

func (c *explicitConn) isHijacked() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hijacked
}

// done is the connection's final cleanup (closed, or its CONNECT finished).
func (c *explicitConn) done() {
	c.closed.Do(func() {
		c.sess.release()
		c.cc.close()
		c.cc.g.wg.Done()
	})
}

func (c *explicitConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	if c.held && c.unhold != nil && !t.IsZero() && time.Until(t) <= 0 {
		close(c.unhold)
		c.unhold = nil
	}
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *explicitConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	want, held := c.wantHead, c.held
	c.mu.Unlock()
	s := c.sess
	if want {
		if err := c.readHead(); err != nil {
			return 0, err
		}
	}
	if held {
		c.mu.Lock()
		ch := c.unhold
		c.mu.Unlock()
		if ch != nil {
			t := time.NewTimer(s.g.cfg.IdleTimeout)
			select {
			case <-ch:
			case <-t.C:
			}
			t.Stop()
		}
		return 0, os.ErrDeadlineExceeded
	}
	// http.Server never reads from two goroutines at once, so the counters
	// may be updated after the read; c.mu is never held across it
	// (SetReadDeadline takes it to wake a parked read).
	c.mu.Lock()
	headLeft, bodyLeft := c.headLeft, c.bodyLeft
	c.mu.Unlock()
	switch {
	case headLeft > 0:
		if len(p) > headLeft {
			p = p[:headLeft]
		}
		n, err := s.br.Read(p)
		c.mu.Lock()
		c.headLeft -= n
		if c.headLeft == 0 && c.bodyLeft == 0 {
			c.hold()
		}
		c.mu.Unlock()
		return n, err
	case bodyLeft > 0:
		if int64(len(p)) > bodyLeft {
			p = p[:bodyLeft]
		}
		n, err := s.br.Read(p)
		c.mu.Lock()
		c.bodyLeft -= int64(n)
		if c.bodyLeft == 0 {
			c.hold()
		}
		c.mu.Unlock()
		return n, err
	}
	return s.br.Read(p)
}

// readHead waits for a request's whole header block (IdleTimeout for its
// first byte, then ReadHeaderTimeout and MaxHeaderBytes) without consuming it.
// A block that cannot be read is refused and audited here; http.Server then
// sees the connection end.
func (c *explicitConn) readHead() error {
	s, g := c.sess, c.sess.g
	s.cc.idle.Store(true)
	s.rd.limited, s.rd.limit, s.rd.progress = true, g.cfg.MaxHeaderBytes-s.br.Buffered(), 0
	if _, err := s.br.Peek(1); err != nil {
		s.cc.idle.Store(false)
		return err
	}
	s.cc.idle.Store(false)
	if g.isDraining() {
		return io.EOF
	}
	c.Conn.SetReadDeadline(time.Now().Add(g.cfg.ReadHeaderTimeout))
	pr, err := peekHTTPRequest(s.br, min(g.cfg.MaxHeaderBytes, s.br.Size()))
	s.rd.limited = false
	c.Conn.SetReadDeadline(time.Time{})
	if err != nil {
		if errors.Is(err, io.EOF) || isTimeout(err) && s.br.Buffered() == 0 {
			return io.EOF
		}
		if errors.Is(err, errPeekTooLarge) {
			err = errHeaderTooLarge
		}
		rc := g.newReqCtx(s.cc, s)
		rc.kind = policy.KindHTTP
		g.serveRefused(rc, deny(ReasonBadRequest, "unreadable request: %v", err))
		return io.EOF
	}
	buf, _ := s.br.Peek(s.br.Buffered())
	n := bytes.Index(buf, []byte("\r\n\r\n")) + 4
	body := bodyLength(buf[:n])
	if pr.Method == http.MethodConnect {
		body = 0 // what follows a CONNECT is the tunnel's
	}
	if body < 0 {
		// A chunked (or unparsable) body: its end is http.Server's to find, so
		// this connection carries no further request.
		s.closeAfter = true
	}
	c.mu.Lock()
	c.headLeft, c.bodyLeft = n, body
	c.head, c.headOK, c.wantHead = pr, true, false
	c.mu.Unlock()
	return nil
}

// bodyLength returns the request body length a header block announces: its
// Content-Length, 0 without one, -1 with a Transfer-Encoding or a
// Content-Length that is not one plain number (http.Server decides those).
func bodyLength(head []byte) int64 {
	var cl int64
	seen := false
	for _, line := range bytes.Split(head, []byte("\r\n"))[1:] {
		name, val, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		switch {
		case bytes.EqualFold(name, []byte("transfer-encoding")):
			return -1
		case bytes.EqualFold(name, []byte("content-length")):
			v, err := strconv.ParseInt(string(bytes.TrimSpace(val)), 10, 64)
			if err != nil || v < 0 || seen && v != cl {
				return -1
			}
			cl, seen = v, true
		}
	}
	return cl
}

// claimHead gives the request r the header block read for it. A request whose
// block was not read here (a pipelined request) is refused: its Host header
// cannot be checked.
func (c *explicitConn) claimHead(r *http.Request) (peekedRequest, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.headOK || c.head.Method != r.Method || c.head.Target != r.RequestURI {
		return peekedRequest{}, errors.New("pipelined requests are not supported by the explicit proxy")
	}
	c.headOK = false
	return c.head, nil
}

// explicitHandler is the http.Handler in front of goproxy: it makes the
// request's reqCtx and owns its one deferred audit.
func (g *Gateway) explicitHandler() http.Handler {
	proxy := g.newExplicitProxy()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ec := r.Context().Value(explicitConnKey).(*explicitConn)
		s := ec.sess
		rc := g.newReqCtx(ec.cc, s)
		rc.req = r
		rc.kind = policy.KindHTTP
		pr, err := ec.claimHead(r)
		s.rawHost, s.rawHostErr = pr.Host, err
		x := &explicitReq{rc: rc}
		ec.cur = x // http.Server serves a connection's requests one at a time
		if r.Method == http.MethodConnect {
			rc.kind = policy.KindConnect
			defer func() {
				if !x.served { // goproxy never handed over the connection
					g.serveRefused(rc, fail(ReasonUpstream, http.StatusBadGateway, errors.New("connect not hijacked")))
				}
				ec.done()
			}()
			proxy.ServeHTTP(w, r)
			return
		}
		rc.viaProxy = true
		defer g.finishExplicit(ec, rc)
		proxy.ServeHTTP(w, r)
	})
}

// explicitConnect is goproxy's ConnectHijack: the pipeline takes the raw
// connection (the session holds any bytes the client sent after the CONNECT).
func (g *Gateway) explicitConnect(r *http.Request, _ net.Conn, _ *goproxy.ProxyCtx) {
	x := currentReq(r)
	x.served = true
	rc := x.rc
	rc.sess.release()
	rc.cc.nc.SetDeadline(time.Time{})
	g.serve(rc)
}

// explicitRequest is goproxy's request handler for absolute-form HTTP: the
// pipeline up to the dial, then the round trip on our own RoundTripper.
func (g *Gateway) explicitRequest(req *http.Request, pctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	rc := currentReq(req).rc
	rc.req = req
	if err := g.admit(rc); err != nil {
		rc.err = err
		g.refuse(rc)
		return req, rc.refusal
	}
	pctx.RoundTripper = goproxy.RoundTripperFunc(func(*http.Request, *goproxy.ProxyCtx) (*http.Response, error) {
		resp, err := rc.sess.proxyExchange(rc)
		if err != nil {
			rc.err = err
			g.refuse(rc)
			return rc.refusal, nil
		}
		return resp, nil
	})
	return req, nil
}

// explicitNonproxy answers what goproxy does not take as a proxy request (an
// origin-form request): the pipeline refuses it.
func (g *Gateway) explicitNonproxy(w http.ResponseWriter, r *http.Request) {
	rc := currentReq(r).rc
	rc.req = r
	err := g.admit(rc)
	if err == nil {
		err = deny(ReasonBadRequest, "request not handled by the explicit proxy")
	}
	rc.err = err
	g.refuse(rc)
	for k, v := range rc.refusal.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(rc.refusal.StatusCode)
	io.Copy(w, rc.refusal.Body)
}

// proxyExchange is the RoundTripper of the goproxy front: the request goes out
// on the session's upstream connection and the response comes back for goproxy
// to write, its body counted and watched so the upstream is reused only when it
// was read to its end.
func (s *httpSession) proxyExchange(rc *reqCtx) (*http.Response, error) {
	x, err := s.sendUpstream(rc)
	if err != nil {
		return nil, err
	}
	resp := x.resp
	rc.status = resp.StatusCode
	rc.responded = true
	upClose := resp.Close
	removeHop(resp.Header)
	resp.ProtoMajor, resp.ProtoMinor, resp.Proto = 1, 1, "HTTP/1.1"
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if x.upgrade == "" {
			s.dropUpstream()
			return nil, fail(ReasonUpstream, http.StatusBadGateway, errors.New("upstream switched protocols without a websocket upgrade"))
		}
		// goproxy relays a websocket between the hijacked client and Body.
		resp.Header.Set("Connection", "Upgrade")
		resp.Header.Set("Upgrade", x.upgrade)
		up := s.up
		s.untrack()
		s.up = nil
		rc.up = up
		untrack := s.cc.track(up.nc)
		rc.ws = &wsBody{r: up.br, c: up.nc, untrack: untrack, guard: s.g.streamGuard(rc, true)}
		resp.Body = rc.ws
		return resp, nil
	}
	if x.clientClose || s.closeAfter || s.g.isDraining() {
		resp.Header.Set("Connection", "close")
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		rc.upOK = !upClose
		return resp, nil
	}
	if resp.ContentLength < 0 && rc.req.Method != http.MethodHead {
		// Unknown length (chunked, scrubbed, or close-delimited upstream): chunked
		// to the client, and goproxy flushes as the bytes arrive.
		resp.Header.Set("Transfer-Encoding", "chunked")
	}
	resp.Body = &proxyBody{r: resp.Body, rc: rc, upClose: upClose}
	return resp, nil
}

// proxyBody counts the response body for the audit record. An upstream read
// error aborts the client's response (http.ErrAbortHandler), so a truncated
// body is never passed off as complete.
type proxyBody struct {
	r       io.ReadCloser
	rc      *reqCtx
	upClose bool
}

func (b *proxyBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.rc.bytesDown += int64(n)
	if err == io.EOF {
		b.rc.upOK = !b.upClose
	} else if err != nil {
		b.rc.err = fail(ReasonUpstream, http.StatusBadGateway, fmt.Errorf("relaying response: %w", err))
		panic(http.ErrAbortHandler)
	}
	return n, err
}

func (b *proxyBody) Close() error { return b.r.Close() }

// wsBody is the upstream side of a websocket goproxy relays: reads come from
// the upstream (buffered bytes first), writes go to it; both are counted.
type wsBody struct {
	r        io.Reader
	c        net.Conn
	untrack  func()
	up, down atomic.Int64
	once     sync.Once
	// guard checks the client's frames of a sandbox that holds placeholders
	// (nil otherwise); goproxy writes from one goroutine.
	guard    *secrets.StreamGuard
	mu       sync.Mutex
	guardErr error
}

func (w *wsBody) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	w.down.Add(int64(n))
	return n, err
}

func (w *wsBody) Write(p []byte) (int, error) {
	if w.guard != nil {
		if err := w.guard.Check(p); err != nil {
			w.mu.Lock()
			w.guardErr = err
			w.mu.Unlock()
			w.c.Close()
			return 0, err
		}
	}
	n, err := w.c.Write(p)
	w.up.Add(int64(n))
	return n, err
}

func (w *wsBody) Close() error {
	w.once.Do(func() {
		w.untrack()
		w.c.Close()
	})
	return nil
}

// finishExplicit runs after goproxy wrote the response (or gave up, or
// aborted it): the session keeps its upstream only if the response was read to
// its end, a websocket's two connections are closed, and the request's one
// audit record is written. An abort panic goes on to http.Server afterwards.
func (g *Gateway) finishExplicit(ec *explicitConn, rc *reqCtx) {
	v := recover()
	if !rc.upOK {
		rc.sess.dropUpstream()
	}
	if ws := rc.ws; ws != nil {
		ws.Close()
		rc.bytesUp, rc.bytesDown = ws.up.Load(), ws.down.Load()
		ws.mu.Lock()
		if ws.guardErr != nil {
			rc.err = secretsErr(ws.guardErr)
		}
		ws.mu.Unlock()
	}
	g.finish(rc)
	if ec.isHijacked() {
		ec.done() // a websocket: http.Server no longer owns the connection
	}
	if v != nil {
		panic(v)
	}
}

// progressReader pushes the client connection's read deadline forward on every
// read of a request body, so a client that stops sending is dropped; the
// deadline is cleared at the end of the body.
type progressReader struct {
	r       io.Reader
	c       net.Conn
	timeout time.Duration
}

func (p progressReader) Read(b []byte) (int, error) {
	p.c.SetReadDeadline(time.Now().Add(p.timeout))
	n, err := p.r.Read(b)
	if err == io.EOF {
		p.c.SetReadDeadline(time.Time{})
	}
	// On any other error the expired deadline stays: http.Server's drain of
	// the rest of the body then fails at once instead of waiting for a client
	// that stopped sending.
	return n, err
}
