package secrets

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// perSandboxIdP is a client-credentials token endpoint with an RFC 7009
// revocation endpoint; it records which sandbox each token was minted for
// and what was revoked, with the client authentication each carried.
type perSandboxIdP struct {
	secret string
	mu     sync.Mutex
	minted map[string]string // token -> sandbox param
	revoke []string          // tokens revoked with valid client authentication
	badRev int               // revocation requests without it
	down   bool              // the revocation endpoint fails
}

func (f *perSandboxIdP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r.ParseForm()
	id, sec, _ := r.BasicAuth()
	authed := id == "cid" && sec == f.secret
	switch r.URL.Path {
	case "/token":
		if !authed || r.PostForm.Get("grant_type") != GrantClientCredentials {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"invalid_client"}`)
			return
		}
		tok := fmt.Sprintf("ps-%d-%s", len(f.minted)+1, strings.Repeat("k", 20))
		f.minted[tok] = r.PostForm.Get("airlock_sandbox")
		fmt.Fprintf(w, `{"access_token":%q,"expires_in":3600}`, tok)
	case "/revoke":
		if f.down {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if !authed || r.PostForm.Get("token_type_hint") != "access_token" {
			f.badRev++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		f.revoke = append(f.revoke, r.PostForm.Get("token"))
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func (f *perSandboxIdP) snapshot() (map[string]string, []string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := map[string]string{}
	for k, v := range f.minted {
		m[k] = v
	}
	return m, append([]string(nil), f.revoke...), f.badRev
}

// TestOAuthPerSandbox: oauth.per_sandbox mints one token per sandbox, the
// sandbox named in the token request; deleting a sandbox (Forget) revokes
// its token at the RFC 7009 endpoint with the client's authentication, and
// only its token; a failed revocation is logged without the secret.
func TestOAuthPerSandbox(t *testing.T) {
	const clientSecret = "client-SECRET-value-0123"
	idp := &perSandboxIdP{secret: clientSecret, minted: map[string]string{}}
	srv := httptest.NewTLSServer(idp)
	t.Cleanup(srv.Close)
	f := filepath.Join(t.TempDir(), "v")
	os.WriteFile(f, []byte(clientSecret), 0o600)
	cfg, err := Parse([]byte(fmt.Sprintf(`secrets:
  - id: oa
    file: %s
bindings:
  - secret: oa
    sandboxes: {labels: {agent: coder}}
    host: api.fake.test
    template: "Bearer {{value}}"
    oauth:
      token_url: https://auth.fake.test/token
      grant: client_credentials
      client_id: cid
      per_sandbox: true
      sandbox_param: airlock_sandbox
      revocation_url: https://auth.fake.test/revoke
`, f)))
	if err != nil {
		t.Fatal(err)
	}
	logger, _ := newLogSink(t, clientSecret)
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
	coder := map[string]string{"agent": "coder"}
	inject := func(id string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", "https://api.fake.test/v1", nil)
		if _, err := in.Inject(context.Background(), Sandbox{ID: id, Labels: coder}, req); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")
	}
	ta, tb := inject("sb-a"), inject("sb-b")
	if ta == tb || inject("sb-a") != ta {
		t.Fatalf("got tokens %q and %q, want one per sandbox, cached", ta, tb)
	}
	minted, _, _ := idp.snapshot()
	if len(minted) != 2 || minted[ta] != "airlock-sb-a" || minted[tb] != "airlock-sb-b" {
		t.Fatalf("the endpoint minted %v, want one token per sandbox, each naming it", minted)
	}

	in.Forget("sb-a")
	in.revokes.Wait()
	_, revoked, bad := idp.snapshot()
	if len(revoked) != 1 || revoked[0] != ta || bad != 0 {
		t.Errorf("revoked %v (%d without client authentication), want only sandbox a's token, authenticated", revoked, bad)
	}
	if inject("sb-b") != tb {
		t.Error("sandbox b's token changed when sandbox a was deleted")
	}
	if ta2 := inject("sb-a"); ta2 == ta {
		t.Error("a sandbox created again with the same id got the revoked token")
	}

	// The revocation endpoint fails: logged, nothing else; the token expires.
	idp.mu.Lock()
	idp.down = true
	idp.mu.Unlock()
	in.Forget("sb-b")
	in.revokes.Wait()
	if _, revoked, _ := idp.snapshot(); len(revoked) != 1 {
		t.Errorf("revoked %v, want no more", revoked)
	}
}

func TestOAuthPerSandboxConfigErrors(t *testing.T) {
	base := "secrets:\n  - id: oa\n    env: OA\nbindings:\n  - secret: oa\n    sandboxes: {ids: [sb-1]}\n    host: api.example\n    template: \"Bearer {{value}}\"\n"
	cc := `token_url: "https://auth.example/token", grant: client_credentials, client_id: c`
	for _, tt := range []struct{ oauth, want string }{
		{`{token_url: "https://auth.example/token", grant: refresh_token, client_id: c, per_sandbox: true}`, "oauth.per_sandbox"},
		{`{` + cc + `, revocation_url: "https://auth.example/revoke"}`, "only with per_sandbox"},
		{`{` + cc + `, per_sandbox: true, revocation_url: "http://auth.example/revoke"}`, "oauth.revocation_url"},
		{`{` + cc + `, sandbox_param: sb}`, "oauth.sandbox_param: only with per_sandbox"},
		{`{` + cc + `, per_sandbox: true, sandbox_param: client_id}`, "oauth.sandbox_param"},
		{`{` + cc + `, per_sandbox: true, sandbox_param: "a b"}`, "oauth.sandbox_param"},
	} {
		_, err := Parse([]byte(base + "    oauth: " + tt.oauth + "\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error naming %q", tt.oauth, err, tt.want)
		}
	}
}
