package secrets

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-dev/airlock/secrets/secretstest"
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

func newLogSink(t testing.TB, values ...string) (*slog.Logger, *logSink) {
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

// transport returns a transport that trusts only the upstream's certificate
// and dials only the upstream (a recording dialer that refuses any other
// address).
func transport(t *testing.T, u *secretstest.Upstream, trust bool) *http.Transport {
	t.Helper()
	pool := x509.NewCertPool()
	if trust {
		pool.AddCert(u.Server.Certificate())
	}
	target := u.Addr
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

type netConn = net.Conn

var dialer net.Dialer

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
