package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/oplog"
	"github.com/airlock-dev/airlock/policy"
)

// The explicit proxy serves its connections itself, as the transparent
// listener does: each request's header block is peeked strictly
// (peekHTTPRequest: limits, the raw Host header that net/http drops for
// absolute-form requests) and parsed once (http.ReadRequest). A
// goproxy.ProxyHttpServer then dispatches it (explicitDispatch): a CONNECT to
// its CONNECT handler, whose ConnectHijack hands the raw connection, and the
// bytes the client sent right behind it, to the tunnel (relayConnect); any
// other request to its request handler chain, whose one handler runs the one
// pipeline. The pipeline writes the response on the wire itself (forward, or
// refuse a refusal); goproxy's own transport, dialer, CA, MITM, HTTP/2 and
// response copy are never used. A connection whose first byte is 5 is SOCKS5
// (socks.go), one that starts with the HTTP/2 preface is h2c (h2.go).

// maxBodyDrain is how much of a request body the upstream did not take is
// read and dropped so the connection can carry the next request (net/http's
// server does the same); past it the connection closes.
const maxBodyDrain = 256 << 10

// serveExplicitListener accepts one sandbox's explicit listener until it
// closes, serving each connection on its own goroutine.
func (g *Gateway) serveExplicitListener(s *sandbox, l net.Listener) {
	defer g.wg.Done()
	el := &explicitListener{Listener: l, g: g, s: s, proxy: g.newExplicitProxy()}
	backoff := 5 * time.Millisecond
	for {
		c, err := el.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) || isTemporary(err) {
				time.Sleep(backoff) // out of descriptors: wait, as net/http's server does
				backoff = min(backoff*2, time.Second)
				continue
			}
			g.logger.Error("explicit listener stopped", oplog.SandboxKey, s.info.ID, oplog.ErrorKey, err)
			return
		}
		backoff = 5 * time.Millisecond
		go g.explicitHandler(c)
	}
}

// explicitHandler serves one explicit-proxy connection's requests one at a
// time until it ends or a request may not be followed by another.
func (g *Gateway) explicitHandler(c *explicitConn) {
	defer c.done()
	s := c.sess
	for first := true; ; first = false {
		pr, ok := c.readHead(first)
		if !ok {
			return
		}
		s.rawHost = pr.Host
		req, err := http.ReadRequest(s.br) // the whole block is buffered: no read
		s.rd.progress = g.cfg.IdleTimeout  // a body that stops arriving is dropped
		if err != nil {
			c.refuseUnreadable(pr, err)
			return
		}
		var body *requestBody
		if req.Body != http.NoBody {
			body = &requestBody{r: req.Body}
			req.Body = body
		}
		rc := g.newReqCtx(c.cc, s)
		rc.req, rc.kind = req, policy.KindHTTP
		if ex := req.Header["Expect"]; len(ex) > 0 && req.Method != http.MethodConnect && !(len(ex) == 1 && strings.EqualFold(ex[0], "100-continue")) {
			g.serveRefused(rc, &denial{reason: ReasonBadRequest, status: http.StatusExpectationFailed,
				msg: "unsupported Expect header (only 100-continue is)"})
			return
		}
		if !c.dispatch(rc) || body != nil && !body.finish() {
			return
		}
	}
}

// explicitDispatch is the connection's goproxy front: the one
// goproxy.ProxyHttpServer of the listener, the connection's ResponseWriter,
// and the request goproxy is dispatching.
type explicitDispatch struct {
	proxy  *goproxy.ProxyHttpServer
	ctx    context.Context // carries the connection to goproxy's handlers
	w      explicitWriter
	rc     *reqCtx       // the request being dispatched
	served bool          // a handler of ours took it
	keep   bool          // the connection may carry another request
	done   http.Response // what a handler hands back once the pipeline answered
}

type ctxKey int

const explicitConnKey ctxKey = 0

// errNoGoproxyTransport is what goproxy's own dialers return: they are never
// used, every upstream is dialed by the pipeline (dial.go).
var errNoGoproxyTransport = errors.New("gateway: goproxy's own transport is never used")

