package gateway

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/airlock-dev/airlock/oplog"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/secrets"
)

// The explicit proxy's front is a goproxy.ProxyHttpServer served by one
// http.Server per sandbox listener:
//
//   - the listener wraps every accepted connection in an explicitConn
//     (explicitconn.go), which owns the connection's httpSession (pinned
//     upstream, byte counts) and reads each request header block itself
//     before http.Server parses it: the header limit counts from the first
//     byte, an unreadable request is refused and audited like any other, and
//     the raw Host header (which net/http drops for absolute-form requests) is
//     kept for the fronting check;
//   - CONNECT: a HandleConnectFunc answers ConnectHijack, and the hijack hands the
//     raw *net.TCPConn (splice) and the session to the pipeline (tunnel or
//     MITM, tunnel.go);
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
	served bool // the CONNECT hijack took the connection
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
		g.logger.Error("explicit listener stopped", oplog.SandboxKey, s.info.ID, oplog.ErrorKey, err)
	}
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
					ec.done()
				}
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
// connection (the session holds any bytes the client sent after the CONNECT)
// on a goroutine of its own, and http.Server's goroutine returns, letting go
// of its connection's buffers (8 KiB) and its stack for as long as the
// tunnel stays open.
func (g *Gateway) explicitConnect(r *http.Request, _ net.Conn, _ *goproxy.ProxyCtx) {
	x := currentReq(r)
	x.served = true
	rc := x.rc
	ec := r.Context().Value(explicitConnKey).(*explicitConn)
	rc.sess.release()
	rc.cc.nc.SetDeadline(time.Time{})
	go func() {
		defer ec.done()
		g.serve(rc)
	}()
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
		rc.ws = &wsBody{r: up.br, c: up.nc, untrack: untrack, guard: s.g.streamGuard(rc, true), scan: s.g.newWSScan(rc)}
		if d := s.g.newWSDown(rc, up.br); d != nil {
			rc.ws.r, rc.ws.down = d, d
		}
		s.g.holdOpen(rc) // re-decided on a policy change, as a tunnel is
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
		b.rc.err = relayFailure(b.rc, err)
		panic(http.ErrAbortHandler)
	}
	return n, err
}

func (b *proxyBody) Close() error { return b.r.Close() }

// wsBody is the upstream side of a websocket goproxy relays: reads come from
// the upstream (buffered bytes first), writes go to it; both are counted.
type wsBody struct {
	r       io.Reader
	c       net.Conn
	untrack func()
	up, dn  atomic.Int64
	once    sync.Once
	// down decides what the server sends (wsdown.go); nil when off.
	down *wsDown
	// guard checks the client's frames of a sandbox that holds placeholders
	// (nil otherwise); goproxy writes from one goroutine.
	guard *secrets.StreamGuard
	// scan inspects the client's messages (wsinspect.go); nil when off.
	scan     *wsScan
	mu       sync.Mutex
	guardErr error
}

func (w *wsBody) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	w.dn.Add(int64(n))
	if err != nil && w.down != nil && w.down.blocked != nil {
		w.c.Close() // the close frame went: the client's writes end too
	}
	return n, err
}

func (w *wsBody) Write(p []byte) (int, error) {
	if w.scan != nil {
		if err := w.scan.check(p); err != nil {
			w.c.Close()
			return 0, err
		}
	}
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
		rc.bytesUp, rc.bytesDown = ws.up.Load(), ws.dn.Load()
		ws.mu.Lock()
		if ws.guardErr != nil {
			rc.err = secretsErr(ws.guardErr)
		}
		ws.mu.Unlock()
		if !wsDenied(rc, ws.scan) {
			if err, dec := ws.down.blockedErr(); err != nil && rc.err == nil {
				rc.err = err
				if dec != nil {
					rc.dec, rc.decided = *dec, true
				}
			}
		}
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
