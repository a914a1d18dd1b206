package secrets

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeTokenEndpoint is an OAuth 2.0 token endpoint on loopback: it checks
// the client's credentials or refresh token, rotates refresh tokens, and
// counts what it minted.
type fakeTokenEndpoint struct {
	mu       sync.Mutex
	clientID string
	secret   string
	refresh  string // the refresh token it accepts next
	minted   []string
	fail     bool
}

func (f *fakeTokenEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r.ParseForm()
	w.Header().Set("Content-Type", "application/json")
	id, sec, basic := r.BasicAuth()
	if !basic {
		id, sec = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	ok := !f.fail && id == f.clientID
	switch r.PostForm.Get("grant_type") {
	case GrantClientCredentials:
		ok = ok && sec == f.secret && r.PostForm.Get("scope") == "read write"
	case GrantRefreshToken:
		ok = ok && r.PostForm.Get("refresh_token") == f.refresh
	default:
		ok = false
	}
	if !ok {
		w.WriteHeader(http.StatusBadRequest)
		// a careless endpoint that reflects what it was sent
		fmt.Fprintf(w, `{"error":"invalid_client","error_description":"bad secret %s"}`, sec)
		return
	}
	tok := fmt.Sprintf("at-%d-%s", len(f.minted)+1, strings.Repeat("z", 20))
	f.minted = append(f.minted, tok)
	out := map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 600}
	if r.PostForm.Get("grant_type") == GrantRefreshToken {
		f.refresh = fmt.Sprintf("rt-rotated-%d-%s", len(f.minted), strings.Repeat("q", 16))
		out["refresh_token"] = f.refresh
	}
	json.NewEncoder(w).Encode(out)
}

func (f *fakeTokenEndpoint) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.minted)
}

// newOAuthInjector builds an injector with one oauth binding for
// api.fake.test whose token endpoint is ep, and a token client that reaches
// only ep.
func newOAuthInjector(t *testing.T, ep *fakeTokenEndpoint, value, oauthYAML string) (*Injector, *time.Time) {
	t.Helper()
	srv := httptest.NewTLSServer(ep)
	t.Cleanup(srv.Close)
	f := filepath.Join(t.TempDir(), "v")
	os.WriteFile(f, []byte(value), 0o600)
	cfg, err := Parse([]byte(fmt.Sprintf(`secrets:
  - id: oa
    file: %s
bindings:
  - secret: oa
    sandboxes: {ids: [sb-1]}
    host: api.fake.test
    template: "Bearer {{value}}"
    oauth: %s
`, f, oauthYAML)))
	if err != nil {
		t.Fatal(err)
	}
	logger, _ := newLogSink(t, value)
	in, err := New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	in.SetTokenClient(&http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // loopback fake only
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr != "auth.fake.test:443" {
				return nil, fmt.Errorf("test dialer: %s is not the fake", addr)
			}
			return (&net.Dialer{}).DialContext(ctx, network, srv.Listener.Addr().String())
		},
	}})
	clock := time.Now()
	in.now = func() time.Time { return clock }
	return in, &clock
}

func oauthInject(t *testing.T, in *Injector) (string, *Applied, error) {
	t.Helper()
	req, _ := http.NewRequest("GET", "https://api.fake.test/v1/x", nil)
	a, err := in.Inject(context.Background(), Sandbox{ID: "sb-1"}, req)
	return req.Header.Get("Authorization"), a, err
}

