package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/secrets"
)

// Injector is the seam package secrets plugs into; *secrets.Injector satisfies
// it. The gateway calls it at fixed points of the one pipeline:
//
//   - CheckName on the CONNECT host and the TLS server name, and Check on every
//     request (plain HTTP, the CONNECT line, intercepted requests), before
//     policy: a placeholder is denied and flagged wherever it is seen;
//   - NeedsMITM after policy allowed a tunnel: a binding forces interception;
//   - Inject only on an intercepted request after policy allowed it (a binding
//     never widens policy), and only over verified upstream TLS;
//   - Reauthorize on a 401 to an injected request, before ScrubResponse: a
//     minted token is refreshed once and the request, when its body can be
//     sent again, retried once (reauthorize);
//   - ScrubResponse on the upstream's response to an injected request before a
//     byte of it reaches the sandbox. Redirects are never followed.
//   - HoldsPlaceholders and NewStreamGuard: a sandbox that may hold a
//     placeholder has every TLS tunnel intercepted (NeedsMITM says so) but
//     those policy marks passthrough (policy.Decision.Passthrough), and
//     what it sends on a stream that is not parsed as HTTP (a raw TCP tunnel,
//     a websocket after its upgrade) is checked chunk by chunk.
type Injector interface {
	NeedsMITM(sb secrets.Sandbox, host string, port int) bool
	HoldsPlaceholders(sb secrets.Sandbox) bool
	NewStreamGuard(sb secrets.Sandbox, websocket bool) *secrets.StreamGuard
	CheckName(sb secrets.Sandbox, name string) error
	Check(sb secrets.Sandbox, req *http.Request) error
	Inject(ctx context.Context, sb secrets.Sandbox, req *http.Request) (*secrets.Applied, error)
	Reauthorize(ctx context.Context, a *secrets.Applied, req *http.Request, retry bool) (bool, error)
	ScrubResponse(a *secrets.Applied, resp *http.Response) error
}

var _ Injector = (*secrets.Injector)(nil)

// Reason ids of secrets failures that are not a *secrets.Denial (a Denial's
// own Code is its reason id).
const (
	ReasonSecretUnavailable = "secret_unavailable"      // a secret's source failed (503)
	ReasonSecretResponse    = "secret_response_refused" // a response that cannot be scrubbed (502)
)

func sandboxOf(rc *reqCtx) secrets.Sandbox {
	return secrets.Sandbox{ID: rc.cc.sb.info.ID, Labels: rc.cc.sb.current().Labels}
}

// secretsErr maps an error of package secrets onto the gateway's denial or
// failure, with the status secrets.HTTPStatus gives: a *secrets.Denial becomes a
// denial whose reason is the Denial's Code and whose flag goes in the audit
// record; anything else is a failure after allow.
func secretsErr(err error) error {
	if err == nil {
		return nil
	}
	status := secrets.HTTPStatus(err)
	var d *secrets.Denial
	if errors.As(err, &d) {
		return &denial{reason: d.Code, msg: d.Error(), status: status, flag: d.Flag}
	}
	var busy *secrets.BusyError
	if errors.As(err, &busy) {
		// The sandbox holds its whole body-scan budget: a limit, like the tunnel cap.
		return &denial{reason: busy.Code, msg: busy.Error(), status: status}
	}
	var u *secrets.UnavailableError
	if errors.As(err, &u) {
		return &failure{reason: ReasonSecretUnavailable, status: status, err: err, note: u.Note}
	}
	var r *secrets.ResponseError
	if errors.As(err, &r) {
		return fail(ReasonSecretResponse, status, err)
	}
	return fail(ReasonInjectFailed, status, err)
}

