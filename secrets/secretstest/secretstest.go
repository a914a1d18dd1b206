package secretstest

import (
	"compress/gzip"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Request is what the Upstream received.
type Request struct {
	Host     string
	Path     string
	RawQuery string
	Header   http.Header
	Body     string
	BodyErr  bool // reading the body failed; nothing was answered
}

// Upstream leaks the credential of each request back towards the client: the
// value after the scheme of its Authorization header, or else its X-Api-Key.
// Paths:
//
//	/echo      the request's headers as X-Echo-* headers; the value in
//	           Set-Cookie, base64 in X-B64 and as a header name X-<value>; the
//	           headers, body and host as a JSON body, then the value
//	           query-escaped on a line of its own
//	/encoded   the value in base64 (four alphabets), hex, percent and JSON forms
//	/chunked   the Authorization value one byte per flushed chunk
//	/sse       server-sent events, the value split across flushes
//	/gzip      the JSON echo gzipped (Content-Encoding: gzip)
//	/redirect  302 to ?to= (default https://other.example.com/callback) with
//	           the value in the Location's query and in the body
//	/trailer   the value in a trailer
//	/reason    a raw 401 with the value in the reason phrase, a header value
//	           and (when it is a token) a header name
//	/partial   206 with the value's first four bytes
//	/slow      signals WaitArrived, waits for Release, then is /echo
//
// Any other path answers "ok". It is safe for concurrent use.
type Upstream struct {
	Server *httptest.Server
	Addr   string // 127.0.0.1:port
	Port   int
	// Received counts every request; Carrying counts those that carried a
	// watched string anywhere: request line, header names and values, body.
	Received atomic.Int64
	Carrying atomic.Int64

	mu      sync.Mutex
	seen    []Request
	watch   []string
	arrived chan struct{}
	release chan struct{}
	once    sync.Once
}

// New starts an Upstream on loopback: TLS with cert, or plain HTTP when cert
// is nil. It stops when t ends.
func New(t testing.TB, cert *tls.Certificate) *Upstream {
	t.Helper()
	u := newUpstream()
	if cert != nil {
		u.Server.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
		u.Server.StartTLS()
	} else {
		u.Server.Start()
	}
	return u.started(t)
}

// NewTLS starts an Upstream on loopback with httptest's own certificate
// (Server.Certificate), valid for example.com names.
func NewTLS(t testing.TB) *Upstream {
	t.Helper()
	u := newUpstream()
	u.Server.StartTLS()
	return u.started(t)
}

func newUpstream() *Upstream {
	u := &Upstream{arrived: make(chan struct{}, 100), release: make(chan struct{})}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(u.serve))
	u.Server.EnableHTTP2 = false
	u.Server.Config.ErrorLog = log.New(io.Discard, "", 0) // untrusted-client handshakes fail on purpose
	return u
}

func (u *Upstream) started(t testing.TB) *Upstream {
	// Release before Close, so a request held at /slow never blocks it.
	t.Cleanup(u.Server.Close)
	t.Cleanup(u.Release)
	u.Addr = u.Server.Listener.Addr().String()
	u.Port = int(netip.MustParseAddrPort(u.Addr).Port())
	return u
}

// URL is the Upstream's URL for host (a name the client maps to Addr) and
// path: https when it serves TLS.
func (u *Upstream) URL(host, path string) string {
	scheme := "http"
	if u.Server.TLS != nil {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s:%d%s", scheme, host, u.Port, path)
}

// Watch adds strings that make a request count in Carrying; pass
// secrets.CanaryForms(value) to catch a value in every encoding.
func (u *Upstream) Watch(forms ...string) {
	u.mu.Lock()
	u.watch = append(u.watch, forms...)
	u.mu.Unlock()
}

// Requests returns what the Upstream received, in order.
func (u *Upstream) Requests() []Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]Request(nil), u.seen...)
}

// Last returns the last request received (zero before the first).
func (u *Upstream) Last() Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.seen) == 0 {
		return Request{}
	}
	return u.seen[len(u.seen)-1]
}

// WaitArrived waits (at most 10 s) for a request to arrive at /slow.
func (u *Upstream) WaitArrived(t testing.TB) {
	t.Helper()
	select {
	case <-u.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for a request at /slow")
	}
}

// Release lets every request held at /slow, and every later one, go on.
func (u *Upstream) Release() { u.once.Do(func() { close(u.release) }) }

func (u *Upstream) serve(w http.ResponseWriter, r *http.Request) {
	u.Received.Add(1)
	body, err := io.ReadAll(r.Body)
	u.record(r, body, err)
	if err != nil {
		return
	}
	auth := r.Header.Get("Authorization")
	if auth == "" {
		auth = r.Header.Get("X-Api-Key")
	}
	value := auth
	if i := strings.IndexByte(auth, ' '); i >= 0 {
		value = auth[i+1:]
	}
	echo, _ := json.Marshal(map[string]any{"headers": r.Header, "body": string(body), "host": r.Host})
	if r.URL.Path == "/slow" {
		u.arrived <- struct{}{}
		<-u.release
		r.URL.Path = "/echo"
	}
	if leak, ok := leaks[r.URL.Path]; ok {
		leak(w, r, leaked{auth: auth, value: value, echo: echo})
		return
	}
	w.Write([]byte("ok"))
}

