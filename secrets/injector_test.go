package secrets

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/secrets/secretstest"
)

const canaryEnv = "AIRLOCK_TEST_CANARY_SECRET"

var (
	sb1 = Sandbox{ID: "sb-1", Labels: map[string]string{"agent": "coder"}}
	sb2 = Sandbox{ID: "sb-2", Labels: map[string]string{"agent": "coder"}}
	sb3 = Sandbox{ID: "sb-3"}
)

// setup builds an injector with one env secret bound to api.example.com on the
// upstream's port for sb-1 and sb-2; mut edits the binding or config first.
func setup(t *testing.T, mut func(c *Config)) (*Injector, *secretstest.Upstream, *logSink) {
	t.Helper()
	t.Setenv(canaryEnv, canary)
	u := secretstest.NewTLS(t)
	cfg := Config{
		Secrets: []SecretConfig{{ID: "canary", Env: canaryEnv}},
		Bindings: []BindingConfig{{
			Secret:    "canary",
			Sandboxes: SandboxSelector{IDs: []string{"sb-1"}, Labels: map[string]string{"agent": "coder"}},
			Host:      "api.example.com",
			Port:      u.Port,
			Template:  "Bearer {{value}}",
			Strip:     []string{"Cookie"},
		}},
	}
	if mut != nil {
		mut(&cfg)
	}
	log, sink := newLogSink(t)
	in, err := New(cfg, log)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return in, u, sink
}

func TestInjectedValueNeverReachesSandbox(t *testing.T) {
	in, u, _ := setup(t, nil)
	tr := transport(t, u, true)
	for _, path := range []string{"/echo", "/encoded", "/chunked", "/sse", "/redirect", "/trailer", "/reason", "/slowless"} {
		t.Run(path, func(t *testing.T) {
			req := mustReq(t, "GET", u.URL("api.example.com", path), nil)
			req.Header.Set("Authorization", "Bearer the-sandbox-own-token")
			req.Header.Set("Cookie", "sid=sandbox-cookie")
			req.Header.Set("Accept-Encoding", "gzip, br")
			before := len(u.Requests())
			a, seen, err := roundTrip(t, in, tr, sb1, req)
			if err != nil {
				t.Fatalf("round trip: %v", err)
			}
			got := u.Requests()[before]
			if got.Header.Get("Authorization") != "Bearer "+canary {
				t.Errorf("upstream Authorization: got %q, want the injected value", got.Header.Get("Authorization"))
			}
			if got.Header.Get("Cookie") != "" || got.Header.Get("Accept-Encoding") != "identity" {
				t.Errorf("upstream Cookie %q, Accept-Encoding %q: want stripped and identity",
					got.Header.Get("Cookie"), got.Header.Get("Accept-Encoding"))
			}
			assertNoForms(t, "sandbox view", seen, canary)
			if strings.Contains(seen, "the-sandbox-own-token") && path == "/echo" {
				t.Errorf("the sandbox's own token was forwarded")
			}
			recs := a.Audit()
			auditJSON, err := json.Marshal(recs)
			if err != nil {
				t.Fatal(err)
			}
			assertNoForms(t, "audit entry", string(auditJSON), canary)
			if len(recs) != 1 || recs[0].ID != "canary" || recs[0].Version != "v1" ||
				recs[0].Where != "header:Authorization" || !strings.HasPrefix(recs[0].Fingerprint, "hmac-sha256:") {
				t.Errorf("audit: got %+v", recs)
			}
			if path != "/slowless" && recs[0].Scrubbed == 0 {
				t.Errorf("audit: got 0 scrubs, want some for %s", path)
			}
			if path == "/redirect" && !strings.Contains(seen, "302") {
				t.Errorf("redirect was not passed back as is: %s", seen)
			}
		})
	}
}

func TestResponsesThatCannotBeScrubbedAreRefused(t *testing.T) {
	in, u, _ := setup(t, nil)
	tr := transport(t, u, true)
	for _, tt := range []struct{ path, reason string }{
		{"/gzip", "content-encoding gzip"},
		{"/partial", "partial content"},
	} {
		t.Run(tt.path, func(t *testing.T) {
			req := mustReq(t, "GET", u.URL("api.example.com", tt.path), nil)
			req.Header.Set("Range", "bytes=0-3")
			req.Header.Set("If-Range", "x")
			before := len(u.Requests())
			_, seen, err := roundTrip(t, in, tr, sb1, req)
			var re *ResponseError
			if !errors.As(err, &re) || !strings.Contains(re.Reason, tt.reason) || HTTPStatus(err) != http.StatusBadGateway {
				t.Fatalf("got %v (status %d), want a ResponseError about %q and 502", err, HTTPStatus(err), tt.reason)
			}
			if seen != "" {
				t.Errorf("sandbox saw %q, want nothing", seen)
			}
			got := u.Requests()[before]
			if got.Header.Get("Range") != "" || got.Header.Get("If-Range") != "" {
				t.Errorf("Range headers reached the upstream: %v", got.Header)
			}
		})
	}
}

