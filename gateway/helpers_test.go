package gateway

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy"
)

// fakeResolver maps names to addresses and counts lookups.
type fakeResolver struct {
	names map[string][]netip.Addr
}

func (f *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f.names[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// recordingDialer dials only addresses in allowed (loopback test servers);
// every other address is recorded and refused, so a broken guard fails the test
// instead of sending a packet.
type recordingDialer struct {
	mu      sync.Mutex
	allowed map[string]bool
	refused []string
	dialed  []string
}

func (d *recordingDialer) allow(addr string) {
	d.mu.Lock()
	d.allowed[addr] = true
	d.mu.Unlock()
}

func (d *recordingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	ok := d.allowed[addr]
	if !ok {
		d.refused = append(d.refused, addr)
	} else {
		d.dialed = append(d.dialed, addr)
	}
	d.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("recording dialer: %s is not a test address", addr)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

func (d *recordingDialer) dialedAddrs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dialed...)
}

func (d *recordingDialer) refusedAddrs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.refused...)
}

// testPKI is a CA for the fake upstreams plus the interception CA.
type testPKI struct {
	upCA       *x509.Certificate
	upKey      *ecdsa.PrivateKey
	upCAFile   string
	mitmCert   string
	mitmKey    string
	mitmCAPool *x509.CertPool
	upPool     *x509.CertPool
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	dir := t.TempDir()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fake internet CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &testPKI{upCA: ca, upKey: key, upCAFile: filepath.Join(dir, "up.pem")}
	os.WriteFile(p.upCAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	p.upPool = x509.NewCertPool()
	p.upPool.AddCert(ca)
	p.mitmCert, p.mitmKey, err = InitCA(filepath.Join(dir, "mitm"), false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c, err := LoadCACert(p.mitmCert)
	if err != nil {
		t.Fatal(err)
	}
	p.mitmCAPool = x509.NewCertPool()
	p.mitmCAPool.AddCert(c)
	return p
}

// leaf issues an upstream certificate for names.
func (p *testPKI) leaf(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: names, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.upCA, &key.PublicKey, p.upKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// upstream is a counting httptest server: requests, connections (accepted
// and still open) and the raw bytes it received (below TLS).
type upstream struct {
	srv     *httptest.Server
	reqs    atomic.Int64
	conns   atomic.Int64
	open    atomic.Int64 // connections not yet closed
	bytesIn atomic.Int64
	port    int
	addr    string
}

// countingListener counts the bytes read from every connection it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, n: l.n}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func newUpstream(t testing.TB, h http.Handler, tlsCert *tls.Certificate) *upstream {
	t.Helper()
	return newUpstreamProto(t, h, tlsCert, false)
}

// newUpstreamProto is newUpstream; with h2 a TLS upstream offers HTTP/2 by
// ALPN (else it speaks HTTP/1.1 only).
func newUpstreamProto(t testing.TB, h http.Handler, tlsCert *tls.Certificate, h2 bool) *upstream {
	t.Helper()
	u := &upstream{}
	if h == nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello %s %s", r.Host, r.URL.Path)
		})
	}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.reqs.Add(1)
		h.ServeHTTP(w, r)
	}))
	u.srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			u.conns.Add(1)
			u.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			u.open.Add(-1)
		}
	}
	u.srv.Listener = countingListener{Listener: u.srv.Listener, n: &u.bytesIn}
	if tlsCert != nil {
		u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*tlsCert}}
		u.srv.EnableHTTP2 = h2
		u.srv.StartTLS()
	} else {
		u.srv.Start()
	}
	t.Cleanup(u.srv.Close)
	u.addr = u.srv.Listener.Addr().String()
	ap := netip.MustParseAddrPort(u.addr)
	u.port = int(ap.Port())
	return u
}

// harness is a gateway serving one sandbox on loopback listeners.
type harness struct {
	g        *Gateway
	dec      policy.Decider
	log      *audittest.Log
	dialer   *recordingDialer
	explicit string
	transp   string
	origDst  atomic.Value // netip.AddrPort for the next transparent connection
	pki      *testPKI
}

type harnessOpt func(*Config)

func newHarness(t testing.TB, dec policy.Decider, names map[string][]netip.Addr, pki *testPKI, opts ...harnessOpt) *harness {
	t.Helper()
	return newHarnessLogger(t, dec, names, pki, nil, opts...)
}

// newHarnessLogger is newHarness with the gateway's operational logger.
func newHarnessLogger(t testing.TB, dec policy.Decider, names map[string][]netip.Addr, pki *testPKI, logger *slog.Logger, opts ...harnessOpt) *harness {
	t.Helper()
	return newHarnessResolver(t, dec, &fakeResolver{names: names}, pki, logger, opts...)
}

// newHarnessResolver is newHarness with the gateway's Resolver given.
func newHarnessResolver(t testing.TB, dec policy.Decider, res Resolver, pki *testPKI, logger *slog.Logger, opts ...harnessOpt) *harness {
	t.Helper()
	h := &harness{dec: dec, log: &audittest.Log{}, dialer: &recordingDialer{allowed: map[string]bool{}}, pki: pki}
	cfg := Config{
		AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		DialFunc:   h.dialer.DialContext,
		OriginalDst: func(net.Conn) (netip.AddrPort, error) {
			v, _ := h.origDst.Load().(netip.AddrPort)
			if !v.IsValid() {
				return v, errors.New("no test destination set")
			}
			return v, nil
		},
		PeekTimeout: 300 * time.Millisecond,
	}
	if pki != nil {
		cfg.UpstreamCAFile = pki.upCAFile
		cfg.CACertFile, cfg.CAKeyFile = pki.mitmCert, pki.mitmKey
	}
	for _, o := range opts {
		o(&cfg)
	}
	g, err := New(cfg, dec, h.log, res, logger)
	if err != nil {
		t.Fatal(err)
	}
	h.g = g
	el, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.explicit, h.transp = el.Addr().String(), tl.Addr().String()
	if err := g.ServeSandbox(policy.Sandbox{ID: "sb-test", Labels: map[string]string{"agent": "coder"}}, el, tl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		g.Shutdown(ctx)
	})
	return h
}

// allowUpstreams lets the recording dialer reach these test servers.
func (h *harness) allowUpstreams(us ...*upstream) {
	for _, u := range us {
		h.dialer.allow(u.addr)
	}
}

// proxyClient is an http.Client using the explicit proxy.
func (h *harness) proxyClient(roots *x509.CertPool) *http.Client {
	pu, _ := url.Parse("http://" + h.explicit)
	tr := &http.Transport{
		Proxy:             http.ProxyURL(pu),
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		ForceAttemptHTTP2: false,
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// rawRequest writes raw bytes to addr and returns the first response.
func rawRequest(t testing.TB, addr, raw string) (*http.Response, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, raw)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// wsUpgrade dials addr and sends a websocket upgrade of target with Host
// host (extra: more header lines, each ending in "\r\n"), and fails t
// unless the answer is 101. The connection has a 10 s deadline; the caller
// closes it.
func wsUpgrade(t *testing.T, addr, target, host, extra string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n%s\r\n", target, host, extra)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		c.Close()
		t.Fatalf("upgrade of %s: got %v %v, want 101", target, resp, err)
	}
	return c, br
}