// newExplicitProxy builds the goproxy front of one explicit listener. Its
// handlers run the pipeline; everything goproxy could do by itself (dial,
// MITM, HTTP/2, its own CA) is off or refuses.
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
	// An origin-form request is not a proxy request to goproxy; the pipeline
	// refuses it (normalizeRequest), audited like any other.
	p.NonproxyHandler = http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { g.explicitRequest(r, nil) })
	p.OnRequest().HandleConnectFunc(func(host string, _ *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
		return &goproxy.ConnectAction{Action: goproxy.ConnectHijack, Hijack: g.explicitHijack}, host
	})
	p.OnRequest().DoFunc(g.explicitRequest)
	return p
}

// dispatch hands rc's request to goproxy and reports whether the connection
// may carry another request. A request no handler of ours took (goproxy
// answered or dropped it by itself) is refused: fail closed.
func (c *explicitConn) dispatch(rc *reqCtx) bool {
	d := &c.d
	d.rc, d.served, d.keep = rc, false, false
	clear(d.w.header)
	rc.req = rc.req.WithContext(d.ctx)
	d.proxy.ServeHTTP(&d.w, rc.req)
	d.rc = nil
	if !d.served {
		// A denial: policy was never asked, nothing was dialed.
		c.cc.g.serveRefused(rc, &denial{reason: ReasonUpstream, status: http.StatusBadGateway, msg: "request not handled by the explicit proxy"})
		return false
	}
	return d.keep
}

// dispatchOf returns the dispatch of the connection r arrived on.
func dispatchOf(r *http.Request) *explicitDispatch {
	return &r.Context().Value(explicitConnKey).(*explicitConn).d
}

// explicitRequest is goproxy's request handler (and its non-proxy handler):
// the whole pipeline, which writes the response on the connection. goproxy
// gets back an empty response with no body, whose copy writes nothing.
func (g *Gateway) explicitRequest(r *http.Request, _ *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	d := dispatchOf(r)
	d.served = true
	rc := d.rc
	rc.req = r
	d.keep = g.serve(rc)
	d.done = http.Response{StatusCode: rc.status, Header: d.w.header, Body: http.NoBody, Request: r}
	return r, &d.done
}

// explicitHijack is goproxy's ConnectHijack: the pipeline takes the raw
// connection for the tunnel, on this goroutine, until the tunnel ends.
func (g *Gateway) explicitHijack(r *http.Request, _ net.Conn, _ *goproxy.ProxyCtx) {
	d := dispatchOf(r)
	d.served = true
	rc := d.rc
	rc.req = r
	g.explicitConnect(rc)
}

// explicitWriter is the ResponseWriter goproxy dispatches with. The pipeline
// has written the response on the wire by the time goproxy copies what its
// handler returned (an empty response), so nothing goproxy writes reaches the
// client; Hijack hands over the raw connection and the session's buffers.
type explicitWriter struct {
	c      *explicitConn
	header http.Header
}

func (w *explicitWriter) Header() http.Header         { return w.header }
func (w *explicitWriter) WriteHeader(int)             {}
func (w *explicitWriter) Write(p []byte) (int, error) { return len(p), nil }

func (w *explicitWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	s := w.c.sess
	return w.c.cc.nc, bufio.NewReadWriter(s.br, s.bw), nil
}

// explicitConnect serves a CONNECT: the pipeline takes the raw connection,
// with the bytes the client sent right behind the CONNECT still in the
// session's buffer, for the tunnel (relayConnect).
func (g *Gateway) explicitConnect(rc *reqCtx) {
	rc.kind = policy.KindConnect
	rc.sess.release()
	rc.cc.nc.SetDeadline(time.Time{})
	g.serve(rc)
}

// requestBody is a request body as http.ReadRequest framed it. It remembers
// whether it was read to its end: only then may the connection carry the next
// request. Closing it does nothing (net/http's Close would read the rest,
// however long); finish decides.
type requestBody struct {
	r   io.ReadCloser
	eof bool
}

func (b *requestBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *requestBody) Close() error { return nil }

