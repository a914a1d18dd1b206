package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
	"github.com/airlock-dev/airlock/secrets"
)

// Red-team battery for the gateway that all sandboxes share: what one sandbox
// does must not reach past the limits set for it, nor touch another sandbox's
// traffic.

// twoSandboxes is a gateway serving sb-a and sb-b, each on its own explicit
// listener, with the given resolver and audit logger.
type twoSandboxes struct {
	g      *Gateway
	dialer *recordingDialer
	addr   map[string]string // sandbox id -> explicit listener
}

func newTwoSandboxes(t *testing.T, dec policy.Decider, res Resolver, log audit.Logger, opts ...harnessOpt) *twoSandboxes {
	t.Helper()
	ts := &twoSandboxes{dialer: &recordingDialer{allowed: map[string]bool{}}, addr: map[string]string{}}
	cfg := Config{
		AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		DialFunc:   ts.dialer.DialContext,
	}
	for _, o := range opts {
		o(&cfg)
	}
	g, err := New(cfg, dec, log, res, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts.g = g
	for _, id := range []string{"sb-a", "sb-b"} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if err := g.ServeSandbox(policy.Sandbox{ID: id}, l, nil); err != nil {
			t.Fatal(err)
		}
		ts.addr[id] = l.Addr().String()
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		g.Shutdown(ctx)
	})
	return ts
}

func (ts *twoSandboxes) dials() int {
	ts.dialer.mu.Lock()
	defer ts.dialer.mu.Unlock()
	return len(ts.dialer.dialed) + len(ts.dialer.refused)
}

// limitError is a refusal by the DNS filter's per-sandbox limits.
type limitError struct{ reason string }

func (e *limitError) Error() string  { return "dns limit: " + e.reason }
func (e *limitError) Reason() string { return e.reason }

// limitResolver is a SandboxResolver that refuses every name for the
// sandboxes in refuse, as the DNS filter does once a sandbox is past its
// unique-name cap. It counts lookups that bypassed the sandbox accounting.
type limitResolver struct {
	names    map[string][]netip.Addr
	mu       sync.Mutex
	refuse   map[string]bool
	perSB    map[string]int
	unscoped atomic.Int64
}

func (r *limitResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.unscoped.Add(1)
	return r.names[host], nil
}

func (r *limitResolver) LookupForSandbox(_ context.Context, sb, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.perSB[sb]++
	if r.refuse[sb] {
		return nil, fmt.Errorf("lookup %s: %w", host, &limitError{reason: "dns_unique_name_limit"})
	}
	if a, ok := r.names[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

var _ SandboxResolver = (*limitResolver)(nil)

// TestGatewayLookupsCountAgainstSandboxDNSLimits: the
// gateway resolves a request's host through LookupForSandbox with the
// requesting sandbox's id, so a sandbox the DNS filter has started refusing
// gets no new names resolved by the gateway either: its request is denied with
// the filter's reason and nothing is dialed, while another sandbox is served.
func TestGatewayLookupsCountAgainstSandboxDNSLimits(t *testing.T) {
	pki := newTestPKI(t)
	cert := pki.leaf(t, "pypi.org")
	up := newUpstream(t, nil, nil)
	tlsUp := newUpstream(t, nil, &cert)
	res := &limitResolver{names: names("pypi.org"), refuse: map[string]bool{"sb-a": true}, perSB: map[string]int{}}
	log := &audittest.Log{}
	ts := newTwoSandboxes(t, policytest.Allow("pypi.org"), res, log)
	ts.dialer.allow(up.addr)
	ts.dialer.allow(tlsUp.addr)
	p, tp := strconv.Itoa(up.port), strconv.Itoa(tlsUp.port)
	for _, tc := range []struct {
		name, raw string
	}{
		{"plain HTTP", "GET http://pypi.org:" + p + "/ HTTP/1.1\r\nHost: pypi.org:" + p + "\r\n\r\n"},
		{"CONNECT", "CONNECT pypi.org:" + tp + " HTTP/1.1\r\nHost: pypi.org:" + tp + "\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dialsBefore, reqsBefore, connsBefore := ts.dials(), up.reqs.Load(), tlsUp.conns.Load()
			n := len(log.Records())
			resp, body := rawRequest(t, ts.addr["sb-a"], tc.raw)
			if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Airlock-Reason") != "dns_unique_name_limit" {
				t.Fatalf("sb-a: got %d %q, want 403 dns_unique_name_limit", resp.StatusCode, body)
			}
			// sb-b's record of the previous case may land after its response.
			var recs []audit.Record
			for _, r := range settledRecords(t, log, n, 1) {
				if r.Sandbox == "sb-a" {
					recs = append(recs, r)
				}
			}
			if len(recs) != 1 || recs[0].Decision != audit.DecisionDeny || !audittest.HasReason(recs[0], "dns_unique_name_limit") {
				t.Fatalf("sb-a records: got %+v, want one deny dns_unique_name_limit", recs)
			}
			if got := ts.dials() - dialsBefore; got != 0 {
				t.Fatalf("dials for sb-a: got %d, want 0", got)
			}
			if up.reqs.Load() != reqsBefore || tlsUp.conns.Load() != connsBefore {
				t.Fatal("the upstream saw sb-a's request")
			}
			if got := firstStatus(t, ts.addr["sb-b"], tc.raw); got != http.StatusOK {
				t.Fatalf("sb-b: got %d, want 200", got)
			}
		})
	}
	res.mu.Lock()
	defer res.mu.Unlock()
	if res.perSB["sb-a"] == 0 || res.perSB["sb-b"] == 0 {
		t.Fatalf("lookups per sandbox: got %v, want both charged", res.perSB)
	}
	if got := res.unscoped.Load(); got != 0 {
		t.Fatalf("lookups that bypassed the sandbox's limits: got %d, want 0", got)
	}
}