func TestBasicAuthBinding(t *testing.T) {
	in, u, _ := setup(t, func(c *Config) {
		c.Bindings[0].Template = ""
		c.Bindings[0].BasicUser = "x-access-token"
	})
	tr := transport(t, u, true)
	for _, path := range []string{"/echo", "/encoded"} {
		req := mustReq(t, "GET", u.URL("api.example.com", path), nil)
		_, seen, err := roundTrip(t, in, tr, sb1, req)
		if err != nil {
			t.Fatal(err)
		}
		token := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + canary))
		if got := u.Requests()[len(u.Requests())-1].Header.Get("Authorization"); got != "Basic "+token {
			t.Errorf("upstream Authorization: got %q, want Basic credentials", got)
		}
		assertNoForms(t, "sandbox view "+path, seen, canary, token)
	}
}

func TestNoInjectionOutsideBinding(t *testing.T) {
	in, u, _ := setup(t, func(c *Config) {
		c.Bindings[0].Methods = []string{"GET"}
		c.Bindings[0].Paths = []string{"/echo"}
	})
	tests := []struct {
		name   string
		sb     Sandbox
		method string
		url    string
	}{
		{"plain http", sb1, "GET", fmt.Sprintf("http://api.example.com:%d/echo", u.Port)},
		{"another port", sb1, "GET", "https://api.example.com:8443/echo"},
		{"default port", sb1, "GET", "https://api.example.com/echo"},
		{"another host", sb1, "GET", u.URL("other.example.com", "/echo")},
		{"subdomain of bound host", sb1, "GET", u.URL("x.api.example.com", "/echo")},
		{"another sandbox", sb3, "GET", u.URL("api.example.com", "/echo")},
		{"method not bound", sb1, "POST", u.URL("api.example.com", "/echo")},
		{"path not bound", sb1, "GET", u.URL("api.example.com", "/echoes")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := mustReq(t, tt.method, tt.url, nil)
			a, err := in.Inject(context.Background(), tt.sb, req)
			if err != nil || a != nil {
				t.Fatalf("got %v, %v; want no injection and no error", a, err)
			}
			if h := req.Header.Get("Authorization"); h != "" {
				t.Errorf("Authorization set to %q", h)
			}
			// Interception is per host and port: method and path are judged per request.
			wantMITM := tt.name == "method not bound" || tt.name == "path not bound" || tt.name == "plain http"
			if got := in.NeedsMITM(tt.sb, req.URL.Hostname(), portOf(req.URL)); got != wantMITM {
				t.Errorf("NeedsMITM: got %v, want %v", got, wantMITM)
			}
		})
	}
	if !in.NeedsMITM(sb1, "API.Example.COM.", u.Port) || !in.NeedsMITM(sb2, "api.example.com", u.Port) {
		t.Errorf("NeedsMITM: got false for the bound host")
	}
}

func portOf(u *url.URL) int {
	var p int
	fmt.Sscan(u.Port(), &p)
	if p == 0 {
		p = 443
	}
	return p
}

// A self-signed (untrusted) upstream: the gateway's verifying transport never
// completes the handshake, so the injected value never leaves.
func TestUntrustedUpstreamReceivesNothing(t *testing.T) {
	in, u, _ := setup(t, nil)
	req := mustReq(t, "GET", u.URL("api.example.com", "/echo"), nil)
	_, _, err := roundTrip(t, in, transport(t, u, false), sb1, req)
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("got %v, want a certificate error", err)
	}
	if n := u.Received.Load(); n != 0 {
		t.Errorf("upstream saw %d requests, want 0", n)
	}
}

func TestHostMismatchDenied(t *testing.T) {
	in, u, _ := setup(t, nil)
	tr := transport(t, u, true)
	tests := []struct{ name, url, host string }{
		{"inner Host is the bound host", u.URL("other.example.com", "/echo"), "api.example.com"},
		{"URL is the bound host", u.URL("api.example.com", "/echo"), "other.example.com"},
		{"same host other port", u.URL("api.example.com", "/echo"), "api.example.com:444"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := mustReq(t, "GET", tt.url, nil)
			req.Host = tt.host
			_, _, err := roundTrip(t, in, tr, sb1, req)
			var d *Denial
			if !errors.As(err, &d) || d.Code != CodeHostMismatch || HTTPStatus(err) != 403 {
				t.Fatalf("got %v, want a host mismatch denial", err)
			}
			if n := u.Received.Load(); n != 0 {
				t.Errorf("upstream saw %d requests, want 0", n)
			}
		})
	}
}

