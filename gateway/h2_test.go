package gateway

import (
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy/policytest"
	"github.com/airlock-dev/airlock/secrets"
)

// h2Client is an HTTP/2 client that reaches HTTPS origins through the
// harness's explicit proxy (CONNECT), trusting the interception CA.
func (h *harness) h2Client() *http.Client {
	pu, _ := url.Parse("http://" + h.explicit)
	tr := &http.Transport{
		Proxy:             http.ProxyURL(pu),
		TLSClientConfig:   &tls.Config{RootCAs: h.pki.mitmCAPool},
		ForceAttemptHTTP2: true,
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// trailerHandler answers with the protocol it was spoken to in, a body and a
// trailer, after reading the request body.
func trailerHandler(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.Header().Set("Trailer", "X-Checksum")
	w.Header().Set("X-Proto", r.Proto)
	fmt.Fprintf(w, "%s %s body=%q", r.Method, r.URL.Path, b)
	w.(http.Flusher).Flush()
	w.Header().Set("X-Checksum", "sum-"+r.URL.Path)
}

// An h2 client through interception reaches an h2 upstream and an
// HTTP/1.1-only upstream; every stream is one request through the
// pipeline (one audit record each, kind http, http_version 2), a denied
// stream gets the refusal while the next stream on the same connection goes
// on, the denied path never reaches the upstream, and trailers pass.
func TestH2Interception(t *testing.T) {
	for _, tc := range []struct {
		name      string
		upH2      bool
		wantProto string
	}{
		{"h2 upstream", true, "HTTP/2.0"},
		{"http/1.1-only upstream", false, "HTTP/1.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pki := newTestPKI(t)
			cert := pki.leaf(t, "api.example")
			var denied atomic.Int64
			up := newUpstreamProto(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/secret" {
					denied.Add(1)
				}
				trailerHandler(w, r)
			}), &cert, tc.upH2)
			h := newHarness(t, policytest.Allow("api.example").Intercept("api.example").DenyPaths("/secret"), names("api.example"), pki)
			h.allowUpstreams(up)
			c := h.h2Client()
			base := fmt.Sprintf("https://api.example:%d", up.port)
			for i, p := range []string{"/a", "/secret", "/b"} {
				resp, err := c.Post(base+p, "text/plain", strings.NewReader("hi"))
				if err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.ProtoMajor != 2 {
					t.Fatalf("%s: got %s to the sandbox, want HTTP/2", p, resp.Proto)
				}
				if p == "/secret" {
					if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Airlock-Reason") != policytest.ReasonPathDenied {
						t.Fatalf("%s: got %d %q (reason %q), want 403 %s", p, resp.StatusCode, body, resp.Header.Get("X-Airlock-Reason"), policytest.ReasonPathDenied)
					}
					continue
				}
				if resp.StatusCode != 200 || resp.Header.Get("X-Proto") != tc.wantProto || !strings.Contains(string(body), `body="hi"`) {
					t.Fatalf("request %d %s: got %d %q proto %q, want 200 over %s", i, p, resp.StatusCode, body, resp.Header.Get("X-Proto"), tc.wantProto)
				}
				if got := resp.Trailer.Get("X-Checksum"); got != "sum-"+p {
					t.Fatalf("%s: trailer got %q, want %q", p, got, "sum-"+p)
				}
			}
			if denied.Load() != 0 {
				t.Fatalf("upstream saw %d requests for the denied path, want 0", denied.Load())
			}
			if up.reqs.Load() != 2 {
				t.Fatalf("upstream saw %d requests, want 2", up.reqs.Load())
			}
			for _, p := range []string{"/a", "/secret", "/b"} {
				recs := settledMatch(h.log, 1, func(r audit.Record) bool { return r.Kind == "http" && r.Path == p })
				if len(recs) != 1 {
					t.Fatalf("%s: got %d audit records, want 1", p, len(recs))
				}
				r := recs[0]
				want := audit.DecisionAllow
				if p == "/secret" {
					want = audit.DecisionDeny
				}
				if r.Decision != want || r.Method != "POST" || r.Host != "api.example" || string(r.Extra["http_version"]) != `"2"` {
					t.Fatalf("%s: record %+v, want %s POST api.example http_version 2", p, r, want)
				}
			}
			// One connection carried the three streams: one CONNECT.
			if n := len(h.log.Match(func(r audit.Record) bool { return r.Kind == "connect" })); n != 1 {
				t.Fatalf("got %d connect records, want 1 (streams on one connection)", n)
			}
			if got := h.dialer.refusedAddrs(); len(got) != 0 {
				t.Fatalf("dialer refused %v", got)
			}
		})
	}
}