// firstStatus sends raw on a new connection and returns the status of the
// first response, reading no body (a CONNECT's 200 has none).
func firstStatus(t *testing.T, addr, raw string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, raw)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodHead})
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	return resp.StatusCode
}

// paramQuery is a query of n distinct parameters k000=v, k001=v, ...
func paramQuery(n int, keyPad int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("k%03d%s=v", i, strings.Repeat("x", keyPad))
	}
	return strings.Join(parts, "&")
}

// TestTooManyQueryParamsDeniedBeforePolicy: a request with
// more than max_query_params parameters is denied before policy sees it
// (fail closed: a query cut short could hide what a deny rule looks for), on
// the explicit proxy and on a transparent connection; one at the limit is
// decided as usual. The upstream sees nothing of the refused ones.
func TestTooManyQueryParamsDeniedBeforePolicy(t *testing.T) {
	up := newUpstream(t, nil, nil)
	dec := policytest.Allow("pypi.org")
	h := newHarness(t, dec, names("pypi.org"), nil, func(c *Config) { c.MaxQueryParams = 100 })
	h.allowUpstreams(up)
	h.origDst.Store(netip.MustParseAddrPort(up.addr))
	hp := "pypi.org:" + strconv.Itoa(up.port)
	for _, tc := range []struct {
		name   string
		listen string
		target string
		params int
		want   int
	}{
		{"explicit, at the limit", h.explicit, "http://" + hp, 100, http.StatusOK},
		{"explicit, one past", h.explicit, "http://" + hp, 101, http.StatusForbidden},
		{"explicit, empty parameters do not count", h.explicit, "http://" + hp, 100, http.StatusOK},
		{"transparent, one past", h.transp, "", 101, http.StatusForbidden},
		{"transparent, far past", h.transp, "", 1500, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := paramQuery(tc.params, 0)
			if strings.Contains(tc.name, "empty") {
				q = "&&" + strings.ReplaceAll(q, "&", "&&&") + "&"
			}
			n, reqs, decided := len(h.log.Records()), up.reqs.Load(), len(dec.Inputs())
			raw := "GET " + tc.target + "/p?" + q + " HTTP/1.1\r\nHost: " + hp + "\r\n\r\n"
			resp, body := rawRequest(t, tc.listen, raw)
			if resp.StatusCode != tc.want {
				t.Fatalf("got %d %q, want %d", resp.StatusCode, body, tc.want)
			}
			recs := settledRecords(t, h.log, n, 1)
			if len(recs) != 1 {
				t.Fatalf("records: got %d, want 1", len(recs))
			}
			if tc.want == http.StatusOK {
				return
			}
			if !audittest.HasReason(recs[0], ReasonTooManyParams) || recs[0].Decision != audit.DecisionDeny {
				t.Fatalf("record: got %+v, want a %s deny", recs[0], ReasonTooManyParams)
			}
			if got := len(dec.Inputs()) - decided; got != 0 {
				t.Fatalf("policy decisions: got %d, want 0 (denied before policy)", got)
			}
			if got := up.reqs.Load() - reqs; got != 0 {
				t.Fatalf("upstream requests: got %d, want 0", got)
			}
		})
	}
}