// One client connection whose requests switch Host: each request is judged on
// its own, and only the bound host gets the value.
func TestKeptAliveConnectionSwitchingHost(t *testing.T) {
	in, u, _ := setup(t, nil)
	tr := transport(t, u, true)
	for i, host := range []string{"api.example.com", "other.example.com", "api.example.com", "other.example.com"} {
		req := mustReq(t, "GET", u.URL(host, "/echo"), nil)
		if _, seen, err := roundTrip(t, in, tr, sb1, req); err != nil {
			t.Fatalf("request %d: %v", i, err)
		} else {
			assertNoForms(t, "sandbox view", seen, canary)
		}
	}
	for _, r := range u.Requests() {
		got := r.Header.Get("Authorization")
		switch r.Host {
		case fmt.Sprintf("api.example.com:%d", u.Port):
			if got != "Bearer "+canary {
				t.Errorf("bound host got Authorization %q", got)
			}
		default:
			if got != "" {
				t.Errorf("%s got Authorization %q, want none", r.Host, got)
			}
		}
	}
}

func TestPathTricksRefused(t *testing.T) {
	in, u, _ := setup(t, func(c *Config) { c.Bindings[0].Paths = []string{"/repos/acme"} })
	tr := transport(t, u, true)
	for _, p := range []string{
		"/repos/acme/../../admin", "/repos/acme/%2e%2e/admin", "/repos/acme/%2E./admin",
		"/repos/acme%2f..%2fadmin", "/repos/acme/..%5cadmin", "/repos/acme//x", "/repos/acme/%252e%252e/x",
		"/repos/acme;/../admin", "/repos/acme/%00", "/repos/acme/./x",
	} {
		t.Run(p, func(t *testing.T) {
			req := mustReq(t, "GET", u.URL("api.example.com", "/"), nil)
			parsed, err := url.Parse(u.URL("api.example.com", p))
			if err != nil {
				t.Fatal(err)
			}
			req.URL = parsed
			_, _, err = roundTrip(t, in, tr, sb1, req)
			var d *Denial
			if !errors.As(err, &d) || d.Code != CodePathRefused || d.Flag != FlagPathTrick {
				t.Fatalf("got %v, want a path refusal", err)
			}
			if n := u.Received.Load(); n != 0 {
				t.Errorf("upstream saw %d requests, want 0", n)
			}
		})
	}
	// The prefix itself and below it still work.
	req := mustReq(t, "GET", u.URL("api.example.com", "/repos/acme/x"), nil)
	if a, _, err := roundTrip(t, in, tr, sb1, req); err != nil || a == nil {
		t.Fatalf("good path: got %v, %v", a, err)
	}
}

func TestAmbiguousBindingsDenied(t *testing.T) {
	in, u, _ := setup(t, func(c *Config) {
		b := c.Bindings[0]
		b.Host = "*.example.com"
		b.Template = "token {{value}}"
		c.Bindings = append(c.Bindings, b)
	})
	req := mustReq(t, "GET", u.URL("api.example.com", "/echo"), nil)
	_, _, err := roundTrip(t, in, transport(t, u, true), sb1, req)
	var d *Denial
	if !errors.As(err, &d) || d.Code != CodeAmbiguous {
		t.Fatalf("got %v, want an ambiguity denial", err)
	}
	if n := u.Received.Load(); n != 0 {
		t.Errorf("upstream saw %d requests, want 0", n)
	}
}

func placeholderSetup(t *testing.T, mode string) (*Injector, *secretstest.Upstream, map[string]string, map[string]string) {
	in, u, _ := setup(t, func(c *Config) {
		c.Bindings[0].Mode = mode
		c.Bindings[0].PlaceholderEnv = "API_TOKEN"
		c.Bindings[0].Paths = []string{"/echo", "/encoded"}
	})
	p1, err := in.Placeholders(sb1)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := in.Placeholders(sb2)
	if err != nil {
		t.Fatal(err)
	}
	return in, u, p1, p2
}

func TestPlaceholders(t *testing.T) {
	in, _, p1, p2 := placeholderSetup(t, ModePlaceholder)
	ph := p1["API_TOKEN"]
	if len(p1) != 1 || !strings.HasPrefix(ph, PlaceholderPrefix) || len(ph) != len(PlaceholderPrefix)+placeholderRandLen {
		t.Fatalf("Placeholders(sb-1): got %v", p1)
	}
	if p2["API_TOKEN"] == ph {
		t.Errorf("two sandboxes got the same placeholder")
	}
	again, _ := in.Placeholders(sb1)
	if again["API_TOKEN"] != ph {
		t.Errorf("placeholder changed between calls")
	}
	if p3, _ := in.Placeholders(sb3); len(p3) != 0 {
		t.Errorf("unbound sandbox got placeholders %v", p3)
	}
	assertNoForms(t, "placeholder", ph, canary)
	in.Forget("sb-1")
	req := mustReq(t, "GET", "https://api.example.com/echo", nil)
	req.Header.Set("Authorization", "Bearer "+ph)
	var d *Denial
	if err := in.Check(sb1, req); !errors.As(err, &d) || d.Code != CodePlaceholderForeign {
		t.Errorf("forgotten placeholder: got %v, want a foreign-placeholder denial", err)
	}
	if again, _ := in.Placeholders(sb1); again["API_TOKEN"] == ph {
		t.Errorf("placeholder reused after Forget")
	}
}