// screen is the secrets check that runs on every request, tunnel and
// connection before policy: a placeholder in a name, a CONNECT line or a
// request that is not its binding's is denied and flagged.
func (g *Gateway) screen(rc *reqCtx) error {
	inj := g.cfg.Injector
	if inj == nil {
		return nil
	}
	sb := sandboxOf(rc)
	switch rc.kind {
	case policy.KindConnect:
		if err := inj.CheckName(sb, rc.host); err != nil {
			return secretsErr(err)
		}
		return secretsErr(inj.Check(sb, rc.req))
	case policy.KindTLS:
		if rc.sni != "" {
			return secretsErr(inj.CheckName(sb, rc.sni))
		}
	case policy.KindHTTP:
		if rc.sess.intercepted {
			outgoingURL(rc)
		}
		return g.checkRequest(rc, inj)
	}
	return nil
}

// checkRequest runs Injector.Check, which reads (up to all of) the request
// body before policy, under one absolute read deadline, BodyScanTimeout: a
// body that dribbles in slowly is refused (408, body_scan_timeout) instead
// of holding the scan open, and nothing has been sent upstream.
func (g *Gateway) checkRequest(rc *reqCtx, inj Injector) error {
	if st := rc.sess.h2; st != nil {
		return g.checkStream(rc, inj, st)
	}
	rd := &rc.sess.rd
	if b := rc.req.Body; b != nil && b != http.NoBody {
		if err := continueForScan(rc); err != nil {
			return err
		}
		rd.bound(time.Now().Add(g.cfg.BodyScanTimeout))
		defer rd.unbound()
	}
	err := inj.Check(sandboxOf(rc), rc.req)
	if err != nil && rd.expired.Load() {
		return &denial{reason: ReasonBodyScanTimeout, status: http.StatusRequestTimeout,
			msg: fmt.Sprintf("request body not received within %v (body_scan_timeout)", g.cfg.BodyScanTimeout)}
	}
	return secretsErr(err)
}

// continueForScan answers "100 Continue" to an intercepted HTTP/1 request
// that waits for it before sending its body (Expect: 100-continue), since the
// scan reads the body before policy: a client that waits without a timeout
// (the aws CLI) would otherwise wait until body_scan_timeout refused it. The
// Expect header is then removed, so relay does not answer it again.
//
// Regression (e2e TestRootAWSCLIPlaceholders): every `aws s3 cp` upload from a
// sandbox holding placeholders was refused 408 body_scan_timeout.
func continueForScan(rc *reqCtx) error {
	if !hasToken(rc.req.Header["Expect"], "100-continue") {
		return nil
	}
	rc.req.Header.Del("Expect")
	rc.sess.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
	if err := rc.sess.bw.Flush(); err != nil {
		return fail(ReasonUpstream, http.StatusBadGateway, err)
	}
	return nil
}

// checkStream is checkRequest on an HTTP/2 stream: the deadline is the
// stream's own (the connection carries other streams). A gRPC call's body is
// not buffered before policy: its messages may wait for the server's answers
// (a bidirectional stream), so, as a websocket's frames, it is checked chunk
// by chunk as it streams (streamedBody), and everything else of the request
// before policy.
func (g *Gateway) checkStream(rc *reqCtx, inj Injector, st *h2Stream) error {
	if isGRPC(rc.req) {
		if err := secretsErr(withoutBody(rc.req, func() error { return inj.Check(sandboxOf(rc), rc.req) })); err != nil {
			return err
		}
		st.streamed = true
		if guard := g.streamGuard(rc, false); guard != nil {
			rc.req.Body = guardedBody{guardedReader{r: rc.req.Body, guard: guard}, rc.req.Body}
		}
		return nil
	}
	var until time.Time
	if b := rc.req.Body; b != nil && b != http.NoBody {
		until = time.Now().Add(g.cfg.BodyScanTimeout)
		st.rctl.SetReadDeadline(until)
		defer st.rctl.SetReadDeadline(time.Time{})
	}
	err := inj.Check(sandboxOf(rc), rc.req)
	if err != nil && !until.IsZero() && !time.Now().Before(until) {
		return &denial{reason: ReasonBodyScanTimeout, status: http.StatusRequestTimeout,
			msg: fmt.Sprintf("request body not received within %v (body_scan_timeout)", g.cfg.BodyScanTimeout)}
	}
	return secretsErr(err)
}