// TestAuditRecordsBounded: whatever a request carries, its
// record lists at most 64 query keys, each and the path cut to a bound, and
// messages cut too, so a hostile sandbox cannot make records huge.
func TestAuditRecordsBounded(t *testing.T) {
	up := newUpstream(t, nil, nil)
	h := newHarness(t, policytest.Allow("pypi.org").DenyPaths("/denied"), names("pypi.org"), nil)
	h.allowUpstreams(up)
	h.origDst.Store(netip.MustParseAddrPort(up.addr))
	hp := "pypi.org:" + strconv.Itoa(up.port)
	long := strings.Repeat("a", 40<<10)
	for _, tc := range []struct {
		name string
		raw  string
	}{
		{"many long query keys", "GET /p?" + paramQuery(250, 200) + " HTTP/1.1\r\nHost: " + hp + "\r\nConnection: close\r\n\r\n"},
		{"long path", "GET /" + long + " HTTP/1.1\r\nHost: " + hp + "\r\nConnection: close\r\n\r\n"},
		{"denied by policy", "GET /denied?" + paramQuery(200, 100) + " HTTP/1.1\r\nHost: " + hp + "\r\n\r\n"},
		{"unreadable request quoting its line", "GET/x" + long + "\r\nHost: " + hp + "\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := len(h.log.Records())
			c, err := net.Dial("tcp", h.transp)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			// A small first request: the transparent peek takes 16 KiB.
			fmt.Fprintf(c, "GET /first HTTP/1.1\r\nHost: %s\r\n\r\n", hp)
			br := bufio.NewReader(c)
			if resp, err := http.ReadResponse(br, nil); err != nil {
				t.Fatal(err)
			} else {
				io.Copy(io.Discard, resp.Body)
			}
			io.WriteString(c, tc.raw)
			io.Copy(io.Discard, br)
			recs := settledRecords(t, h.log, n, 2)
			if len(recs) < 2 {
				t.Fatalf("records: got %d, want at least 2", len(recs))
			}
			for _, r := range recs[1:] {
				b, _ := json.Marshal(r)
				if len(b) > 8<<10 {
					t.Fatalf("record of %d bytes, want at most 8 KiB: %.300s", len(b), b)
				}
				if len(r.Query) > maxRecordQueryKeys+1 {
					t.Fatalf("record lists %d query keys, want at most %d and a count", len(r.Query), maxRecordQueryKeys)
				}
			}
		})
	}
}