func TestPlaceholderSubstitution(t *testing.T) {
	for _, mode := range []string{ModePlaceholder, ModeRequire} {
		t.Run(mode, func(t *testing.T) {
			in, u, p1, _ := placeholderSetup(t, mode)
			ph := p1["API_TOKEN"]
			tr := transport(t, u, true)
			for _, hdr := range []string{"Bearer " + ph, "token " + ph, ph,
				"Basic " + base64.StdEncoding.EncodeToString([]byte("git:"+ph))} {
				req := mustReq(t, "GET", u.URL("api.example.com", "/echo"), nil)
				req.Header.Set("Authorization", hdr)
				a, seen, err := roundTrip(t, in, tr, sb1, req)
				if err != nil || a == nil {
					t.Fatalf("header %q: got %v, %v; want an injection", hdr, a, err)
				}
				if got := u.Requests()[len(u.Requests())-1].Header.Get("Authorization"); got != "Bearer "+canary {
					t.Errorf("upstream got %q, want the templated value", got)
				}
				assertNoForms(t, "sandbox view", seen, canary)
			}
		})
	}
}

func TestPlaceholderModeWithoutPlaceholderPassesUntouched(t *testing.T) {
	in, u, _, _ := placeholderSetup(t, ModePlaceholder)
	req := mustReq(t, "GET", u.URL("api.example.com", "/echo"), nil)
	req.Header.Set("Authorization", "Bearer users-own")
	a, err := in.Inject(context.Background(), sb1, req)
	if err != nil || a != nil || req.Header.Get("Authorization") != "Bearer users-own" {
		t.Fatalf("got %v, %v, header %q; want no injection", a, err, req.Header.Get("Authorization"))
	}
}

func TestRequireModeDeniesWithoutPlaceholder(t *testing.T) {
	in, u, _, _ := placeholderSetup(t, ModeRequire)
	tr := transport(t, u, true)
	tests := []struct{ name, path, auth, flag string }{
		{"no credential", "/echo", "", ""},
		{"own credential", "/echo", "Bearer agent-brought-this", FlagOwnCredential},
		{"own credential on an unbound path", "/other", "Bearer agent-brought-this", FlagOwnCredential},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := mustReq(t, "GET", u.URL("api.example.com", tt.path), nil)
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			_, _, err := roundTrip(t, in, tr, sb1, req)
			var d *Denial
			if !errors.As(err, &d) || d.Code != CodePlaceholderRequired || d.Flag != tt.flag {
				t.Fatalf("got %v, want placeholder-required with flag %q", err, tt.flag)
			}
			if n := u.Received.Load(); n != 0 {
				t.Errorf("upstream saw %d requests, want 0", n)
			}
		})
	}
}

