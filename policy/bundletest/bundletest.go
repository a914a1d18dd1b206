package bundletest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/bundle"
)

// Key is an ES256 key pair for signing bundles.
type Key struct {
	ID         string
	Scope      string // the scope claim signatures carry; empty: none
	PublicPEM  string
	PrivatePEM string
}

// NewKey makes a P-256 key with id and scope.
func NewKey(t testing.TB, id, scope string) *Key {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return &Key{ID: id, Scope: scope,
		PublicPEM:  string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})),
		PrivatePEM: string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: priv}))}
}

// Bundle is what Build writes.
type Bundle struct {
	// Revision is the manifest's revision.
	Revision string
	// Files are Rego modules by their path in the bundle (policy.rego,
	// lib/x_test.rego).
	Files map[string]string
	// Data is the bundle's data document (data.json at the root).
	Data map[string]any
	// TamperAfterSign replaces these files' contents after the signature
	// was made (their digests then do not match).
	TamperAfterSign map[string]string
}

// Build writes b as a bundle tarball, signed with key when it is not nil.
func Build(t testing.TB, b Bundle, key *Key) []byte {
	t.Helper()
	ob := bundle.Bundle{Manifest: bundle.Manifest{Revision: b.Revision}, Data: b.Data}
	if ob.Data == nil {
		ob.Data = map[string]any{}
	}
	paths := make([]string, 0, len(b.Files))
	for p := range b.Files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		ob.Modules = append(ob.Modules, bundle.ModuleFile{URL: "/" + p, Path: "/" + p, Raw: []byte(b.Files[p])})
	}
	if key != nil {
		claims := ""
		if key.Scope != "" {
			claims = filepath.Join(t.TempDir(), "claims.json")
			j, _ := json.Marshal(map[string]any{"scope": key.Scope, "keyid": key.ID})
			if err := os.WriteFile(claims, j, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := ob.GenerateSignature(bundle.NewSigningConfig(key.PrivatePEM, "ES256", claims), key.ID, true); err != nil {
			t.Fatal(err)
		}
	}
	for i, m := range ob.Modules {
		if src, ok := b.TamperAfterSign[strings.TrimPrefix(m.Path, "/")]; ok {
			ob.Modules[i].Raw = []byte(src)
		}
	}
	var buf bytes.Buffer
	if err := bundle.NewWriter(&buf).UseModulePath(true).DisableFormat(true).Write(ob); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Stats counts what a Server answered.
type Stats struct {
	Requests    int // every request for the bundle
	OK          int // 200 with a bundle
	NotModified int // 304
	Unavailable int // 503 while down
	LongPolls   int // requests held for a change
}

// LongPollContentType is the content type with which an OPA bundle server
// says it supports long polling.
const LongPollContentType = "application/vnd.openpolicyagent.bundles"

// Server serves one bundle at URL on loopback.
type Server struct {
	// URL is the bundle's full URL.
	URL string
	srv *httptest.Server

	mu      sync.Mutex
	tarball []byte
	etag    string
	noETag  bool
	down    bool
	long    bool
	changed chan struct{} // closed and replaced by Publish
	held    chan struct{} // receives when a request is held
	stats   Stats
	authz   []string
}

// NewServer starts a server with nothing published (404 until Publish).
func NewServer(t testing.TB) *Server {
	t.Helper()
	s := &Server{changed: make(chan struct{}), held: make(chan struct{}, 16)}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL + "/bundles/airlock.tar.gz"
	t.Cleanup(s.Close)
	return s
}

// NewTLSServer is NewServer over HTTPS with httptest's certificate (for
// 127.0.0.1); CertPEM is the certificate to trust.
func NewTLSServer(t testing.TB) *Server {
	t.Helper()
	s := &Server{changed: make(chan struct{}), held: make(chan struct{}, 16)}
	s.srv = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL + "/bundles/airlock.tar.gz"
	t.Cleanup(s.Close)
	return s
}

// CertPEM is the certificate of a NewTLSServer in PEM.
func (s *Server) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
}

// Publish serves tarball from now on, under an ETag of its digest.
func (s *Server) Publish(tarball []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := sha256.Sum256(tarball)
	s.tarball, s.etag = tarball, `"`+hex.EncodeToString(sum[:8])+`"`
	close(s.changed)
	s.changed = make(chan struct{})
}

// SetETags turns ETags (and so 304s) on or off; on by default.
func (s *Server) SetETags(on bool) { s.mu.Lock(); s.noETag = !on; s.mu.Unlock() }

// SetDown makes every request a 503 while down.
func (s *Server) SetDown(down bool) { s.mu.Lock(); s.down = down; s.mu.Unlock() }

// SetLongPolling turns long polling on: a request that asks to wait and
// whose If-None-Match is the current ETag is held until Publish or its wait.
func (s *Server) SetLongPolling(on bool) { s.mu.Lock(); s.long = on; s.mu.Unlock() }

// Held receives once for each request the server holds.
func (s *Server) Held() <-chan struct{} { return s.held }

// Stats returns the counts so far.
func (s *Server) Stats() Stats { s.mu.Lock(); defer s.mu.Unlock(); return s.stats }

// Authorizations returns the Authorization headers received, in order.
func (s *Server) Authorizations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.authz...)
}

// Close stops the server; requests then fail to connect.
func (s *Server) Close() {
	s.srv.CloseClientConnections()
	s.srv.Close()
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/bundles/airlock.tar.gz" {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	s.stats.Requests++
	s.authz = append(s.authz, r.Header.Get("Authorization"))
	if s.down {
		s.stats.Unavailable++
		s.mu.Unlock()
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	wait := preferWait(r.Header.Get("Prefer"))
	if s.long && wait > 0 && s.etag != "" && matches(r.Header.Get("If-None-Match"), s.etag) {
		s.stats.LongPolls++
		changed := s.changed
		s.mu.Unlock()
		select {
		case s.held <- struct{}{}:
		default:
		}
		t := time.NewTimer(wait)
		select {
		case <-changed:
		case <-t.C:
		case <-r.Context().Done():
		}
		t.Stop()
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	if s.tarball == nil {
		http.NotFound(w, r)
		return
	}
	if s.long {
		w.Header().Set("Content-Type", LongPollContentType)
	} else {
		w.Header().Set("Content-Type", "application/gzip")
	}
	if !s.noETag {
		w.Header().Set("ETag", s.etag)
		if matches(r.Header.Get("If-None-Match"), s.etag) {
			s.stats.NotModified++
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	s.stats.OK++
	_, _ = w.Write(s.tarball)
}

// preferWait reads wait=N (seconds) from a Prefer header.
func preferWait(h string) time.Duration {
	for _, p := range strings.Split(h, ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(p), "wait="); ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				return time.Duration(n) * time.Second
			}
		}
	}
	return 0
}

// matches reports whether an If-None-Match list names etag.
func matches(list, etag string) bool {
	for _, e := range strings.Split(list, ",") {
		if strings.TrimSpace(e) == etag {
			return true
		}
	}
	return false
}

// WaitHeld waits until the server holds a request, or ctx ends.
func (s *Server) WaitHeld(ctx context.Context) bool {
	select {
	case <-s.held:
		return true
	case <-ctx.Done():
		return false
	}
}