func TestQueryKeys(t *testing.T) {
	many := make([]string, 70)
	for i := range many {
		many[i] = fmt.Sprintf("k%d", i)
	}
	tests := []struct {
		name string
		q    string
		want []string
	}{
		{"values never", "a=1&b=secret", []string{"a", "b"}},
		{"duplicates once, first order", "b=1&a=2&b=3&a", []string{"b", "a"}},
		{"empty keys skipped", "&=x&&a=1&", []string{"a"}},
		{"past the map threshold", "a&b&c&d&e&f&g&h&i&j&a&j&k", []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"}},
		{"at most 64 and a count", strings.Join(many, "&") + "&k1&k69&k69", append(many[:64:64], "(+8 more parameters)")},
		{"long key cut", strings.Repeat("z", 100) + "=1", []string{strings.Repeat("z", 64) + "...[cut 36 bytes]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := queryKeys(tc.q); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// bareInjector is a secrets Injector with one binding for another sandbox:
// for sb-test it only checks requests (and so reads their bodies) before
// policy.
func bareInjector(t *testing.T) *secrets.Injector { return bareInjectorWith(t, "") }

// TestSlowBodyScanRefused: with secrets configured, the
// request body the placeholder check reads before policy must arrive within
// body_scan_timeout as a whole: a body that stalls, or dribbles a byte at a
// time (so no per-read idle timeout fires), is refused with 408 and audited,
// policy is never asked, and the upstream sees nothing.
func TestSlowBodyScanRefused(t *testing.T) {
	up := newUpstream(t, nil, nil)
	dec := policytest.Allow("pypi.org")
	h := newHarness(t, dec, names("pypi.org"), nil, func(c *Config) {
		c.Injector = bareInjector(t)
		c.BodyScanTimeout = 500 * time.Millisecond
	})
	h.allowUpstreams(up)
	h.origDst.Store(netip.MustParseAddrPort(up.addr))
	hp := "pypi.org:" + strconv.Itoa(up.port)
	for _, tc := range []struct {
		name   string
		listen string
		target string
		every  time.Duration // 0: send 10 bytes, then stall
	}{
		{"explicit, stalled body", h.explicit, "http://" + hp, 0},
		{"explicit, dribbled body", h.explicit, "http://" + hp, 50 * time.Millisecond},
		{"transparent, dribbled body", h.transp, "", 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, reqs, decided := len(h.log.Records()), up.reqs.Load(), len(dec.Inputs())
			c, err := net.Dial("tcp", tc.listen)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(c, "POST %s/upload HTTP/1.1\r\nHost: %s\r\nContent-Length: 1000\r\n\r\n0123456789", tc.target, hp)
			stop := make(chan struct{})
			defer close(stop)
			if tc.every > 0 {
				go func() {
					tk := time.NewTicker(tc.every)
					defer tk.Stop()
					for i := 0; i < 100; i++ {
						select {
						case <-stop:
							return
						case <-tk.C:
						}
						if _, err := c.Write([]byte("x")); err != nil {
							return
						}
					}
				}()
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer to a slow body: %v", err)
			}
			if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("X-Airlock-Reason") != ReasonBodyScanTimeout {
				t.Fatalf("got %d %s, want 408 %s", resp.StatusCode, resp.Header.Get("X-Airlock-Reason"), ReasonBodyScanTimeout)
			}
			recs := settledRecords(t, h.log, n, 1)
			if len(recs) != 1 || recs[0].Decision != audit.DecisionDeny || !audittest.HasReason(recs[0], ReasonBodyScanTimeout) {
				t.Fatalf("records: got %+v, want one %s deny", recs, ReasonBodyScanTimeout)
			}
			if got := len(dec.Inputs()) - decided; got != 0 {
				t.Fatalf("policy decisions: got %d, want 0", got)
			}
			if got := up.reqs.Load() - reqs; got != 0 {
				t.Fatalf("upstream requests: got %d, want 0", got)
			}
		})
	}
	t.Run("a body in time still goes through", func(t *testing.T) {
		resp, body := rawRequest(t, h.explicit, "POST http://"+hp+"/upload HTTP/1.1\r\nHost: "+hp+"\r\nContent-Length: 5\r\n\r\nhello")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("got %d %q, want 200", resp.StatusCode, body)
		}
	})
}

// connUpstream is an HTTP upstream that records which TCP connection (the
// gateway's source address) served each request.
type connUpstream struct {
	*upstream
	mu   sync.Mutex
	seen []string // remote address per request, in order
}

func newConnUpstream(t *testing.T) *connUpstream {
	cu := &connUpstream{}
	cu.upstream = newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cu.mu.Lock()
		cu.seen = append(cu.seen, r.RemoteAddr)
		cu.mu.Unlock()
		fmt.Fprintf(w, "served on %s", r.RemoteAddr)
	}), nil)
	return cu
}

func (cu *connUpstream) last() string {
	cu.mu.Lock()
	defer cu.mu.Unlock()
	return cu.seen[len(cu.seen)-1]
}