func TestOAuthClientCredentials(t *testing.T) {
	const clientSecret = "client-SECRET-value-0123"
	ep := &fakeTokenEndpoint{clientID: "cid", secret: clientSecret}
	in, clock := newOAuthInjector(t, ep, clientSecret,
		`{token_url: "https://auth.fake.test/token", grant: client_credentials, client_id: cid, scopes: [read, write]}`)

	h1, _, err := oauthInject(t, in)
	if err != nil || h1 != "Bearer at-1-"+strings.Repeat("z", 20) {
		t.Fatalf("first: got %q %v, want the first minted token", h1, err)
	}
	if h2, _, _ := oauthInject(t, in); h2 != h1 || ep.count() != 1 {
		t.Fatalf("second: got %q after %d mints, want the cached token", h2, ep.count())
	}
	// The token expires mid-run: the next request carries a fresh one.
	*clock = clock.Add(10 * time.Minute)
	h3, a, err := oauthInject(t, in)
	if err != nil || h3 == h1 || ep.count() != 2 {
		t.Fatalf("after expiry: got %q %v after %d mints, want a fresh token", h3, err, ep.count())
	}
	// The upstream refuses it (revoked): the 401 drops it, the next request
	// mints again. A response echoing the token or the client secret is scrubbed.
	body := "denied " + strings.TrimPrefix(h3, "Bearer ") + " " + clientSecret
	resp := &http.Response{StatusCode: http.StatusUnauthorized, Status: "401 Unauthorized", Header: http.Header{},
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}
	if err := in.ScrubResponse(a, resp); err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	if strings.Contains(string(got), "at-2-") || strings.Contains(string(got), clientSecret) {
		t.Errorf("response not scrubbed: %s", got)
	}
	if h4, _, _ := oauthInject(t, in); h4 == h3 || ep.count() != 3 {
		t.Fatalf("after a 401: got %q after %d mints, want a fresh token", h4, ep.count())
	}
}

// TestOAuthRefreshFailure: the endpoint refuses; the sandbox gets a 503
// naming the binding and the endpoint's error code, never the secret (which
// the endpoint reflected in its description).
func TestOAuthRefreshFailure(t *testing.T) {
	const clientSecret = "client-SECRET-value-0123"
	ep := &fakeTokenEndpoint{clientID: "cid", secret: clientSecret, fail: true}
	in, _ := newOAuthInjector(t, ep, clientSecret,
		`{token_url: "https://auth.fake.test/token", grant: client_credentials, client_id: cid, scopes: [read, write], client_auth: body}`)
	_, _, err := oauthInject(t, in)
	var u *UnavailableError
	if !errors.As(err, &u) || HTTPStatus(err) != http.StatusServiceUnavailable {
		t.Fatalf("got %v, want an UnavailableError (503)", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "bindings[0]") || !strings.Contains(msg, "invalid_client") || strings.Contains(msg, clientSecret) {
		t.Errorf("got %q, want the binding and invalid_client named, and no secret", msg)
	}
}

// TestOAuthRefreshTokenRotation: the refresh_token grant sends the held
// refresh token, then the rotated one the endpoint handed back.
func TestOAuthRefreshTokenRotation(t *testing.T) {
	const refresh = "rt-original-0123456789"
	ep := &fakeTokenEndpoint{clientID: "cid", refresh: refresh}
	in, clock := newOAuthInjector(t, ep, refresh,
		`{token_url: "https://auth.fake.test/token", grant: refresh_token, client_id: cid}`)
	for i := 1; i <= 3; i++ {
		h, _, err := oauthInject(t, in)
		if err != nil || !strings.HasPrefix(h, fmt.Sprintf("Bearer at-%d-", i)) {
			t.Fatalf("mint %d: got %q %v", i, h, err)
		}
		*clock = clock.Add(11 * time.Minute)
	}
}

func TestOAuthConfigErrors(t *testing.T) {
	base := "secrets:\n  - id: oa\n    env: OA\nbindings:\n  - secret: oa\n    sandboxes: {ids: [sb-1]}\n    host: api.example\n    template: \"Bearer {{value}}\"\n"
	for _, tt := range []struct{ oauth, want string }{
		{`{token_url: "http://auth.example/token", grant: client_credentials, client_id: c}`, "https URL"},
		{`{token_url: "https://auth.example/token", grant: password, client_id: c}`, "oauth.grant"},
		{`{token_url: "https://auth.example/token", grant: client_credentials}`, "client_id"},
		{`{token_url: "https://auth.example/token", grant: client_credentials, client_id: c, client_secret_secret: oa}`, "only for the refresh_token grant"},
		{`{token_url: "https://auth.example/token", grant: client_credentials, client_id: c, client_auth: jwt}`, "client_auth"},
		{`{token_url: "https://auth.example/token", grant: client_credentials, client_id: c, scopes: ["a b"]}`, "scopes"},
	} {
		_, err := Parse([]byte(base + "    oauth: " + tt.oauth + "\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error naming %q", tt.oauth, err, tt.want)
		}
	}
}
