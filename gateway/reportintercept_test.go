package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// In report mode a TLS connection no rule allows is intercepted, so its
// records carry each request's method and path (what policy suggest learns
// from); before, it was tunnelled and the log had only "connect :443". An
// attached pod, which may not trust the CA, stays tunnelled.
func TestReportModeInterceptsUnknownTLS(t *testing.T) {
	eng, err := policy.New(policy.Config{Mode: policy.ModeReport, Presets: []string{policy.PresetNone}, EvalTimeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	pki := newTestPKI(t)
	up := newUpstream(t, nil, ptr(pki.leaf(t, "unknown.example")))
	rd := &recordingDialer{allowed: map[string]bool{up.addr: true}}
	dial := func(o *Config) {
		o.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == "127.0.0.2:443" {
				addr = up.addr
			}
			return rd.DialContext(ctx, network, addr)
		}
	}
	h := newHarness(t, eng, map[string][]netip.Addr{"unknown.example": {netip.MustParseAddr("127.0.0.2")}}, pki, dial)

	resp, err := h.proxyClient(pki.mitmCAPool).Post("https://unknown.example/upload/v2?x=1", "text/plain", nil)
	if err != nil {
		t.Fatalf("report mode lets it through, intercepted: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || up.reqs.Load() != 1 {
		t.Fatalf("got %d, upstream requests %d; want 200 and 1", resp.StatusCode, up.reqs.Load())
	}
	r := h.log.Wait(t, "the inner request", func(r audit.Record) bool { return r.Kind == "http" && r.Host == "unknown.example" })
	if r.Method != "POST" || r.Path != "/upload/v2" || !audit.WouldDeny(&r) {
		t.Fatalf("record: got %s %s would-deny %v, want POST /upload/v2 as a report-mode would-deny", r.Method, r.Path, audit.WouldDeny(&r))
	}

	// A pod: its CONNECT is tunnelled end to end, as before.
	el, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.g.ServeSandbox(policy.Sandbox{ID: "sb-pod", Pod: &policy.Pod{Namespace: "ci", Name: "p"}}, el, tl); err != nil {
		t.Fatal(err)
	}
	pu, _ := url.Parse("http://" + el.Addr().String())
	roots := x509.NewCertPool()
	roots.AddCert(pki.upCA)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: roots}}}
	resp, err = c.Get("https://unknown.example/pod")
	if err != nil {
		t.Fatalf("pod: the tunnel reaches the origin with its own certificate: %v", err)
	}
	resp.Body.Close()
	// The client trusts only the origin's CA: a 200 means no interception.
	if resp.StatusCode != 200 || up.reqs.Load() != 2 {
		t.Fatalf("pod: got %d, upstream requests %d; want 200 and 2", resp.StatusCode, up.reqs.Load())
	}
}