// Every misuse of a placeholder is denied, flagged, and the upstream (TLS or
// plain) sees zero requests.
func TestPlaceholderMisuseDenied(t *testing.T) {
	in, u, p1, p2 := placeholderSetup(t, ModePlaceholder)
	ph, other := p1["API_TOKEN"], p2["API_TOKEN"]
	var plainCount atomic.Int64
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { plainCount.Add(1) }))
	t.Cleanup(plain.Close)
	plainURL := func(path string) string {
		return "http://api.example.com:" + strings.TrimPrefix(plain.Listener.Addr().String(), "127.0.0.1:") + path
	}
	tr := transport(t, u, true)
	plainTr := &http.Transport{DialContext: (&plainDialer{addr: plain.Listener.Addr().String()}).dial}

	tests := []struct {
		name   string
		sb     Sandbox
		method string
		url    string
		header [2]string
		body   string
		code   string
	}{
		{"unbound host, bound header", sb1, "GET", u.URL("other.example.com", "/echo"), [2]string{"Authorization", "Bearer " + ph}, "", CodePlaceholderMisuse},
		{"unbound host, basic auth", sb1, "GET", u.URL("other.example.com", "/echo"), [2]string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte("u:"+ph))}, "", CodePlaceholderMisuse},
		{"bound host, other header", sb1, "GET", u.URL("api.example.com", "/echo"), [2]string{"X-Api-Key", ph}, "", CodePlaceholderMisuse},
		{"bound host, cookie", sb1, "GET", u.URL("api.example.com", "/echo"), [2]string{"Cookie", "k=" + ph}, "", CodePlaceholderMisuse},
		{"bound host, header name", sb1, "GET", u.URL("api.example.com", "/echo"), [2]string{"X-" + ph, "1"}, "", CodePlaceholderMisuse},
		{"bound host, body", sb1, "POST", u.URL("api.example.com", "/echo"), [2]string{}, `{"key":"` + ph + `"}`, CodePlaceholderMisuse},
		{"unbound host, body", sb1, "POST", u.URL("other.example.com", "/echo"), [2]string{}, "token=" + ph, CodePlaceholderMisuse},
		{"bound host, path", sb1, "GET", u.URL("api.example.com", "/echo/"+ph), [2]string{}, "", CodePlaceholderMisuse},
		{"bound host, query", sb1, "GET", u.URL("api.example.com", "/echo?k="+ph), [2]string{}, "", CodePlaceholderMisuse},
		{"unbound host, upper-case query", sb1, "GET", u.URL("other.example.com", "/echo?k="+strings.ToUpper(ph)), [2]string{}, "", CodePlaceholderMisuse},
		{"unbound host, percent-encoded query", sb1, "GET", u.URL("other.example.com", "/echo?k="+percentAll([]byte(ph), "0123456789abcdef")), [2]string{}, "", CodePlaceholderMisuse},
		{"bound host, unbound path", sb1, "GET", u.URL("api.example.com", "/elsewhere"), [2]string{"Authorization", "Bearer " + ph}, "", CodePlaceholderMisuse},
		{"bound host, other port", sb1, "GET", "https://api.example.com:1/echo", [2]string{"Authorization", "Bearer " + ph}, "", CodePlaceholderMisuse},
		{"plain http to bound host", sb1, "GET", plainURL("/echo"), [2]string{"Authorization", "Bearer " + ph}, "", CodePlaceholderMisuse},
		{"plain http body", sb1, "POST", plainURL("/echo"), [2]string{}, ph, CodePlaceholderMisuse},
		{"another sandbox's placeholder", sb1, "GET", u.URL("api.example.com", "/echo"), [2]string{"Authorization", "Bearer " + other}, "", CodePlaceholderForeign},
		{"unknown placeholder", sb1, "GET", u.URL("other.example.com", "/echo"), [2]string{"X-T", PlaceholderPrefix + "zzzz"}, "", CodePlaceholderForeign},
		{"unbound sandbox", sb3, "GET", u.URL("api.example.com", "/echo"), [2]string{"Authorization", "Bearer " + ph}, "", CodePlaceholderForeign},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body *strings.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
			} else {
				body = strings.NewReader("")
			}
			req := mustReq(t, tt.method, tt.url, body)
			if tt.header[0] != "" {
				req.Header.Set(tt.header[0], tt.header[1])
			}
			var err error
			if req.URL.Scheme == "http" {
				// The gateway's path for requests it does not intercept.
				if err = in.Check(tt.sb, req); err == nil {
					if resp, rerr := plainTr.RoundTrip(req); rerr == nil {
						resp.Body.Close()
					}
				}
			} else {
				_, _, err = roundTrip(t, in, tr, tt.sb, req)
			}
			var d *Denial
			if !errors.As(err, &d) || d.Code != tt.code || d.Flag == "" || HTTPStatus(err) != http.StatusForbidden {
				t.Fatalf("got %v, want a flagged %s denial", err, tt.code)
			}
			if strings.Contains(err.Error(), ph) || strings.Contains(err.Error(), other) {
				t.Errorf("error names the placeholder: %v", err)
			}
			if n, m := u.Received.Load(), plainCount.Load(); n+m != 0 {
				t.Errorf("upstreams saw %d+%d requests, want 0", n, m)
			}
		})
	}
}

type plainDialer struct{ addr string }

func (p *plainDialer) dial(ctx context.Context, network, addr string) (c netConn, err error) {
	if !strings.HasPrefix(addr, "api.example.com:") {
		return nil, fmt.Errorf("test dialer refuses %s", addr)
	}
	return dialer.DialContext(ctx, "tcp", p.addr)
}

func TestCheckConnectAndNames(t *testing.T) {
	in, _, p1, _ := placeholderSetup(t, ModePlaceholder)
	ph := p1["API_TOKEN"]
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Host: "api.example.com:443"},
		Host: "api.example.com:443", Header: http.Header{"Proxy-Authorization": {"Basic " +
			base64.StdEncoding.EncodeToString([]byte("u:"+ph))}}}
	var d *Denial
	if err := in.Check(sb1, req); !errors.As(err, &d) || d.Code != CodePlaceholderMisuse {
		t.Errorf("CONNECT with placeholder: got %v, want a misuse denial", err)
	}
	req.Header = http.Header{}
	if err := in.Check(sb1, req); err != nil {
		t.Errorf("clean CONNECT: got %v, want nil", err)
	}
	if err := in.CheckName(sb1, ph+".evil.example.com"); !errors.As(err, &d) || d.Where != "name" {
		t.Errorf("placeholder in a DNS name: got %v, want a denial", err)
	}
	if err := in.CheckName(sb1, "pypi.org"); err != nil {
		t.Errorf("clean name: got %v", err)
	}
}

