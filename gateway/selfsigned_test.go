package gateway

import (
	"context"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// newSelfSignedServer serves with httptest's own certificate, which the gateway
// does not trust.
func newSelfSignedServer(t *testing.T, reqs *atomic.Int64) *httptest.Server {
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reqs.Add(1) }))
	t.Cleanup(s.Close)
	return s
}

type x509Cert = x509.Certificate

func parseCert(der []byte) (*x509.Certificate, error) { return x509.ParseCertificate(der) }

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
