package secrets

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// logSink collects a test's operational logs; at cleanup it fails the test if
// any form of a watched value appears in them.
type logSink struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	watch []string
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func (s *logSink) Watch(values ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watch = append(s.watch, values...)
}

func newLogSink(t *testing.T, values ...string) (*slog.Logger, *logSink) {
	t.Helper()
	sink := &logSink{watch: append([]string{canary}, values...)}
	t.Cleanup(func() {
		logs := sink.String()
		for _, v := range sink.watch {
			for _, f := range CanaryForms(v) {
				if strings.Contains(logs, f) {
					t.Errorf("operational logs contain a form of a secret value: %q", f)
				}
			}
		}
	})
	return slog.New(slog.NewJSONHandler(sink, &slog.HandlerOptions{Level: slog.LevelDebug})), sink
}

func testLogger(t *testing.T) *slog.Logger {
	l, _ := newLogSink(t)
	return l
}

// seenRequest is what the upstream received.
type seenRequest struct {
	Host    string
	Path    string
	RawQ    string
	Header  http.Header
	Body    string
	BodyErr bool
}

// upstream is a TLS echo server for *.example.com. Paths:
//
//	/echo      request headers and body back in the body (JSON) and as X-Echo-* headers
//	/encoded   the Authorization value in base64, hex, percent and JSON forms
//	/chunked   the Authorization value one byte per flushed chunk
//	/sse       server-sent events, the value split across flushes
//	/gzip      the echo gzipped with Content-Encoding: gzip
//	/redirect  302 to another host with the value in the Location
//	/trailer   the value in a trailer
//	/reason    a raw 401 with the value in the reason phrase, a header value and (a token) a header name
//	/slow      waits for release, then echoes
type upstream struct {
	srv     *httptest.Server
	mu      sync.Mutex
	seen    []seenRequest
	count   atomic.Int64
	release chan struct{}
	arrived chan struct{}
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{release: make(chan struct{}), arrived: make(chan struct{}, 100)}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(u.serve))
	u.srv.EnableHTTP2 = false
	u.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // untrusted-client handshakes fail on purpose
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) port() int { return u.srv.Listener.Addr().(*net.TCPAddr).Port }