// A body longer than MaxBodyScan is scanned as it streams and cut off before
// the placeholder; the upstream never receives it.
func TestLongBodyPlaceholderCutOff(t *testing.T) {
	in, u, _ := setup(t, func(c *Config) { c.MaxBodyScan = 64 })
	ph := PlaceholderPrefix + strings.Repeat("a", placeholderRandLen)
	body := strings.Repeat("x", 5000) + ph + strings.Repeat("y", 5000)
	req := mustReq(t, "POST", u.URL("other.example.com", "/echo"), strings.NewReader(body))
	_, _, err := roundTrip(t, in, transport(t, u, true), sb1, req)
	if err == nil {
		t.Fatal("got nil error, want the body read to fail")
	}
	var d *Denial
	if !errors.As(err, &d) {
		t.Errorf("RoundTrip error does not unwrap to *Denial: %v", err)
	}
	for _, r := range u.Requests() {
		if strings.Contains(strings.ToLower(r.Body), "airlock-ph") {
			t.Errorf("upstream received the placeholder prefix")
		}
	}
	// Clean long bodies pass whole.
	clean := strings.Repeat("z", 100000)
	req = mustReq(t, "POST", u.URL("other.example.com", "/echo"), strings.NewReader(clean))
	if _, _, err := roundTrip(t, in, transport(t, u, true), sb1, req); err != nil {
		t.Fatal(err)
	}
	if got := u.Requests()[len(u.Requests())-1].Body; got != clean {
		t.Errorf("clean long body: got %d bytes, want %d", len(got), len(clean))
	}
}

func TestFingerprint(t *testing.T) {
	in, u, _ := setup(t, nil)
	req := mustReq(t, "GET", u.URL("api.example.com", "/"), nil)
	a, err := in.Inject(context.Background(), sb1, req)
	if err != nil {
		t.Fatal(err)
	}
	fp := a.Audit()[0].Fingerprint
	sum := sha256.Sum256([]byte(canary))
	bare := hex.EncodeToString(sum[:])
	if strings.Contains(bare, strings.TrimPrefix(fp, "hmac-sha256:")) || len(fp) != len("hmac-sha256:")+32 {
		t.Errorf("fingerprint %q is a bare hash or has the wrong length", fp)
	}
	b, _ := in.Inject(context.Background(), sb1, mustReq(t, "GET", u.URL("api.example.com", "/"), nil))
	if b.Audit()[0].Fingerprint != fp {
		t.Errorf("same value, same injector: fingerprints differ")
	}
	// A configured key gives stable fingerprints across injectors.
	key := filepath.Join(t.TempDir(), "key")
	os.WriteFile(key, []byte(strings.Repeat("ab", 32)), 0o600)
	fps := map[string]bool{}
	for i := 0; i < 2; i++ {
		in2, u2, _ := setup(t, func(c *Config) { c.FingerprintKeyFile = key })
		a, err := in2.Inject(context.Background(), sb1, mustReq(t, "GET", u2.URL("api.example.com", "/"), nil))
		if err != nil || a == nil {
			t.Fatalf("got %v, %v", a, err)
		}
		fps[a.Audit()[0].Fingerprint] = true
	}
	if len(fps) != 1 || fps[fp] {
		t.Errorf("configured key: got fingerprints %v, want one, different from the random-key one", fps)
	}
}

func TestAppliedPrintsNoValue(t *testing.T) {
	in, u, _ := setup(t, nil)
	a, err := in.Inject(context.Background(), sb1, mustReq(t, "GET", u.URL("api.example.com", "/"), nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d"} {
		for _, x := range []any{a, in, struct{ a *Applied }{a}, []*Applied{a}} {
			assertNoForms(t, "printed "+verb, fmt.Sprintf(verb, x), canary)
		}
	}
}

func TestRotationUnderConcurrency(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	value := func(i int) string { return fmt.Sprintf("rotating-secret-%04d-%s", i, strings.Repeat("q", i%7)) }
	write := func(i int) {
		tmp := filepath.Join(dir, "tmp")
		if err := os.WriteFile(tmp, []byte(value(i)+"\n"), 0o600); err != nil {
			t.Error(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Error(err)
		}
	}
	write(0)
	in, u, sink := setup(t, func(c *Config) {
		c.Secrets = []SecretConfig{{ID: "canary", File: file}}
	})
	const rotations, workers, perWorker = 20, 4, 15
	var all []string
	for i := 0; i <= rotations; i++ {
		all = append(all, value(i))
	}
	sink.Watch(all...)
	tr := transport(t, u, true)
	var (
		mu        sync.Mutex
		versionOf = map[string]string{} // version -> value the upstream saw
		wg        sync.WaitGroup
	)
	// The writer rotates the file in the test's temporary directory: it is
	// stopped and waited for before that directory is removed (cleanups run
	// last-in first-out, so this one runs before TempDir's), also when a
	// worker fails the test early. Regression: the test returned while the
	// writer was still between its WriteFile and Rename, and TempDir's
	// RemoveAll failed with "directory not empty" about one run in thirty.
	stop, writerDone := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		<-writerDone
	})
	go func() {
		defer close(writerDone)
		for i := 1; i <= rotations; i++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			write(i)
		}
	}()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < perWorker; i++ {
				req := mustReq(t, "GET", u.URL("api.example.com", "/echo"), nil)
				req.Header.Set("X-Req", fmt.Sprintf("%d-%d", w, i))
				a, seen, err := roundTrip(t, in, tr, sb1, req)
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				assertNoForms(t, "sandbox view", seen, all...)
				var got string
				for _, r := range u.Requests() {
					if r.Header.Get("X-Req") == req.Header.Get("X-Req") {
						got = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
					}
				}
				ver := a.Audit()[0].Version
				mu.Lock()
				if prev, ok := versionOf[ver]; ok && prev != got {
					t.Errorf("version %s was sent as two different values", ver)
				}
				versionOf[ver] = got
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	if len(versionOf) < 2 {
		t.Logf("only %d versions seen during the run", len(versionOf))
	}
	t.Logf("%d requests over %d versions", workers*perWorker, len(versionOf))
}

