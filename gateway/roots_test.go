package gateway

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"crypto/x509"

	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy/policytest"
)

// Regression for the start cost of `airlock run`: New parsed every system root
// (~15 ms) although most runs never dial HTTPS upstream. New now only validates
// upstream.ca_file; the pool loads at the first upstream TLS dial.
func TestUpstreamRootsLoadLazily(t *testing.T) {
	pki := newTestPKI(t)
	g, err := New(Config{UpstreamCAFile: pki.upCAFile}, policytest.Allow(), &audittest.Log{}, &fakeResolver{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.rootsUp.done:
		t.Fatal("got the upstream roots loaded by New, want them loaded at the first upstream TLS dial")
	default:
	}
	pool := g.rootsUp.get()
	if _, err := pki.upCA.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: time.Now()}); err != nil {
		t.Fatalf("got upstream.ca_file untrusted by the loaded pool (%v), want it trusted", err)
	}
	if got := g.upstreamTLS("x.test", false).RootCAs; got != pool {
		t.Fatalf("got a second pool %p, want the one loaded once %p", got, pool)
	}
}

func TestUpstreamCAFileCheckedByNew(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, file string }{
		{"missing", filepath.Join(dir, "missing.pem")},
		{"not pem", bad},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(Config{UpstreamCAFile: tc.file}, policytest.Allow(), &audittest.Log{}, &fakeResolver{}, nil); err == nil {
				t.Fatalf("got New accepting upstream ca_file %s, want an error", tc.file)
			}
		})
	}
}
