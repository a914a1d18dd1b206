package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
	"github.com/airlock-dev/airlock/secrets"
	"github.com/airlock-dev/airlock/secrets/secretstest"
)

// secretCanary is the test secret's value: it must reach the bound upstream and
// never the sandbox, the audit log, the operational log or the metrics.
const secretCanary = "sk-airlock-canary-7Qx9vLm2Rt5Zp8Kd"

// syncBuffer is an operational log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newEchoUpstream is a leaking upstream whose Carrying counts the requests
// that carry the canary in any of its forms.
func newEchoUpstream(t *testing.T, cert *tls.Certificate) *secretstest.Upstream {
	t.Helper()
	u := secretstest.New(t, cert)
	u.Watch(secrets.CanaryForms(secretCanary)...)
	return u
}

func carriesCanary(s string) bool {
	for _, f := range secrets.CanaryForms(secretCanary) {
		if strings.Contains(s, f) {
			return true
		}
	}
	return false
}

// secretsSetup is one gateway with a secrets Injector built from YAML, serving
// sandboxes sb-test and sb-other.
type secretsSetup struct {
	h          *harness
	inj        *secrets.Injector
	pki        *testPKI
	bound      *secretstest.Upstream // api.bound.example and ph.bound.example (bound port)
	unbound    *secretstest.Upstream // api.unbound.example, allowed and intercepted by policy
	otherPort  *secretstest.Upstream // api.bound.example on a port no binding names
	plain      *secretstest.Upstream // plain HTTP, named api.bound.example
	self       *upstream             // selfsigned.bound.example: bound, but its certificate is not trusted
	ph         string                // sb-test's placeholder
	otherPH    string                // sb-other's placeholder
	logs       *syncBuffer
	client     *http.Client // sb-test, trusts the gateway's CA and the upstream CA
	other      *http.Client // sb-other
	otherProxy string
}

