package secrets

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
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

// fakeGitHub mints installation tokens for app 7, installation 42, checking
// the app's JWT with its public key, and records revocations.
type fakeGitHub struct {
	pub     *rsa.PublicKey
	mu      sync.Mutex
	minted  map[string][]string // token -> repositories
	revoked []string
}

func (f *fakeGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == "POST" && r.URL.Path == "/app/installations/42/access_tokens":
		if err := f.checkJWT(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"message":%q}`, err.Error())
			return
		}
		var body struct{ Repositories []string }
		json.NewDecoder(r.Body).Decode(&body)
		tok := fmt.Sprintf("ghs_%d_%s", len(f.minted)+1, strings.Repeat("T", 30))
		f.minted[tok] = body.Repositories
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"token":%q,"expires_at":%q}`, tok, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	case r.Method == "DELETE" && r.URL.Path == "/installation/token":
		f.revoked = append(f.revoked, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		w.WriteHeader(http.StatusNoContent)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func (f *fakeGitHub) checkJWT(jwt string) error {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return fmt.Errorf("not a JWT")
	}
	sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(f.pub, crypto.SHA256, sum[:], sig); err != nil {
		return fmt.Errorf("bad signature")
	}
	raw, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var c struct {
		Iss      string
		Iat, Exp int64
	}
	json.Unmarshal(raw, &c)
	now := time.Now().Unix()
	if c.Iss != "7" || c.Iat > now || c.Exp <= now || c.Exp-c.Iat > 600 {
		return fmt.Errorf("bad claims %+v", c)
	}
	return nil
}

func TestGitHubAppTokensPerSandbox(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	gh := &fakeGitHub{pub: &key.PublicKey, minted: map[string][]string{}}
	srv := httptest.NewTLSServer(gh)
	t.Cleanup(srv.Close)
	f := filepath.Join(t.TempDir(), "app.pem")
	os.WriteFile(f, []byte(base64.StdEncoding.EncodeToString([]byte(pemKey))), 0o600)
	cfg, err := Parse([]byte(fmt.Sprintf(`secrets:
  - id: app
    file: %s
bindings:
  - secret: app
    sandboxes: {labels: {agent: coder}}
    host: api.fake.test
    template: "token {{value}}"
    github_app: {app_id: 7, installation_id: 42, api_url: "https://gh.fake.test", repositories: ["{{label.repo}}", docs]}
`, f)))
	if err != nil {
		t.Fatal(err)
	}
	logger, _ := newLogSink(t, base64.StdEncoding.EncodeToString([]byte(pemKey)))
	in, err := New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	in.SetTokenClient(&http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // loopback fake only
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr != "gh.fake.test:443" {
				return nil, fmt.Errorf("test dialer: %s is not the fake", addr)
			}
			return (&net.Dialer{}).DialContext(ctx, network, srv.Listener.Addr().String())
		},
	}})
	inject := func(sb Sandbox) (string, error) {
		req, _ := http.NewRequest("GET", "https://api.fake.test/repos/acme/alpha", nil)
		_, err := in.Inject(context.Background(), sb, req)
		return strings.TrimPrefix(req.Header.Get("Authorization"), "token "), err
	}
	a := Sandbox{ID: "sb-a", Labels: map[string]string{"agent": "coder", "repo": "alpha"}}
	b := Sandbox{ID: "sb-b", Labels: map[string]string{"agent": "coder", "repo": "beta"}}
	ta, err := inject(a)
	if err != nil {
		t.Fatal(err)
	}
	ta2, _ := inject(a)
	tb, err := inject(b)
	if err != nil {
		t.Fatal(err)
	}
	if ta != ta2 || ta == tb {
		t.Fatalf("got tokens a=%q a again=%q b=%q, want one cached token per sandbox", ta, ta2, tb)
	}
	gh.mu.Lock()
	ra, rb := strings.Join(gh.minted[ta], ","), strings.Join(gh.minted[tb], ",")
	gh.mu.Unlock()
	if ra != "alpha,docs" || rb != "beta,docs" {
		t.Errorf("got repositories a=%q b=%q, want alpha,docs and beta,docs", ra, rb)
	}
	// A sandbox without the label gets no token, and a 503.
	if _, err := inject(Sandbox{ID: "sb-c", Labels: map[string]string{"agent": "coder"}}); HTTPStatus(err) != http.StatusServiceUnavailable ||
		!strings.Contains(err.Error(), `label "repo"`) {
		t.Errorf("no label: got %v, want a 503 naming the label", err)
	}
	in.Forget(a.ID)
	in.revokes.Wait()
	gh.mu.Lock()
	revoked := append([]string(nil), gh.revoked...)
	gh.mu.Unlock()
	if len(revoked) != 1 || revoked[0] != ta {
		t.Errorf("revoked %v, want only sandbox a's token", revoked)
	}
}