// record keeps what r carried and counts it in Carrying when it holds a
// watched value.
func (u *Upstream) record(r *http.Request, body []byte, err error) {
	var all strings.Builder
	all.WriteString(r.Method + " " + r.RequestURI + " " + r.Host + "\n")
	for k, vs := range r.Header {
		all.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
	}
	all.Write(body)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.seen = append(u.seen, Request{Host: r.Host, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
		Header: r.Header.Clone(), Body: string(body), BodyErr: err != nil})
	for _, f := range u.watch {
		if strings.Contains(all.String(), f) {
			u.Carrying.Add(1)
			return
		}
	}
}

// leaked is what a request gave the Upstream to leak.
type leaked struct {
	auth  string // the credential header's whole value
	value string // the credential after its scheme
	echo  []byte // the request as JSON
}

var leaks = map[string]func(http.ResponseWriter, *http.Request, leaked){
	"/echo":     leakEcho,
	"/encoded":  leakEncoded,
	"/chunked":  leakChunked,
	"/sse":      leakSSE,
	"/gzip":     leakGzip,
	"/redirect": leakRedirect,
	"/trailer":  leakTrailer,
	"/reason":   leakReason,
	"/partial":  leakPartial,
}

func leakEcho(w http.ResponseWriter, r *http.Request, l leaked) {
	for name, vals := range r.Header {
		for _, v := range vals {
			w.Header().Add("X-Echo-"+name, v)
		}
	}
	w.Header().Set("Set-Cookie", "session="+l.value)
	w.Header().Set("X-B64", base64.StdEncoding.EncodeToString([]byte(l.value)))
	w.Header().Set("X-"+l.value, "in a header name")
	w.Write(l.echo)
	fmt.Fprintf(w, "\nquery=%s\n", url.QueryEscape(l.value))
}

func leakEncoded(w http.ResponseWriter, _ *http.Request, l leaked) {
	b := []byte(l.value)
	var pct strings.Builder
	for _, c := range b {
		fmt.Fprintf(&pct, "%%%02X", c)
	}
	fmt.Fprintf(w, "b64=%s\nraw=%s\nurl=%s\nrawurl=%s\nhex=%s\nHEX=%s\nq=%s\np=%s\nall=%s\nblob=%s\nauth=%s\n",
		base64.StdEncoding.EncodeToString(b), base64.RawStdEncoding.EncodeToString(b),
		base64.URLEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b),
		hex.EncodeToString(b), strings.ToUpper(hex.EncodeToString(b)),
		url.QueryEscape(l.value), url.PathEscape(l.value), pct.String(),
		base64.StdEncoding.EncodeToString([]byte("header-block: x"+l.auth+"\r\n")),
		base64.StdEncoding.EncodeToString(l.echo))
}

func leakChunked(w http.ResponseWriter, _ *http.Request, l leaked) {
	fl := w.(http.Flusher)
	for i := 0; i < len(l.auth); i++ {
		w.Write([]byte{l.auth[i]})
		fl.Flush()
	}
}

func leakSSE(w http.ResponseWriter, _ *http.Request, l leaked) {
	fl := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	for i := range 3 {
		ev := fmt.Sprintf("id: %d\nevent: token\ndata: {\"n\":%d,\"token\":%q}\n\n", i, i, l.value)
		for len(ev) > 0 {
			n := min(3+i, len(ev))
			w.Write([]byte(ev[:n]))
			fl.Flush()
			ev = ev[n:]
		}
	}
}

func leakGzip(w http.ResponseWriter, _ *http.Request, l leaked) {
	w.Header().Set("Content-Encoding", "gzip")
	gz := gzip.NewWriter(w)
	gz.Write(l.echo)
	gz.Close()
}

func leakRedirect(w http.ResponseWriter, r *http.Request, l leaked) {
	to := r.URL.Query().Get("to")
	if to == "" {
		to = "https://other.example.com/callback"
	}
	w.Header().Set("Location", to+"?token="+url.QueryEscape(l.value))
	w.WriteHeader(http.StatusFound)
	fmt.Fprintf(w, "moved, token %s", l.value)
}

func leakTrailer(w http.ResponseWriter, _ *http.Request, l leaked) {
	w.Header().Set("Trailer", "X-Token")
	w.Write([]byte("body first\n"))
	w.Header().Set("X-Token", l.value)
}

// leakReason writes a raw response: the value in the status line's reason
// phrase, in a header value and, when it is a valid token, in a header name
// as the upstream spelled it.
func leakReason(w http.ResponseWriter, _ *http.Request, l leaked) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return
	}
	conn, bw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	named := ""
	if validToken(l.value) {
		named = "X-" + l.value + ": reflected\r\n"
	}
	fmt.Fprintf(bw, "HTTP/1.1 401 invalid key %s\r\nX-Reflected: %s\r\n%sContent-Length: 2\r\nConnection: close\r\n\r\nno", l.value, l.value, named)
	bw.Flush()
}

func leakPartial(w http.ResponseWriter, _ *http.Request, l leaked) {
	w.Header().Set("Content-Range", "bytes 0-3/40")
	w.WriteHeader(http.StatusPartialContent)
	w.Write([]byte(l.value[:min(4, len(l.value))]))
}

// validToken reports whether s may be a header field name (RFC 9110 token).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