// withoutBody runs fn with req's body set aside (NoBody), then restores it.
func withoutBody(req *http.Request, fn func() error) error {
	body, n := req.Body, req.ContentLength
	req.Body, req.ContentLength = http.NoBody, 0
	defer func() { req.Body, req.ContentLength = body, n }()
	return fn()
}

// atomicCountReader counts bytes read through it into an atomic counter (an
// HTTP/2 upstream reads a request body on its own goroutine).
type atomicCountReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c atomicCountReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// guardedBody is a request body read through a StreamGuard.
type guardedBody struct {
	guardedReader
	io.Closer
}

// screenRaw looks for a placeholder in the raw parts of a request whose
// destination did not normalize (the request is refused either way): the
// target as sent, the Host header and every header value. Such a request is
// then refused as the flagged placeholder denial it also is.
func (g *Gateway) screenRaw(rc *reqCtx) error {
	inj := g.cfg.Injector
	if inj == nil || rc.req == nil {
		return nil
	}
	sb := sandboxOf(rc)
	parts := []string{rc.req.RequestURI, rc.req.Host}
	if rc.sess != nil {
		parts = append(parts, rc.sess.rawHost)
	}
	for _, vs := range rc.req.Header {
		parts = append(parts, vs...)
	}
	for _, p := range parts {
		if err := inj.CheckName(sb, p); err != nil {
			return secretsErr(err)
		}
	}
	return nil
}

// outgoingURL makes an intercepted request name its destination the way it
// leaves: scheme https, URL host and Host both the pinned host:port (normalize
// already checked that whatever the client sent names the same).
func outgoingURL(rc *reqCtx) {
	hp := hostname.JoinHostPort(rc.host, rc.port)
	rc.req.URL.Scheme, rc.req.URL.Host, rc.req.Host = "https", hp, hp
}

// inject runs Inject on an intercepted request after policy allowed it. The
// request then leaves only over the verified TLS connection dialed next.
func (g *Gateway) inject(rc *reqCtx) error {
	inj := g.cfg.Injector
	if inj == nil || rc.kind != policy.KindHTTP || !rc.sess.intercepted {
		return nil
	}
	outgoingURL(rc)
	var a *secrets.Applied
	do := func() (err error) {
		a, err = inj.Inject(context.Background(), sandboxOf(rc), rc.req)
		return err
	}
	var err error
	if st := rc.sess.h2; st != nil && st.streamed {
		err = withoutBody(rc.req, do) // checked as it streams (checkStream)
	} else {
		err = do()
	}
	if err != nil {
		return secretsErr(err)
	}
	rc.applied = a
	return nil
}

// reauthorize runs after the upstream answered an injected request, before
// scrub: on a 401 to a request that carried a minted token (OAuth, GitHub
// App) the Injector refreshes the token once and, when the request can be
// sent again (no body, or one the secrets scan buffered: req.GetBody), the
// request goes once more, and that answer is the one relayed, whatever it is.
// A body that streamed is not replayed: the 401 goes to the sandbox and the
// next request carries a fresh token. A failed refresh answers the sandbox
// 503 (secret_unavailable, naming the binding). Never more than one retry.
func (s *httpSession) reauthorize(rc *reqCtx, resp *http.Response) (*http.Response, error) {
	inj := s.g.cfg.Injector
	if inj == nil || rc.applied == nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, nil
	}
	req := rc.req
	noBody := req.Body == nil || req.Body == http.NoBody
	streamed := s.h2 != nil && s.h2.streamed
	retry, err := inj.Reauthorize(context.Background(), rc.applied, req, noBody || (req.GetBody != nil && !streamed))
	if err != nil || !retry {
		if err != nil {
			s.dropUpstream()
			resp.Body.Close()
		}
		return resp, secretsErr(err)
	}
	// The refused answer's body is not read (an upstream could trickle it):
	// an HTTP/2 stream is reset; an HTTP/1.1 connection is replaced first,
	// since closing a body read from it would read the rest.
	if rc.up.h2 == nil {
		if err := s.upstream(rc, true); err != nil {
			resp.Body.Close()
			return nil, err
		}
	}
	resp.Body.Close()
	if !noBody {
		body, err := req.GetBody()
		if err != nil {
			return nil, fail(ReasonInjectFailed, http.StatusBadGateway, err)
		}
		if s.h2 != nil {
			req.Body = h2Body{atomicCountReader{body, &s.h2.sent}, body}
		} else {
			req.Body = countReadCloser{countReader{body, &rc.bytesUp}, body}
		}
	}
	var again *http.Response
	if rc.up.h2 != nil {
		again, err = s.roundTripH2(rc.up, req)
	} else {
		again, err = rc.up.roundTrip(req, s.g.cfg.ResponseHeaderTimeout, s.g.cfg.MaxHeaderBytes)
	}
	if err != nil {
		s.dropUpstream()
		if isTimeout(err) {
			return nil, fail(ReasonTimeout, http.StatusGatewayTimeout, err)
		}
		return nil, fail(ReasonUpstream, http.StatusBadGateway, err)
	}
	return again, nil
}

