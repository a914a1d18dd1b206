package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// Red-team battery for the gateway that all sandboxes share: what one sandbox
// does must not reach past the limits set for it, nor touch another sandbox's
// traffic (issue 16 items 4, 5 and 6).

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

// TestGatewayLookupsCountAgainstSandboxDNSLimits (issue 16 item 4): the
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
	log := &memLog{}
	ts := newTwoSandboxes(t, allowHosts([]string{"pypi.org"}, nil), res, log)
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
			n := len(log.all())
			resp, body := rawRequest(t, ts.addr["sb-a"], tc.raw)
			if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Airlock-Reason") != "dns_unique_name_limit" {
				t.Fatalf("sb-a: got %d %q, want 403 dns_unique_name_limit", resp.StatusCode, body)
			}
			recs := settledRecords(t, log, n, 1)
			if len(recs) != 1 || recs[0].Decision != "deny" || !hasReason(recs[0], "dns_unique_name_limit") || recs[0].Sandbox != "sb-a" {
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