// A request in flight keeps the version it was sent with and is scrubbed of
// it, while new requests use the new version.
func TestInFlightRequestKeepsOldVersion(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	os.WriteFile(file, []byte("first-version-value\n"), 0o600)
	in, u, sink := setup(t, func(c *Config) { c.Secrets = []SecretConfig{{ID: "canary", File: file}} })
	sink.Watch("first-version-value", "second-version-value")
	tr := transport(t, u, true)
	type result struct {
		a    *Applied
		seen string
		err  error
	}
	done, finished := make(chan result, 1), make(chan struct{})
	req := mustReq(t, "GET", u.URL("api.example.com", "/slow"), nil)
	// The slow request is released and waited for before the upstream and the
	// temporary directory go, also when the test fails early.
	t.Cleanup(func() {
		u.Release()
		<-finished
	})
	go func() {
		defer close(finished)
		a, seen, err := roundTrip(t, in, tr, sb1, req)
		done <- result{a, seen, err}
	}()
	u.WaitArrived(t)
	os.WriteFile(file, []byte("second-version-value-longer\n"), 0o600)
	a2, seen2, err := roundTrip(t, in, tr, sb1, mustReq(t, "GET", u.URL("api.example.com", "/echo"), nil))
	if err != nil {
		t.Fatal(err)
	}
	u.Release()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if v1, v2 := r.a.Audit()[0].Version, a2.Audit()[0].Version; v1 != "v1" || v2 != "v2" {
		t.Errorf("versions: got %s and %s, want v1 and v2", v1, v2)
	}
	assertNoForms(t, "in-flight response", r.seen, "first-version-value")
	assertNoForms(t, "new response", seen2, "second-version-value-longer")
	if r.a.Audit()[0].Scrubbed == 0 {
		t.Errorf("in-flight response: no scrubs counted")
	}
}

func TestSourceFailures(t *testing.T) {
	dir := t.TempDir()
	stderrValue := "value-the-command-printed-on-stderr"
	runs := filepath.Join(dir, "runs")
	tests := []struct {
		name string
		src  SecretConfig
		env  *string
		want string
	}{
		{"env unset", SecretConfig{Env: "AIRLOCK_TEST_UNSET_VAR"}, nil, "not set"},
		{"env too short", SecretConfig{Env: "AIRLOCK_TEST_SHORT"}, ptr("abc"), "shorter than"},
		{"env with newline", SecretConfig{Env: "AIRLOCK_TEST_NL"}, ptr("abcdefgh\r\nX-Evil: 1"), "control character"},
		{"file missing", SecretConfig{File: filepath.Join(dir, "missing")}, nil, "no such file"},
		{"file is a directory", SecretConfig{File: dir}, nil, "not a regular file"},
		{"command fails, value on stderr", SecretConfig{Command: []string{"/bin/sh", "-c", "echo " + stderrValue + " >&2; exit 3"}}, nil, "exit status 3"},
		{"command times out", SecretConfig{Command: []string{"/bin/sh", "-c", "sleep 5"}, Timeout: 100 * time.Millisecond}, nil, "timed out"},
		{"command missing", SecretConfig{Command: []string{filepath.Join(dir, "no-such-program")}}, nil, "could not run"},
		{"command prints nothing", SecretConfig{Command: []string{"/bin/true"}}, nil, "empty value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != nil {
				t.Setenv(tt.src.Env, *tt.env)
			}
			in, u, sink := setup(t, func(c *Config) {
				tt.src.ID = "canary"
				c.Secrets = []SecretConfig{tt.src}
				c.Bindings[0].Mode = ModePlaceholder
				c.Bindings[0].PlaceholderEnv = "API_TOKEN"
			})
			sink.Watch(stderrValue)
			ph, _ := in.Placeholders(sb1)
			req := mustReq(t, "GET", u.URL("api.example.com", "/echo"), nil)
			req.Header.Set("Authorization", "Bearer "+ph["API_TOKEN"])
			_, _, err := roundTrip(t, in, transport(t, u, true), sb1, req)
			var ue *UnavailableError
			if !errors.As(err, &ue) || HTTPStatus(err) != http.StatusServiceUnavailable || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an UnavailableError containing %q and 503", err, tt.want)
			}
			if strings.Contains(err.Error(), stderrValue) || (tt.env != nil && strings.Contains(err.Error(), *tt.env)) {
				t.Errorf("error carries the value: %v", err)
			}
			if n := u.Received.Load(); n != 0 {
				t.Errorf("upstream saw %d requests (the placeholder was forwarded), want 0", n)
			}
		})
	}

	t.Run("command cached for its TTL, failures for retry_after", func(t *testing.T) {
		script := fmt.Sprintf("echo x >> %s; if [ -e %s/fail ]; then exit 1; fi; echo '  command-value-0123  '", runs, dir)
		in, u, sink := setup(t, func(c *Config) {
			c.Secrets = []SecretConfig{{ID: "canary", Command: []string{"/bin/sh", "-c", script}, TTL: time.Hour, RetryAfter: time.Hour}}
		})
		sink.Watch("command-value-0123")
		sec := in.secrets["canary"]
		now := time.Now()
		sec.now = func() time.Time { return now }
		count := func() int { b, _ := os.ReadFile(runs); return strings.Count(string(b), "x") }
		for i := 0; i < 3; i++ {
			a, seen, err := roundTrip(t, in, transport(t, u, true), sb1, mustReq(t, "GET", u.URL("api.example.com", "/echo"), nil))
			if err != nil || a.Audit()[0].Version != "v1" {
				t.Fatalf("got %v, %v", a, err)
			}
			assertNoForms(t, "sandbox view", seen, "command-value-0123")
		}
		if got := u.Requests()[0].Header.Get("Authorization"); got != "Bearer command-value-0123" {
			t.Errorf("upstream got %q, want the trimmed output", got)
		}
		if n := count(); n != 1 {
			t.Errorf("command ran %d times within its TTL, want 1", n)
		}
		os.WriteFile(filepath.Join(dir, "fail"), nil, 0o600)
		now = now.Add(2 * time.Hour)
		for i := 0; i < 3; i++ {
			_, err := in.Inject(context.Background(), sb1, mustReq(t, "GET", u.URL("api.example.com", "/echo"), nil))
			if HTTPStatus(err) != 503 {
				t.Fatalf("got %v, want 503", err)
			}
		}
		if n := count(); n != 2 {
			t.Errorf("command ran %d times, want 2 (failure remembered)", n)
		}
		os.Remove(filepath.Join(dir, "fail"))
		now = now.Add(2 * time.Hour)
		a, err := in.Inject(context.Background(), sb1, mustReq(t, "GET", u.URL("api.example.com", "/echo"), nil))
		if err != nil || a.Audit()[0].Version != "v1" {
			t.Errorf("after recovery: got %v, %v; want the same value as v1", a, err)
		}
	})
}