func newSecretsSetup(t *testing.T) *secretsSetup {
	t.Helper()
	st := &secretsSetup{pki: newTestPKI(t), logs: &syncBuffer{}}
	cert := st.pki.leaf(t, "api.bound.example", "ph.bound.example", "api.unbound.example", "selfsigned.bound.example")
	st.bound = newEchoUpstream(t, &cert)
	st.unbound = newEchoUpstream(t, &cert)
	st.otherPort = newEchoUpstream(t, &cert)
	st.plain = newEchoUpstream(t, nil)
	st.self = newUpstreamSelfSigned(t)

	dir := t.TempDir()
	valueFile := filepath.Join(dir, "api.txt")
	if err := os.WriteFile(valueFile, []byte(secretCanary+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	yml := fmt.Sprintf(`secrets:
  - id: api
    file: %s
bindings:
  - secret: api
    sandboxes: {ids: [sb-test]}
    host: api.bound.example
    port: %d
    template: "Bearer {{value}}"
  - secret: api
    sandboxes: {ids: [sb-test, sb-other]}
    host: ph.bound.example
    port: %d
    header: X-Api-Key
    template: "{{value}}"
    mode: placeholder
    placeholder_env: API_KEY
  - secret: api
    sandboxes: {ids: [sb-test]}
    host: selfsigned.bound.example
    port: %d
    template: "Bearer {{value}}"
`, valueFile, st.bound.Port, st.bound.Port, st.self.port)
	cfg, err := secrets.Parse([]byte(yml))
	if err != nil {
		t.Fatalf("secrets config: %v", err)
	}
	logger := slog.New(slog.NewJSONHandler(st.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	st.inj, err = secrets.New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	env, err := st.inj.Placeholders(secrets.Sandbox{ID: "sb-test"})
	if err != nil || env["API_KEY"] == "" {
		t.Fatalf("placeholders: %v %v", env, err)
	}
	st.ph = env["API_KEY"]
	env, _ = st.inj.Placeholders(secrets.Sandbox{ID: "sb-other"})
	st.otherPH = env["API_KEY"]

	// The bound hosts are allowed but not intercepted by policy: the binding
	// alone must force interception. The unbound host is intercepted by policy.
	hosts := []string{"api.bound.example", "ph.bound.example", "api.unbound.example", "selfsigned.bound.example"}
	dec := policytest.Allow(hosts...).Intercept("api.unbound.example")
	st.h = newHarnessLogger(t, dec, names(hosts...), st.pki, logger, func(c *Config) { c.Injector = st.inj })
	st.h.allowUpstreams(st.self)
	for _, u := range []*secretstest.Upstream{st.bound, st.unbound, st.otherPort, st.plain} {
		st.h.dialer.allow(u.Addr)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.h.g.ServeSandbox(policy.Sandbox{ID: "sb-other"}, l, nil); err != nil {
		t.Fatal(err)
	}
	st.otherProxy = l.Addr().String()
	roots := x509.NewCertPool()
	roots.AddCert(st.pki.upCA)
	mitm, _ := LoadCACert(st.pki.mitmCert)
	roots.AddCert(mitm)
	st.client = clientVia(st.h.explicit, roots)
	st.other = clientVia(st.otherProxy, roots)
	return st
}

func clientVia(proxy string, roots *x509.CertPool) *http.Client {
	pu, _ := url.Parse("http://" + proxy)
	return &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: roots}},
		Timeout:   10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// do sends a request and returns the response with its whole body, headers
// and trailers flattened into one string for leak checks.
func do(t *testing.T, c *http.Client, method, u string, hdr map[string]string, body string) (*http.Response, string, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var all strings.Builder
	for k, vs := range resp.Header {
		all.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
	}
	for k, vs := range resp.Trailer {
		all.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
	}
	all.Write(b)
	return resp, string(b), all.String()
}

// auditOf waits for the audit record of the decision id a response names.
func auditOf(t *testing.T, h *harness, resp *http.Response) audit.Record {
	t.Helper()
	id := resp.Header.Get("X-Airlock-Decision")
	if id != "" {
		return h.log.Wait(t, "decision "+id, func(r audit.Record) bool { return r.ID == id && r.Kind != audit.KindClose })
	}
	t.Fatalf("response %d has no X-Airlock-Decision", resp.StatusCode)
	return audit.Record{}
}

// lastHTTPRecord waits for the newest http record for a host and path.
func lastHTTPRecord(t *testing.T, h *harness, host, path string) audit.Record {
	t.Helper()
	var found audit.Record
	h.log.Wait(t, "http "+host+path, func(r audit.Record) bool {
		if r.Kind == audit.KindHTTP && r.Host == host && r.Path == path {
			found = r
			return true
		}
		return false
	})
	return found
}

func TestSecretsInjection(t *testing.T) {
	st := newSecretsSetup(t)
	h := st.h
	bp := st.bound.Port
	boundURL := func(host, path string) string { return fmt.Sprintf("https://%s:%d%s", host, bp, path) }

	t.Run("bound upstream gets the secret, sandbox never sees it", func(t *testing.T) {
		for _, path := range []string{"/echo", "/chunked", "/sse"} {
			beforeSecret := st.bound.Carrying.Load()
			resp, _, all := do(t, st.client, "GET", boundURL("api.bound.example", path), map[string]string{"Authorization": "Bearer sandbox-own"}, "")
			if resp.StatusCode != 200 {
				t.Fatalf("%s: status %d", path, resp.StatusCode)
			}
			if got := st.bound.Last().Header.Get("Authorization"); got != "Bearer "+secretCanary {
				t.Fatalf("%s: upstream Authorization: got %q, want the injected credential", path, got)
			}
			if got := st.bound.Carrying.Load() - beforeSecret; got != 1 {
				t.Fatalf("%s: secret-bearing upstream requests: got %d, want 1", path, got)
			}
			if carriesCanary(all) {
				t.Fatalf("%s: the sandbox received a form of the secret:\n%s", path, all)
			}
			if strings.Contains(all, "sandbox-own") {
				t.Fatalf("%s: the sandbox's own credential reached the upstream", path)
			}
			if !strings.Contains(all, audit.Redacted) {
				t.Fatalf("%s: response shows no scrub:\n%s", path, all)
			}
			if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName == "fake internet CA" {
				t.Fatalf("%s: not intercepted: the binding must force interception", path)
			}
			rec := lastHTTPRecord(t, h, "api.bound.example", path)
			if len(rec.Secrets) != 1 || rec.Secrets[0].ID != "api" || rec.Secrets[0].Fingerprint == "" || rec.Secrets[0].Scrubbed == 0 {
				t.Fatalf("%s: audit secrets: got %+v, want api with a fingerprint and scrubs", path, rec.Secrets)
			}
		}
	})

	t.Run("gzip refused", func(t *testing.T) {
		resp, body, all := do(t, st.client, "GET", boundURL("api.bound.example", "/gzip"), nil, "")
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, ReasonSecretResponse) {
			t.Fatalf("got %d %q, want 502 %s", resp.StatusCode, body, ReasonSecretResponse)
		}
		if carriesCanary(all) {
			t.Fatal("gzip refusal carried the secret")
		}
		rec := auditOf(t, h, resp)
		if rec.Status != 502 || rec.Error == "" {
			t.Fatalf("audit: got %+v, want status 502 with an error", rec)
		}
	})

	t.Run("placeholder substituted in its bound header", func(t *testing.T) {
		resp, _, all := do(t, st.client, "GET", boundURL("ph.bound.example", "/echo"), map[string]string{"X-Api-Key": st.ph}, "")
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if got := st.bound.Last().Header.Get("X-Api-Key"); got != secretCanary {
			t.Fatalf("upstream X-Api-Key: got %q, want the real value", got)
		}
		if carriesCanary(all) {
			t.Fatal("response carried the secret")
		}
	})

	t.Run("placeholder elsewhere is denied, flagged, and the target sees nothing", func(t *testing.T) {
		tests := []struct {
			name   string
			c      *http.Client
			method string
			url    string
			hdr    map[string]string
			body   string
			target *secretstest.Upstream
			code   string
			flag   string
		}{
			{"unbound host", st.client, "GET", fmt.Sprintf("https://api.unbound.example:%d/echo", st.unbound.Port),
				map[string]string{"X-Api-Key": st.ph}, "", st.unbound, secrets.CodePlaceholderMisuse, secrets.FlagPlaceholderLeak},
			{"body", st.client, "POST", boundURL("ph.bound.example", "/echo"),
				map[string]string{"X-Api-Key": st.ph}, "key=" + st.ph, st.bound, secrets.CodePlaceholderMisuse, secrets.FlagPlaceholderLeak},
			{"path", st.client, "GET", boundURL("ph.bound.example", "/x/"+st.ph),
				map[string]string{"X-Api-Key": st.ph}, "", st.bound, secrets.CodePlaceholderMisuse, secrets.FlagPlaceholderLeak},
			{"query", st.client, "GET", boundURL("ph.bound.example", "/echo?k="+st.ph),
				map[string]string{"X-Api-Key": st.ph}, "", st.bound, secrets.CodePlaceholderMisuse, secrets.FlagPlaceholderLeak},
			{"another header", st.client, "GET", boundURL("ph.bound.example", "/echo"),
				map[string]string{"X-Api-Key": st.ph, "X-Other": st.ph}, "", st.bound, secrets.CodePlaceholderMisuse, secrets.FlagPlaceholderLeak},
			{"another sandbox", st.other, "GET", boundURL("ph.bound.example", "/echo"),
				map[string]string{"X-Api-Key": st.ph}, "", st.bound, secrets.CodePlaceholderForeign, secrets.FlagForeignToken},
			{"plain http", st.client, "GET", fmt.Sprintf("http://api.bound.example:%d/echo", st.plain.Port),
				map[string]string{"X-Api-Key": st.ph}, "", st.plain, secrets.CodePlaceholderMisuse, secrets.FlagPlaceholderLeak},
			{"unbound host, Authorization", st.client, "GET", fmt.Sprintf("https://api.unbound.example:%d/echo", st.unbound.Port),
				map[string]string{"Authorization": "Bearer " + st.ph}, "", st.unbound, secrets.CodePlaceholderMisuse, secrets.FlagPlaceholderLeak},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				before := tc.target.Received.Load()
				resp, body, _ := do(t, tc.c, tc.method, tc.url, tc.hdr, tc.body)
				if resp.StatusCode != 403 || !strings.Contains(body, tc.code) {
					t.Fatalf("got %d %q, want 403 %s", resp.StatusCode, body, tc.code)
				}
				rec := auditOf(t, h, resp)
				if rec.Decision != audit.DecisionDeny || !audittest.HasReason(rec, tc.code) || !slices.Contains(rec.Flags, tc.flag) {
					t.Fatalf("audit: got %+v, want deny %s flagged %s", rec, tc.code, tc.flag)
				}
				if got := tc.target.Received.Load() - before; got != 0 {
					t.Fatalf("target upstream requests: got %d, want 0", got)
				}
			})
		}
		t.Run("CONNECT line and CONNECT host", func(t *testing.T) {
			before := st.bound.Received.Load()
			for _, raw := range []string{
				fmt.Sprintf("CONNECT ph.bound.example:%d HTTP/1.1\r\nHost: ph.bound.example:%d\r\nX-Api-Key: %s\r\n\r\n", bp, bp, st.ph),
				fmt.Sprintf("CONNECT %s.example:443 HTTP/1.1\r\n\r\n", st.ph),
			} {
				resp, body := rawRequest(t, h.explicit, raw)
				if resp.StatusCode != 403 || !strings.Contains(body, secrets.CodePlaceholderMisuse) {
					t.Fatalf("got %d %q, want 403 %s", resp.StatusCode, body, secrets.CodePlaceholderMisuse)
				}
				rec := auditOf(t, h, resp)
				if rec.Kind != audit.KindConnect || !slices.Contains(rec.Flags, secrets.FlagPlaceholderLeak) {
					t.Fatalf("audit: got %+v, want a flagged connect deny", rec)
				}
			}
			if got := st.bound.Received.Load() - before; got != 0 {
				t.Fatalf("bound upstream requests: got %d, want 0", got)
			}
		})
	})

	t.Run("no secret leaves to the wrong place", func(t *testing.T) {
		innerReq := func(t *testing.T, conn net.Conn, br *bufio.Reader, host string, port int) int {
			t.Helper()
			fmt.Fprintf(conn, "GET /echo HTTP/1.1\r\nHost: %s:%d\r\n\r\n", host, port)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("inner request to %s: %v", host, err)
			}
			b, _ := io.ReadAll(resp.Body)
			if carriesCanary(string(b)) {
				t.Fatalf("inner response carried the secret: %s", b)
			}
			return resp.StatusCode
		}
		boundSecret, unboundReqs := st.bound.Carrying.Load(), st.unbound.Received.Load()

		t.Run("CONNECT unbound, inner Host bound", func(t *testing.T) {
			conn, br := mitmConn(t, h, st.pki, "api.unbound.example", st.unbound.Port)
			defer conn.Close()
			if got := innerReq(t, conn, br, "api.bound.example", bp); got != 403 {
				t.Fatalf("status: got %d, want 403", got)
			}
		})
		t.Run("CONNECT bound, inner Host unbound", func(t *testing.T) {
			conn, br := mitmConn(t, h, st.pki, "api.bound.example", bp)
			defer conn.Close()
			if got := innerReq(t, conn, br, "api.unbound.example", st.unbound.Port); got != 403 {
				t.Fatalf("status: got %d, want 403", got)
			}
		})
		t.Run("SNI is not the CONNECT host", func(t *testing.T) {
			c, err := net.Dial("tcp", h.explicit)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "CONNECT api.bound.example:%d HTTP/1.1\r\n\r\n", bp)
			br := bufio.NewReader(c)
			if r, err := http.ReadResponse(br, nil); err != nil || r.StatusCode != 200 {
				t.Fatalf("connect: %v %v", r, err)
			}
			tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: "api.unbound.example", RootCAs: st.pki.mitmCAPool})
			tc.SetDeadline(time.Now().Add(5 * time.Second))
			if err := tc.Handshake(); err == nil {
				t.Fatal("handshake with SNI api.unbound.example inside CONNECT api.bound.example succeeded")
			}
		})
		t.Run("kept-alive connection switching Host", func(t *testing.T) {
			conn, br := mitmConn(t, h, st.pki, "api.bound.example", bp)
			defer conn.Close()
			if got := innerReq(t, conn, br, "api.bound.example", bp); got != 200 {
				t.Fatalf("first request: got %d, want 200", got)
			}
			if got := st.bound.Carrying.Load() - boundSecret; got != 1 {
				t.Fatalf("bound upstream secret-bearing requests: got %d, want 1", got)
			}
			boundSecret++
			if got := innerReq(t, conn, br, "api.unbound.example", st.unbound.Port); got != 403 {
				t.Fatalf("second request: got %d, want 403", got)
			}
		})
		if got := st.bound.Carrying.Load() - boundSecret; got != 0 {
			t.Fatalf("bound upstream got %d secret-bearing requests from fronting attempts, want 0", got)
		}
		if got := st.unbound.Received.Load() - unboundReqs; got != 0 {
			t.Fatalf("unbound upstream requests: got %d, want 0", got)
		}

		t.Run("302 to another host", func(t *testing.T) {
			follow := *st.client
			follow.CheckRedirect = nil
			unboundBefore, unboundSecret := st.unbound.Received.Load(), st.unbound.Carrying.Load()
			to := fmt.Sprintf("https://api.unbound.example:%d/landing", st.unbound.Port)
			resp, _, all := do(t, &follow, "GET", boundURL("api.bound.example", "/redirect?to="+url.QueryEscape(to)), nil, "")
			if resp.StatusCode != 200 || resp.Request.URL.Host != fmt.Sprintf("api.unbound.example:%d", st.unbound.Port) {
				t.Fatalf("redirect: got %d at %v, want 200 at the unbound host", resp.StatusCode, resp.Request.URL)
			}
			if carriesCanary(all) {
				t.Fatal("the sandbox saw the secret")
			}
			if got := st.unbound.Received.Load() - unboundBefore; got != 1 {
				t.Fatalf("unbound upstream requests: got %d, want 1 (the followed redirect)", got)
			}
			if got := st.unbound.Carrying.Load() - unboundSecret; got != 0 {
				t.Fatalf("unbound upstream secret-bearing requests: got %d, want 0", got)
			}
			if got := st.unbound.Last().Header.Get("Authorization"); got != "" {
				t.Fatalf("unbound upstream Authorization: got %q, want none", got)
			}
		})
	})

	t.Run("no injection", func(t *testing.T) {
		own := map[string]string{"Authorization": "Bearer sandbox-own"}
		t.Run("plain http to the bound host", func(t *testing.T) {
			resp, _, _ := do(t, st.client, "GET", fmt.Sprintf("http://api.bound.example:%d/echo", st.plain.Port), own, "")
			if resp.StatusCode != 200 || st.plain.Last().Header.Get("Authorization") != "Bearer sandbox-own" {
				t.Fatalf("got %d, Authorization %q: want 200 with the sandbox's own header", resp.StatusCode, st.plain.Last().Header.Get("Authorization"))
			}
			if rec := lastHTTPRecord(t, h, "api.bound.example", "/echo"); len(rec.Secrets) != 0 && rec.Port == st.plain.Port {
				t.Fatalf("audit secrets on plain http: %+v", rec.Secrets)
			}
		})
		t.Run("another port", func(t *testing.T) {
			resp, _, _ := do(t, st.client, "GET", fmt.Sprintf("https://api.bound.example:%d/echo", st.otherPort.Port), own, "")
			if resp.StatusCode != 200 || st.otherPort.Last().Header.Get("Authorization") != "Bearer sandbox-own" {
				t.Fatalf("got %d, Authorization %q", resp.StatusCode, st.otherPort.Last().Header.Get("Authorization"))
			}
		})
		t.Run("self-signed upstream", func(t *testing.T) {
			resp, body, _ := do(t, st.client, "GET", fmt.Sprintf("https://selfsigned.bound.example:%d/", st.self.port), own, "")
			if resp.StatusCode != 502 || !strings.Contains(body, ReasonUpstreamTLS) {
				t.Fatalf("got %d %q, want 502 %s", resp.StatusCode, body, ReasonUpstreamTLS)
			}
			if got := st.self.reqs.Load(); got != 0 {
				t.Fatalf("self-signed upstream requests: got %d, want 0", got)
			}
			if rec := auditOf(t, h, resp); len(rec.Secrets) != 0 {
				t.Fatalf("audit secrets: got %+v, want none (nothing was sent)", rec.Secrets)
			}
		})
		for _, u := range []*secretstest.Upstream{st.plain, st.otherPort} {
			if got := u.Carrying.Load(); got != 0 {
				t.Fatalf("upstream %s got %d secret-bearing requests, want 0", u.Addr, got)
			}
		}
	})

	t.Run("transparent TLS", func(t *testing.T) {
		h.origDst.Store(netip.MustParseAddrPort(st.bound.Addr))
		t.Run("bound host is intercepted and injected", func(t *testing.T) {
			before := st.bound.Carrying.Load()
			c, err := tls.Dial("tcp", h.transp, &tls.Config{ServerName: "api.bound.example", RootCAs: st.pki.mitmCAPool})
			if err != nil {
				t.Fatalf("transparent TLS to a bound host (interception forced by the binding): %v", err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, "GET /echo HTTP/1.1\r\nHost: api.bound.example\r\nConnection: close\r\n\r\n")
			b, _ := io.ReadAll(c)
			if !strings.Contains(string(b), "200 OK") || carriesCanary(string(b)) {
				t.Fatalf("response: want 200 without the secret, got %q", b)
			}
			if got := st.bound.Carrying.Load() - before; got != 1 {
				t.Fatalf("bound upstream secret-bearing requests: got %d, want 1", got)
			}
		})
		t.Run("placeholder as SNI", func(t *testing.T) {
			before := st.bound.Received.Load()
			c, err := net.Dial("tcp", h.transp)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tc := tls.Client(c, &tls.Config{ServerName: st.ph + ".example", RootCAs: st.pki.mitmCAPool})
			tc.SetDeadline(time.Now().Add(5 * time.Second))
			if err := tc.Handshake(); err == nil {
				t.Fatal("handshake with a placeholder as server name succeeded")
			}
			h.log.Wait(t, "flagged sni", func(r audit.Record) bool {
				return r.Kind == audit.KindTLS && audittest.HasReason(r, secrets.CodePlaceholderMisuse) && slices.Contains(r.Flags, secrets.FlagPlaceholderLeak)
			})
			if got := st.bound.Received.Load() - before; got != 0 {
				t.Fatalf("bound upstream requests: got %d, want 0", got)
			}
		})
	})

	t.Run("source unavailable answers 503 and forwards nothing", func(t *testing.T) {
		dir := t.TempDir()
		yml := fmt.Sprintf("secrets:\n  - id: gone\n    file: %s\nbindings:\n  - secret: gone\n    sandboxes: {ids: [sb-test]}\n    host: api.bound.example\n    port: %d\n    template: \"Bearer {{value}}\"\n",
			filepath.Join(dir, "missing"), bp)
		cfg, err := secrets.Parse([]byte(yml))
		if err != nil {
			t.Fatal(err)
		}
		inj, err := secrets.New(cfg, slog.New(slog.NewJSONHandler(st.logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		h2 := newHarnessLogger(t, policytest.Allow("api.bound.example"), names("api.bound.example"), st.pki, nil, func(c *Config) { c.Injector = inj })
		h2.dialer.allow(st.bound.Addr)
		before := st.bound.Received.Load()
		resp, body, _ := do(t, clientVia(h2.explicit, st.pki.mitmCAPool), "GET", boundURL("api.bound.example", "/echo"), nil, "")
		if resp.StatusCode != 503 || !strings.Contains(body, ReasonSecretUnavailable) {
			t.Fatalf("got %d %q, want 503 %s", resp.StatusCode, body, ReasonSecretUnavailable)
		}
		if got := st.bound.Received.Load() - before; got != 0 {
			t.Fatalf("bound upstream requests: got %d, want 0", got)
		}
	})

	t.Run("no form of the secret in audit, logs or metrics", func(t *testing.T) {
		recs, err := json.Marshal(h.log.Records())
		if err != nil {
			t.Fatal(err)
		}
		rr := httptest.NewRecorder()
		h.g.MetricsHandler().ServeHTTP(rr, httptest.NewRequest("GET", "/metrics", nil))
		logs := st.logs.String()
		if !strings.Contains(logs, "secret injected") || len(recs) < 1000 || rr.Body.Len() < 1000 {
			t.Fatalf("nothing to grep: logs %d bytes, audit %d bytes, metrics %d bytes", len(logs), len(recs), rr.Body.Len())
		}
		for what, text := range map[string]string{"audit records": string(recs), "operational logs": logs, "metrics": rr.Body.String()} {
			for _, f := range secrets.CanaryForms(secretCanary) {
				if n := strings.Count(text, f); n != 0 {
					t.Errorf("%s contain %d copies of a form of the secret (%d bytes in)", what, n, strings.Index(text, f))
				}
			}
		}
	})
}
