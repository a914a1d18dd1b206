package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// A security engineer's method-and-path policy (GET api.github.com/repos/acme/*,
// POST api.openai.com/v1/chat/completions, nothing else), run through a real
// gateway with the real engine and two fake TLS origins on loopback, in its
// two forms: the http_allow table (policies/examples/http-allow-table) and the
// hand-written rules whose first version silently did nothing (its CONNECT
// was tunnelled, so DELETE, another repository and /v1/embeddings all got
// 200). The allowed calls pass; every other one is refused and its upstream
// sees nothing.
func TestSecurityEngineerPolicyEndToEnd(t *testing.T) {
	handWritten := `package airlock.egress

allow if {
	input.kind == "http"
	input.destination.host == "api.github.com"
	input.http.method == "GET"
	glob.match("/repos/acme/*", null, input.http.path)
}

allow if {
	input.kind == "http"
	input.destination.host == "api.openai.com"
	input.http.method == "POST"
	input.http.path == "/v1/chat/completions"
}

# The first version's tunnel: without derivation this made every rule above
# a no-op for HTTPS.
allow if {
	input.kind in {"connect", "tls", "dns"}
	input.destination.host in {"api.github.com", "api.openai.com"}
}
`
	hw := t.TempDir()
	if err := os.WriteFile(filepath.Join(hw, "policy.rego"), []byte(handWritten), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, dir string }{
		{"http_allow table", filepath.Join("..", "policies", "examples", "http-allow-table")},
		{"hand-written rules", hw},
	} {
		t.Run(tc.name, func(t *testing.T) { runSecurityEngineerPolicy(t, tc.dir) })
	}
}

func runSecurityEngineerPolicy(t *testing.T, dir string) {
	eng, err := policy.New(policy.Config{Dir: dir, Presets: []string{policy.PresetNone}, EvalTimeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	pki := newTestPKI(t)
	gh := newUpstream(t, nil, ptr(pki.leaf(t, "api.github.com")))
	oa := newUpstream(t, nil, ptr(pki.leaf(t, "api.openai.com")))
	// Each host has its own loopback address; the dialer sends port 443 of
	// each to its origin (and refuses everything else).
	rd := &recordingDialer{allowed: map[string]bool{gh.addr: true, oa.addr: true}}
	to := map[string]string{"127.0.0.2:443": gh.addr, "127.0.0.3:443": oa.addr}
	dial := func(o *Config) {
		o.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if a, ok := to[addr]; ok {
				addr = a
			}
			return rd.DialContext(ctx, network, addr)
		}
	}
	h := newHarness(t, eng, map[string][]netip.Addr{
		"api.github.com": {netip.MustParseAddr("127.0.0.2")},
		"api.openai.com": {netip.MustParseAddr("127.0.0.3")},
	}, pki, dial)
	c := h.proxyClient(pki.mitmCAPool)
	tests := []struct {
		name, method, url string
		up                *upstream
		want              int
	}{
		{"read an acme repository", "GET", "https://api.github.com/repos/acme/widget/pulls", gh, 200},
		{"chat completion", "POST", "https://api.openai.com/v1/chat/completions", oa, 200},
		{"DELETE an acme repository", "DELETE", "https://api.github.com/repos/acme/widget", gh, 403},
		{"read another repository", "GET", "https://api.github.com/repos/other/widget", gh, 403},
		{"a prefix of acme", "GET", "https://api.github.com/repos/acmeevil/widget", gh, 403},
		{"another OpenAI path", "POST", "https://api.openai.com/v1/embeddings", oa, 403},
		{"GET on the chat path", "GET", "https://api.openai.com/v1/chat/completions", oa, 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.up.reqs.Load()
			req, _ := http.NewRequest(tt.method, tt.url, strings.NewReader(""))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", tt.method, tt.url, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("got %d, want %d", resp.StatusCode, tt.want)
			}
			got := tt.up.reqs.Load() - before
			if tt.want == 200 && got != 1 || tt.want != 200 && got != 0 {
				t.Fatalf("upstream requests: got %d, want %d", got, map[bool]int64{true: 1}[tt.want == 200])
			}
			id := resp.Header.Get("X-Airlock-Decision")
			path := strings.SplitN(strings.TrimPrefix(tt.url, "https://"), "/", 2)[1]
			r := h.log.Wait(t, "request record", func(r audit.Record) bool {
				return (id == "" || r.ID == id) && r.Kind == "http" && r.Method == tt.method && r.Path == "/"+path
			})
			wantDec := audit.DecisionAllow
			if tt.want != 200 {
				wantDec = audit.DecisionDeny
			}
			if r.Decision != wantDec {
				t.Fatalf("audit: got %s, want %s", r.Decision, wantDec)
			}
		})
	}
	if r := rd.refusedAddrs(); len(r) > 0 {
		t.Fatalf("dialer refused %v: the gateway tried to reach a non-test address", r)
	}
}

func ptr[T any](v T) *T { return &v }
