package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/secrets"
	"github.com/airlock-dev/airlock/test/poll"
)

// revokingIdP mints one client-credentials token per request and records
// the RFC 7009 revocations it receives.
type revokingIdP struct {
	mu      sync.Mutex
	n       int
	sandbox map[string]string // token -> the sandbox named in its request
	revoked []string
}

func (f *revokingIdP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r.ParseForm()
	if _, sec, _ := r.BasicAuth(); sec != bindCanary {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	switch r.URL.Path {
	case "/token":
		f.n++
		tok := fmt.Sprintf("per-sandbox-%d-abcdefghijkl", f.n)
		f.sandbox[tok] = r.PostForm.Get("airlock_sandbox")
		fmt.Fprintf(w, `{"access_token":%q,"expires_in":3600}`, tok)
	case "/revoke":
		f.revoked = append(f.revoked, r.PostForm.Get("token"))
	}
}

func (f *revokingIdP) revokedTokens() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.revoked...)
}

// TestDeleteRevokesPerSandboxToken: a sandbox created with an attached
// oauth.per_sandbox binding gets its own token (the IdP saw the sandbox's
// id); deleting the sandbox through the API revokes that token at the
// revocation endpoint, and only that one.
func TestDeleteRevokesPerSandboxToken(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_BIND_SECRET", bindCanary)
	w := newFakeWorld(t)
	idp := &revokingIdP{sandbox: map[string]string{}}
	srv := httptest.NewTLSServer(idp)
	t.Cleanup(srv.Close)
	cfg, err := secrets.Parse([]byte(`secrets:
  - id: cs
    env: AIRLOCK_TEST_BIND_SECRET
bindings:
  - id: billing
    secret: cs
    host: api.billing.test
    template: "Bearer {{value}}"
    attach: {uids: [1000]}
    oauth:
      token_url: https://auth.billing.test/token
      grant: client_credentials
      client_id: agents
      per_sandbox: true
      sandbox_param: airlock_sandbox
      revocation_url: https://auth.billing.test/revoke
`))
	if err != nil {
		t.Fatal(err)
	}
	in, err := secrets.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	in.SetTokenClient(&http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // loopback fake only
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr != "auth.billing.test:443" {
				return nil, fmt.Errorf("test dialer: %s is not the fake", addr)
			}
			return (&net.Dialer{}).DialContext(ctx, network, srv.Listener.Addr().String())
		},
	}})
	w.d.secrets = in
	c := w.client(1000)
	tokens := map[string]string{}
	for _, name := range []string{"a", "b"} {
		sb := c.create(t, `{"secret_bindings":["billing"]}`)
		req, _ := http.NewRequest("GET", "https://api.billing.test/v1", nil)
		if _, err := in.Inject(context.Background(), secrets.Sandbox{ID: sb.ID}, req); err != nil {
			t.Fatalf("sandbox %s: %v", name, err)
		}
		tokens[sb.ID] = strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")
	}
	var del string
	for id, tok := range tokens {
		idp.mu.Lock()
		named := idp.sandbox[tok]
		idp.mu.Unlock()
		if named != "airlock-"+id {
			t.Errorf("token of %s was minted for %q, want airlock-%s", id, named, id)
		}
		del = id
	}
	if r := c.json(t, "DELETE", "/v1/sandboxes/"+del, ""); r.status != http.StatusOK {
		t.Fatalf("delete: got %d %s", r.status, r.body)
	}
	poll.Until(t, 10*time.Second, "the deleted sandbox's token revoked", func() bool { return len(idp.revokedTokens()) > 0 })
	if got := idp.revokedTokens(); len(got) != 1 || got[0] != tokens[del] {
		t.Errorf("revoked %v, want only %s's token", got, del)
	}
}