// TestUpstreamConnectionsNotSharedAcrossSandboxes: two
// sandboxes request the same upstream in turn; no upstream connection that
// carried one sandbox's exchange ever carries the other's. Each sandbox still
// reuses its own kept-alive connections, and StopSandbox closes the idle
// upstream connections of the stopped sandbox.
func TestUpstreamConnectionsNotSharedAcrossSandboxes(t *testing.T) {
	up := newConnUpstream(t)
	ts := newTwoSandboxes(t, policytest.Allow("pypi.org"), &fakeResolver{names: names("pypi.org")}, &audittest.Log{})
	ts.dialer.allow(up.addr)
	hp := "pypi.org:" + strconv.Itoa(up.port)
	raw := "GET http://" + hp + "/ HTTP/1.1\r\nHost: " + hp + "\r\n\r\n"
	served := map[string]map[string]bool{"sb-a": {}, "sb-b": {}}
	for i := 0; i < 6; i++ {
		for _, sb := range []string{"sb-a", "sb-b"} {
			// One request per client connection: its upstream connection goes
			// back to the pool when the client connection closes.
			if resp, body := rawRequest(t, ts.addr[sb], raw); resp.StatusCode != http.StatusOK {
				t.Fatalf("%s request %d: got %d %q", sb, i, resp.StatusCode, body)
			}
			served[sb][up.last()] = true
			time.Sleep(20 * time.Millisecond) // the release after the client's close
		}
	}
	for c := range served["sb-a"] {
		if served["sb-b"][c] {
			t.Fatalf("upstream connection %s carried both sandboxes' requests (sb-a %v, sb-b %v)", c, served["sb-a"], served["sb-b"])
		}
	}
	if got := up.conns.Load(); got > 4 {
		t.Fatalf("upstream connections for 12 sequential requests: got %d, want each sandbox to reuse its own", got)
	}
	open := up.open.Load()
	ts.g.StopSandbox("sb-a")
	deadline := time.Now().Add(5 * time.Second)
	for up.open.Load() >= open && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := up.open.Load(); got >= open {
		t.Fatalf("open upstream connections after StopSandbox(sb-a): got %d, want fewer than %d", got, open)
	}
	if resp, _ := rawRequest(t, ts.addr["sb-b"], raw); resp.StatusCode != http.StatusOK {
		t.Fatalf("sb-b after sb-a stopped: got %d", resp.StatusCode)
	}
}

// TestBodyScanBudgetRefusedAsDenial: a sandbox whose
// placeholder scans hold its whole body-scan budget gets 429 with the secrets
// package's reason, as a denial, before policy; nothing reaches the upstream.
func TestBodyScanBudgetRefusedAsDenial(t *testing.T) {
	up := newUpstream(t, nil, nil)
	dec := policytest.Allow("pypi.org")
	inj := bareInjectorWith(t, "max_body_scan: 65536\nmax_body_scan_per_sandbox: 131072\n")
	h := newHarness(t, dec, names("pypi.org"), nil, func(c *Config) {
		c.Injector = inj
		c.BodyScanTimeout = 30 * time.Second // the held scans must outlive the test
	})
	h.allowUpstreams(up)
	hp := "pypi.org:" + strconv.Itoa(up.port)
	send := func(body int) net.Conn {
		c, err := net.Dial("tcp", h.explicit)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "POST http://%s/upload HTTP/1.1\r\nHost: %s\r\nContent-Length: 200000\r\n\r\n", hp, hp)
		c.Write(bytes.Repeat([]byte("x"), body))
		return c
	}
	n, decided := len(h.log.Records()), len(dec.Inputs())
	// Two requests send part of their bodies and stall: their scans wait,
	// holding 64 KiB of buffer each, the sandbox's whole budget.
	send(40000)
	send(40000)
	time.Sleep(200 * time.Millisecond) // let both scans take their buffers (not a timing assertion)
	// The third sends its whole body (net/http reads what is left of a body
	// the handler did not read before it answers).
	c := send(200000)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer past the body-scan budget: %v", err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Airlock-Reason") != secrets.CodeBodyScanBusy {
		t.Fatalf("got %d %s, want 429 %s", resp.StatusCode, resp.Header.Get("X-Airlock-Reason"), secrets.CodeBodyScanBusy)
	}
	recs := settledRecords(t, h.log, n, 1)
	if len(recs) != 1 || recs[0].Decision != audit.DecisionDeny || !audittest.HasReason(recs[0], secrets.CodeBodyScanBusy) {
		t.Fatalf("records: got %+v, want one %s deny", recs, secrets.CodeBodyScanBusy)
	}
	if got := len(dec.Inputs()) - decided; got != 0 {
		t.Fatalf("policy decisions: got %d, want 0 (the scans run before policy)", got)
	}
	if got := up.reqs.Load(); got != 0 {
		t.Fatalf("upstream requests: got %d, want 0", got)
	}
}

// bareInjectorWith is bareInjector with extra top-level secrets-file lines.
func bareInjectorWith(t *testing.T, extra string) *secrets.Injector {
	t.Helper()
	valueFile := filepath.Join(t.TempDir(), "v.txt")
	if err := os.WriteFile(valueFile, []byte(secretCanary+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := secrets.Parse([]byte(extra + fmt.Sprintf(`secrets:
  - id: api
    file: %s
bindings:
  - secret: api
    sandboxes: {ids: [sb-nobody]}
    host: api.bound.example
    template: "Bearer {{value}}"
`, valueFile)))
	if err != nil {
		t.Fatal(err)
	}
	inj, err := secrets.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return inj
}
