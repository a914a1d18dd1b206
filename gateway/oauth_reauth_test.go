package gateway

import (
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/policy/policytest"
	"github.com/airlock-dev/airlock/secrets"
)

// fakeIdP is a token endpoint that can revoke what it minted and start
// refusing; fakeTokenAPI accepts only tokens the IdP holds valid.
type fakeIdP struct {
	mu     sync.Mutex
	secret string
	valid  map[string]bool
	mints  int
	down   bool
	reject bool // the API refuses every token (a scope the token never has)
	// trickle: a 401's body never ends (until the connection or stream is
	// gone, or 10 s)
	trickle bool
}

func (f *fakeIdP) token(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, sec, _ := r.BasicAuth(); sec != f.secret || f.down {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":"invalid_grant","error_description":"echoing %s"}`, sec)
		return
	}
	f.mints++
	tok := fmt.Sprintf("tok-%d-abcdefghijklmnop", f.mints)
	f.valid[tok] = true
	fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":3600}`, tok)
}

func (f *fakeIdP) set(fn func(*fakeIdP)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeIdP) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mints
}

// seen is one request the API received.
type seen struct{ auth, path, body string }

type fakeTokenAPI struct {
	idp  *fakeIdP
	mu   sync.Mutex
	seen []seen
}

func (a *fakeTokenAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	a.seen = append(a.seen, seen{r.Header.Get("Authorization"), r.URL.Path, string(body)})
	a.mu.Unlock()
	a.idp.mu.Lock()
	ok := a.idp.valid[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")] && !a.idp.reject
	a.idp.mu.Unlock()
	a.idp.mu.Lock()
	trickle := a.idp.trickle
	a.idp.mu.Unlock()
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, "token revoked")
		if trickle {
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		}
		return
	}
	fmt.Fprintf(w, "ok %s %d", r.URL.Path, len(body))
}

// since returns what the API saw from the n-th request on.
func (a *fakeTokenAPI) since(n int) []seen {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]seen(nil), a.seen[n:]...)
}

func (a *fakeTokenAPI) n() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.seen)
}

// TestOAuthRevokedMidRun: the IdP revokes the token the gateway holds while
// the sandbox works. A request with no body or a buffered one is answered by
// the retry with a fresh token (the upstream saw the refused one once, then
// the fresh one with the same body); a body that streamed is not replayed
// (the 401 reaches the sandbox, the next request carries a fresh token); a
// failed refresh is a 503 naming the binding and a secret_unavailable
// record; an upstream that refuses even the fresh token costs one retry and
// one mint, then nothing more while it is held. The client secret is in no
// response, record or log.
func TestOAuthRevokedMidRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		h2   bool
	}{{"http/1.1", false}, {"h2 client and upstream", true}} {
		t.Run(tc.name, func(t *testing.T) { oauthRevokedMidRun(t, tc.h2) })
	}
}