func (u *upstream) requests() []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenRequest(nil), u.seen...)
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	u.count.Add(1)
	body, err := io.ReadAll(r.Body)
	u.mu.Lock()
	u.seen = append(u.seen, seenRequest{Host: r.Host, Path: r.URL.Path, RawQ: r.URL.RawQuery,
		Header: r.Header.Clone(), Body: string(body), BodyErr: err != nil})
	u.mu.Unlock()
	if err != nil {
		return
	}
	auth := r.Header.Get("Authorization")
	value := auth
	if i := strings.IndexByte(auth, ' '); i >= 0 {
		value = auth[i+1:]
	}
	echo, _ := json.Marshal(map[string]any{"headers": r.Header, "body": string(body), "host": r.Host})
	fl := w.(http.Flusher)
	switch r.URL.Path {
	case "/slow":
		u.arrived <- struct{}{}
		<-u.release
		fallthrough
	case "/echo":
		for name, vals := range r.Header {
			for _, v := range vals {
				w.Header().Add("X-Echo-"+name, v)
			}
		}
		w.Header().Set("Set-Cookie", "session="+value)
		w.Header().Set("X-"+value, "in a header name")
		w.Write(echo)
	case "/encoded":
		b := []byte(value)
		fmt.Fprintf(w, "b64=%s\nraw=%s\nurl=%s\nrawurl=%s\nhex=%s\nHEX=%s\nq=%s\np=%s\nall=%s\nblob=%s\nauth=%s\n",
			base64.StdEncoding.EncodeToString(b), base64.RawStdEncoding.EncodeToString(b),
			base64.URLEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b),
			hex.EncodeToString(b), strings.ToUpper(hex.EncodeToString(b)),
			url.QueryEscape(value), url.PathEscape(value), percentAll(b, "0123456789ABCDEF"),
			base64.StdEncoding.EncodeToString([]byte("header-block: x"+auth+"\r\n")),
			base64.StdEncoding.EncodeToString(echo))
	case "/chunked":
		for i := 0; i < len(auth); i++ {
			w.Write([]byte{auth[i]})
			fl.Flush()
		}
	case "/sse":
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 3; i++ {
			ev := fmt.Sprintf("id: %d\nevent: token\ndata: {\"n\":%d,\"token\":%q}\n\n", i, i, value)
			for len(ev) > 0 {
				n := 5 + i
				if n > len(ev) {
					n = len(ev)
				}
				w.Write([]byte(ev[:n]))
				fl.Flush()
				ev = ev[n:]
			}
		}
	case "/gzip":
		w.Header().Set("Content-Encoding", "gzip")
		gz := gzip.NewWriter(w)
		gz.Write(echo)
		gz.Close()
	case "/redirect":
		w.Header().Set("Location", "https://other.example.com/callback?token="+url.QueryEscape(value))
		w.WriteHeader(http.StatusFound)
		w.Write([]byte("moved, token " + value))
	case "/trailer":
		w.Header().Set("Trailer", "X-Token")
		w.Write([]byte("body first\n"))
		w.Header().Set("X-Token", value)
	case "/reason":
		// A raw response: the value in the status line's reason phrase, in a
		// header value and, when it is a valid token, in a header name as
		// the upstream spelled it.
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
		if validToken(value) {
			named = "X-" + value + ": reflected\r\n"
		}
		fmt.Fprintf(bw, "HTTP/1.1 401 invalid key %s\r\nX-Reflected: %s\r\n%sContent-Length: 2\r\nConnection: close\r\n\r\nno", value, value, named)
		bw.Flush()
	case "/partial":
		w.Header().Set("Content-Range", "bytes 0-3/40")
		w.WriteHeader(http.StatusPartialContent)
		w.Write([]byte(value[:4]))
	default:
		w.Write([]byte("ok"))
	}
}

// client returns a transport that trusts only the upstream's certificate and
// dials only the upstream (a recording dialer that refuses any other address).
func (u *upstream) transport(t *testing.T, trust bool) *http.Transport {
	t.Helper()
	pool := x509.NewCertPool()
	if trust {
		pool.AddCert(u.srv.Certificate())
	}
	target := u.srv.Listener.Addr().String()
	return &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil || !strings.HasSuffix(host, ".example.com") {
				return nil, fmt.Errorf("test dialer refuses %s", addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", target)
		},
		DisableCompression: true,
		ForceAttemptHTTP2:  false,
	}
}

// roundTrip does what the gateway does with an intercepted request: Inject,
// send, ScrubResponse, read the whole response. It returns what the sandbox
// would see (status line, headers, body, trailers as one string).
func roundTrip(t *testing.T, in *Injector, tr http.RoundTripper, sb Sandbox, req *http.Request) (*Applied, string, error) {
	t.Helper()
	a, err := in.Inject(context.Background(), sb, req)
	if err != nil {
		return nil, "", err
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return a, "", err
	}
	if err := in.ScrubResponse(a, resp); err != nil {
		return a, "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return a, "", err
	}
	var sb2 strings.Builder
	fmt.Fprintf(&sb2, "%s\n", resp.Status) // "401 reason phrase", as Response.Write sends it
	resp.Header.Write(&sb2)
	sb2.Write(body)
	resp.Trailer.Write(&sb2)
	return a, sb2.String(), nil
}

func assertNoForms(t *testing.T, what, seen string, values ...string) {
	t.Helper()
	for _, v := range values {
		for _, f := range CanaryForms(v) {
			if strings.Contains(seen, f) {
				t.Errorf("%s contains form %q of a secret:\n%s", what, f, seen)
				return
			}
		}
	}
}

func mustReq(t *testing.T, method, rawurl string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, rawurl, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func waitFor(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for the upstream")
	}
}

type netConn = net.Conn

var dialer net.Dialer

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

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