// Secrets on HTTP/2 streams, as on HTTP/1.1: the credential is injected on
// each allowed stream (the upstream sees it) and the upstream's echo of it
// in a header, the body or a trailer never reaches the sandbox.
func TestH2SecretsInjectedAndScrubbed(t *testing.T) {
	for _, upH2 := range []bool{true, false} {
		t.Run(fmt.Sprintf("upstream h2 %v", upH2), func(t *testing.T) {
			pki := newTestPKI(t)
			cert := pki.leaf(t, "scrub.example")
			var got atomic.Value
			up := newUpstreamProto(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				v := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
				got.Store(v)
				w.Header().Set("Trailer", "X-T")
				w.Header().Set("X-Echo", v)
				for i := 0; i < len(v); i += 3 { // split across frames
					w.Write([]byte(v[i:min(i+3, len(v))]))
					w.(http.Flusher).Flush()
				}
				w.Header().Set("X-T", v)
			}), &cert, upH2)
			inj := bearerInjector(t, "scrub.example", up.port)
			h := newHarness(t, policytest.Allow("scrub.example"), names("scrub.example"), pki, func(c *Config) { c.Injector = inj })
			h.allowUpstreams(up)
			c := h.h2Client()
			for i := range 2 { // two streams on one connection
				resp, err := c.Get(fmt.Sprintf("https://scrub.example:%d/x%d", up.port, i))
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				all := fmt.Sprintf("%v %s %v", resp.Header, body, resp.Trailer)
				if resp.ProtoMajor != 2 {
					t.Fatalf("got %s, want HTTP/2 to the sandbox", resp.Proto)
				}
				if v, _ := got.Load().(string); v != secretCanary {
					t.Fatalf("upstream got credential %q, want the injected secret", v)
				}
				if carriesCanary(all) {
					t.Fatalf("the sandbox saw a form of the secret:\n%s", all)
				}
				if strings.Count(all, audit.Redacted) < 3 {
					t.Fatalf("want the header, body and trailer scrubbed, got:\n%s", all)
				}
			}
			recs := settledMatch(h.log, 2, func(r audit.Record) bool { return r.Kind == "http" && len(r.Secrets) == 1 })
			if len(recs) != 2 {
				t.Fatalf("got %d http records naming the secret, want 2 (one per stream)", len(recs))
			}
		})
	}
}

// bearerInjector binds a secret (secretCanary) as Authorization: Bearer to
// host:port for sb-test.
func bearerInjector(t *testing.T, host string, port int) *secrets.Injector {
	t.Helper()
	vf := filepath.Join(t.TempDir(), "v")
	os.WriteFile(vf, []byte(secretCanary), 0o600)
	cfg, err := secrets.Parse([]byte(fmt.Sprintf("secrets:\n  - id: api\n    file: %s\nbindings:\n  - secret: api\n    sandboxes: {ids: [sb-test]}\n    host: %s\n    port: %d\n    template: \"Bearer {{value}}\"\n", vf, host, port)))
	if err != nil {
		t.Fatal(err)
	}
	inj, err := secrets.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return inj
}

// HTTP/2 upstream through the parent proxy: the h2 connection to the origin
// is a CONNECT through the parent, as every upstream connection is, and the
// parent sees only what policy allowed.
func TestH2ThroughParentProxy(t *testing.T) {
	pki := newTestPKI(t)
	cert := pki.leaf(t, "api.example")
	up := newUpstreamProto(t, http.HandlerFunc(trailerHandler), &cert, true)
	p := newTestParent(t, map[string]string{fmt.Sprintf("api.example:%d", up.port): up.addr})
	h := parentHarness(t, p, policytest.Allow("api.example").Intercept("api.example").DenyPaths("/secret"), nil, nil, pki)
	c := h.h2Client()
	for _, path := range []string{"/a", "/secret", "/b"} {
		resp, err := c.Get(fmt.Sprintf("https://api.example:%d%s", up.port, path))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		want := 200
		if path == "/secret" {
			want = 403
		}
		if resp.StatusCode != want || resp.ProtoMajor != 2 {
			t.Fatalf("%s: got %d %s, want %d over HTTP/2", path, resp.StatusCode, resp.Proto, want)
		}
		if want == 200 && resp.Header.Get("X-Proto") != "HTTP/2.0" {
			t.Fatalf("%s: upstream spoke %q, want HTTP/2.0", path, resp.Header.Get("X-Proto"))
		}
	}
	if up.reqs.Load() != 2 {
		t.Fatalf("upstream saw %d requests, want 2", up.reqs.Load())
	}
	targets, _ := p.Seen()
	if len(targets) != 1 {
		t.Fatalf("parent saw CONNECTs %v, want one (one h2 connection for the streams)", targets)
	}
	recs := settledMatch(h.log, 1, func(r audit.Record) bool { return r.Kind == "http" && r.Path == "/a" })
	if len(recs) != 1 || string(recs[0].Extra["parent_proxy"]) != strconv.Quote(p.addr) {
		t.Fatalf("records %+v: want one naming the parent proxy", recs)
	}
}