func oauthRevokedMidRun(t *testing.T, h2 bool) {
	const clientSecret = "oauth-CLIENT-secret-0123456789"
	pki := newTestPKI(t)
	cert := pki.leaf(t, "auth.example", "api.oauth.example")
	idp := &fakeIdP{secret: clientSecret, valid: map[string]bool{}}
	auth := newUpstream(t, http.HandlerFunc(idp.token), &cert)
	apiH := &fakeTokenAPI{idp: idp}
	api := newUpstreamProto(t, apiH, &cert, h2)
	f := filepath.Join(t.TempDir(), "cs")
	os.WriteFile(f, []byte(clientSecret), 0o600)
	cfg, err := secrets.Parse([]byte(fmt.Sprintf(`max_body_scan: 4096
secrets:
  - id: cs
    file: %s
bindings:
  - secret: cs
    sandboxes: {ids: [sb-test]}
    host: api.oauth.example
    port: %d
    template: "Bearer {{value}}"
    oauth: {token_url: "https://auth.example:%d/token", grant: client_credentials, client_id: airlock}
`, f, api.port, auth.port)))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	inj, err := secrets.New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	res := names("api.oauth.example", "auth.example")
	h := newHarnessLogger(t, policytest.Allow("api.oauth.example"), res, pki, logger, func(c *Config) { c.Injector = inj })
	inj.SetTokenClient(h.g.TokenClient())
	h.allowUpstreams(auth, api)
	roots := x509.NewCertPool()
	roots.AddCert(pki.upCA)
	mitm, _ := LoadCACert(pki.mitmCert)
	roots.AddCert(mitm)
	c := clientVia(h.explicit, roots)
	if h2 {
		c = h.h2Client()
	}
	base := fmt.Sprintf("https://api.oauth.example:%d", api.port)
	small := "small-body-" + strings.Repeat("s", 100)
	large := strings.Repeat("L", 3*4096)

	tests := []struct {
		name       string
		before     func(*fakeIdP)
		method     string
		body       string
		wantStatus int
		wantSeen   []string // Authorization per upstream request, "" for any refused token
		wantMints  int      // mints so far
		wantReauth string
	}{
		{"first request mints", nil, "GET", "", 200, []string{"Bearer tok-1-abcdefghijklmnop"}, 1, ""},
		{"cached token", nil, "GET", "", 200, []string{"Bearer tok-1-abcdefghijklmnop"}, 1, ""},
		{"revoked, no body: refreshed and retried", func(f *fakeIdP) { f.valid = map[string]bool{} }, "GET", "", 200,
			[]string{"Bearer tok-1-abcdefghijklmnop", "Bearer tok-2-abcdefghijklmnop"}, 2, secrets.ReauthRetried},
		{"revoked, buffered body: replayed once", func(f *fakeIdP) { f.valid = map[string]bool{} }, "POST", small, 200,
			[]string{"Bearer tok-2-abcdefghijklmnop", "Bearer tok-3-abcdefghijklmnop"}, 3, secrets.ReauthRetried},
		{"revoked, streamed body: 401 passed, token dropped", func(f *fakeIdP) { f.valid = map[string]bool{} }, "POST", large, 401,
			[]string{"Bearer tok-3-abcdefghijklmnop"}, 3, secrets.ReauthNotRetried},
		{"next request carries a fresh token", nil, "GET", "", 200, []string{"Bearer tok-4-abcdefghijklmnop"}, 4, ""},
		{"revoked and the IdP refuses: 503", func(f *fakeIdP) { f.valid, f.down = map[string]bool{}, true }, "GET", "", 503,
			[]string{"Bearer tok-4-abcdefghijklmnop"}, 4, secrets.ReauthFailed},
		{"IdP back: the next request mints", func(f *fakeIdP) { f.down = false }, "GET", "", 200,
			[]string{"Bearer tok-5-abcdefghijklmnop"}, 5, ""},
		{"revoked, the 401's body never ends: retried at once", func(f *fakeIdP) { f.valid, f.trickle = map[string]bool{}, true }, "GET", "", 200,
			[]string{"Bearer tok-5-abcdefghijklmnop", "Bearer tok-6-abcdefghijklmnop"}, 6, secrets.ReauthRetried},
		{"upstream refuses every token: one retry", func(f *fakeIdP) { f.reject, f.trickle = true, false }, "GET", "", 401,
			[]string{"Bearer tok-6-abcdefghijklmnop", "Bearer tok-7-abcdefghijklmnop"}, 7, secrets.ReauthRetried},
		{"then held: no mint, no retry", nil, "GET", "", 401, []string{"Bearer tok-7-abcdefghijklmnop"}, 7, secrets.ReauthHeld},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.before != nil {
				idp.set(tt.before)
			}
			n := apiH.n()
			path := fmt.Sprintf("/step%d", i)
			resp, body, all := do(t, c, tt.method, base+path, nil, tt.body)
			if resp.StatusCode != tt.wantStatus || strings.Contains(all, clientSecret) || strings.Contains(all, "tok-") {
				t.Fatalf("got %d %q, want %d, no client secret, no token", resp.StatusCode, body, tt.wantStatus)
			}
			got := apiH.since(n)
			if len(got) != len(tt.wantSeen) {
				t.Fatalf("upstream saw %d requests %+v, want %d", len(got), got, len(tt.wantSeen))
			}
			for j, s := range got {
				if s.auth != tt.wantSeen[j] || s.body != tt.body || s.path != path {
					t.Errorf("upstream request %d: got %q %s %d bytes, want %q %s %d bytes",
						j, s.auth, s.path, len(s.body), tt.wantSeen[j], path, len(tt.body))
				}
			}
			if m := idp.count(); m != tt.wantMints {
				t.Errorf("got %d mints, want %d", m, tt.wantMints)
			}
			rec := lastHTTPRecord(t, h, "api.oauth.example", path)
			if rec.Status != tt.wantStatus || len(rec.Secrets) != 1 || rec.Secrets[0].Reauth != tt.wantReauth {
				t.Errorf("got record status %d secrets %+v, want %d reauth %q", rec.Status, rec.Secrets, tt.wantStatus, tt.wantReauth)
			}
			if got := string(rec.Extra["http_version"]); h2 && got != `"2"` {
				t.Errorf("record http_version %s, want 2 (the h2 path)", got)
			}
			if tt.wantStatus == http.StatusServiceUnavailable {
				// A clear error: the binding and the endpoint's code, never its description.
				if !strings.Contains(body, "bindings[0]") || !strings.Contains(body, "invalid_grant") || strings.Contains(all, "echoing") ||
					!strings.HasPrefix(rec.Error, ReasonSecretUnavailable) || strings.Contains(rec.Error, clientSecret) {
					t.Errorf("got body %q record error %q, want %s naming bindings[0] and invalid_grant only", body, rec.Error, ReasonSecretUnavailable)
				}
			}
		})
	}

	if strings.Contains(logs.String(), clientSecret) || strings.Contains(logs.String(), "echoing") {
		t.Error("operational logs carry the client secret or the IdP's error description")
	}
}