// finish reads what is left of a body the upstream did not take (at most
// maxBodyDrain) and reports whether it ended.
func (b *requestBody) finish() bool {
	if !b.eof {
		io.CopyN(io.Discard, b, maxBodyDrain+1)
	}
	return b.eof
}

// refuseUnreadable refuses and audits a header block the peeker accepted but
// net/http's parser rejects (a Content-Length it cannot read, a
// Transfer-Encoding it does not support, a URL it cannot parse). A
// placeholder in it is flagged as secrets misuse.
func (c *explicitConn) refuseUnreadable(pr peekedRequest, perr error) {
	g := c.cc.g
	rc := g.newReqCtx(c.cc, c.sess)
	rc.kind = policy.KindHTTP
	if pr.Method == http.MethodConnect {
		rc.kind = policy.KindConnect
	}
	if h, port, err := hostname.SplitHostPort(pr.Host, 80); err == nil {
		rc.host, rc.port = h, port
	}
	var err error = deny(ReasonBadRequest, "unreadable request: %v", perr)
	if inj := g.cfg.Injector; inj != nil {
		if serr := inj.CheckName(sandboxOf(rc), pr.Target+" "+pr.Host); serr != nil {
			err = secretsErr(serr)
		}
	}
	g.serveRefused(rc, err)
}

// readHead waits for a request's whole header block (IdleTimeout for its
// first byte, then ReadHeaderTimeout and MaxHeaderBytes) without consuming
// it. A block that cannot be read is refused and audited here. On the
// connection's first request, SOCKS5 and h2c are served in its place. ok is
// false when the connection carries no (further) HTTP/1.1 request.
func (c *explicitConn) readHead(first bool) (pr peekedRequest, ok bool) {
	s, g := c.sess, c.cc.g
	nc := c.cc.nc
	s.cc.idle.Store(true)
	s.rd.limited, s.rd.limit, s.rd.progress = true, g.cfg.MaxHeaderBytes-s.br.Buffered(), 0
	deadline := s.br.Buffered() == 0 // a pipelined request is there already
	if deadline {
		nc.SetReadDeadline(time.Now().Add(g.cfg.IdleTimeout))
	}
	if _, err := s.br.Peek(1); err != nil {
		s.cc.idle.Store(false)
		return pr, false
	}
	s.cc.idle.Store(false)
	if g.isDraining() {
		return pr, false
	}
	if first {
		if b, _ := s.br.Peek(1); b[0] == socksVersion {
			// A SOCKS5 client (socks.go): served here, in place of the
			// connection's first request.
			nc.SetReadDeadline(time.Time{})
			c.serveSOCKS()
			return pr, false
		}
		nc.SetReadDeadline(time.Now().Add(g.cfg.ReadHeaderTimeout))
		h2, _ := isH2Preface(s.br)
		nc.SetReadDeadline(time.Time{})
		if h2 {
			// h2c with prior knowledge (h2.go): each stream names its
			// origin by :authority and is decided as plain HTTP to it.
			s.rd.limited = false
			g.serveH2(c.cc, &prefixConn{Conn: nc, r: s.br}, h2Target{scheme: "http", defaultPort: 80})
			return pr, false
		}
	}
	// A kept-alive client's next request usually arrives whole in the first
	// read: then nothing more is read and no new deadline is needed.
	buffered, _ := s.br.Peek(s.br.Buffered())
	if !bytes.Contains(buffered, []byte("\r\n\r\n")) {
		deadline = true
		nc.SetReadDeadline(time.Now().Add(g.cfg.ReadHeaderTimeout))
	}
	pr, err := peekHTTPRequest(s.br, min(g.cfg.MaxHeaderBytes, s.br.Size()))
	s.rd.limited = false
	if deadline {
		nc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		if errors.Is(err, io.EOF) || isTimeout(err) && s.br.Buffered() == 0 {
			return pr, false
		}
		if errors.Is(err, errPeekTooLarge) {
			err = errHeaderTooLarge
		}
		rc := g.newReqCtx(s.cc, s)
		rc.kind = policy.KindHTTP
		g.serveRefused(rc, deny(ReasonBadRequest, "unreadable request: %v", err))
		return pr, false
	}
	return pr, true
}