// scrub prepares the upstream's response to an injected request before any of
// it reaches the sandbox. A scrubbed body has no length any more: it is sent
// chunked so the client connection stays kept alive.
func (g *Gateway) scrub(rc *reqCtx, resp *http.Response) error {
	if rc.applied == nil {
		return nil
	}
	if err := g.cfg.Injector.ScrubResponse(rc.applied, resp); err != nil {
		return secretsErr(err)
	}
	if resp.ContentLength < 0 && resp.Body != nil && resp.Body != http.NoBody && !isChunked(resp.TransferEncoding) {
		resp.TransferEncoding = []string{"chunked"}
	}
	return nil
}

// bodyErrReader remembers the first error other than EOF its body returned:
// http.Request.Write hides it behind an unexported wrapper, and a
// *secrets.Denial from a streamed body scan must come back out as a denial.
// The box is locked: an HTTP/2 upstream reads the body on its own goroutine.
type bodyErrReader struct {
	r   io.Reader
	err *bodyErrBox
}

func (b bodyErrReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.err.set(err)
	}
	return n, err
}

// bodyErrBox holds the first error a request body returned.
type bodyErrBox struct {
	mu  sync.Mutex
	err error
}

func (b *bodyErrBox) set(err error) {
	b.mu.Lock()
	if b.err == nil {
		b.err = err
	}
	b.mu.Unlock()
}

func (b *bodyErrBox) get() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// streamGuard returns the placeholder guard for what rc's sandbox sends on an
// opaque stream, or nil when the sandbox holds no placeholder.
func (g *Gateway) streamGuard(rc *reqCtx, websocket bool) *secrets.StreamGuard {
	inj := g.cfg.Injector
	if inj == nil || !inj.HoldsPlaceholders(sandboxOf(rc)) {
		return nil
	}
	return inj.NewStreamGuard(sandboxOf(rc), websocket)
}

// guardedReader checks every chunk read through it with a StreamGuard before
// handing it on; a chunk that completes a placeholder is never returned.
type guardedReader struct {
	r     io.Reader
	guard *secrets.StreamGuard
}

func (g guardedReader) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	if n > 0 {
		if gerr := g.guard.Check(p[:n]); gerr != nil {
			return 0, gerr
		}
	}
	return n, err
}

// guardFailed ends a relayed stream whose guard found a placeholder: both
// connections are closed and rc.err carries the flagged denial for the close
// record. It reports whether the guard failed.
func guardFailed(rc *reqCtx, guard *secrets.StreamGuard, conns ...io.Closer) bool {
	if guard == nil {
		return false
	}
	err := guard.Err()
	if err == nil {
		return false
	}
	for _, c := range conns {
		c.Close()
	}
	rc.err = secretsErr(err)
	return true
}