func ptr(s string) *string { return &s }

func TestBindingHostForms(t *testing.T) {
	tests := []struct {
		in       string
		port     int
		wantHost string
		wantPort int
		ok       bool
	}{
		{"API.Example.COM.", 443, "api.example.com", 443, true},
		{"https://api.example.com", 443, "api.example.com", 443, true},
		{"https://api.example.com:8443/", 443, "api.example.com", 8443, true},
		{"https://api.example.com:8443", 9000, "", 0, false},
		{"*.Example.com", 443, "*.example.com", 443, true},
		{"**.example.com", 443, "**.example.com", 443, true},
		{"HTTP://api.example.com", 443, "", 0, false},
		{"ftp://api.example.com", 443, "", 0, false},
		{"https://user@api.example.com", 443, "", 0, false},
		{"*.10.0.0.1", 443, "", 0, false},
	}
	for _, tt := range tests {
		h, p, err := parseBindingHost(tt.in, tt.port)
		if (err == nil) != tt.ok || h != tt.wantHost || p != tt.wantPort {
			t.Errorf("parseBindingHost(%q, %d) = %q, %d, %v; want %q, %d, ok=%v", tt.in, tt.port, h, p, err, tt.wantHost, tt.wantPort, tt.ok)
		}
	}
}

func TestWildcardBindings(t *testing.T) {
	t.Setenv(canaryEnv, canary)
	mk := func(host string) *Injector {
		in, err := New(Config{
			Secrets: []SecretConfig{{ID: "canary", Env: canaryEnv}},
			Bindings: []BindingConfig{{Secret: "canary", Sandboxes: SandboxSelector{IDs: []string{"sb-1"}},
				Host: host, Template: "Bearer {{value}}"}},
		}, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	one, deep := mk("*.example.com"), mk("**.example.com")
	tests := []struct {
		host      string
		one, deep bool
	}{
		{"example.com", false, false},
		{"a.example.com", true, true},
		{"a.b.example.com", false, true},
		{"aexample.com", false, false},
		{"a.example.com.evil.org", false, false},
	}
	for _, tt := range tests {
		if got := one.NeedsMITM(sb1, tt.host, 443); got != tt.one {
			t.Errorf("*.example.com vs %s: got %v, want %v", tt.host, got, tt.one)
		}
		if got := deep.NeedsMITM(sb1, tt.host, 443); got != tt.deep {
			t.Errorf("**.example.com vs %s: got %v, want %v", tt.host, got, tt.deep)
		}
	}
}
