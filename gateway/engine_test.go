package gateway

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
)

// TestRealPolicyEngine runs the gateway with policy.New: an allowed host passes,
// anything else gets the engine's deny reason, audited with its revision.
func TestRealPolicyEngine(t *testing.T) {
	// A generous deadline: the default 100ms is a production bound a -race
	// run on a loaded machine can pass (a fail-closed deny this test does not
	// expect).
	eng, err := policy.New(policy.Config{AllowHosts: []string{"pypi.org:*"}, Presets: []string{policy.PresetNone}, EvalTimeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t, nil, nil)
	h := newHarness(t, eng, names("pypi.org", "evil.example"), nil)
	h.allowUpstreams(up)
	resp, body := rawRequest(t, h.explicit, fmt.Sprintf("GET http://pypi.org:%d/simple/ HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", up.port, up.port))
	if resp.StatusCode != 200 {
		t.Fatalf("allowed host: got %d %q", resp.StatusCode, body)
	}
	before := up.conns.Load()
	resp, body = rawRequest(t, h.explicit, fmt.Sprintf("CONNECT evil.example:%d HTTP/1.1\r\n\r\n", up.port))
	if resp.StatusCode != 403 || up.conns.Load() != before {
		t.Fatalf("denied host: got %d %q, upstream conns +%d", resp.StatusCode, body, up.conns.Load()-before)
	}
	id := resp.Header.Get("X-Airlock-Decision")
	r := h.log.Wait(t, "engine deny", func(r audit.Record) bool { return r.ID == id })
	if r.Decision != audit.DecisionDeny || r.PolicyRev == "" || len(r.Reasons) == 0 {
		t.Fatalf("audit: got %+v, want a deny with the engine's revision and reasons", r)
	}
}

// TestShutdownDrains: an idle kept-alive connection is closed at once, and
// Shutdown returns without waiting for its deadline.
func TestShutdownDrains(t *testing.T) {
	up := newUpstream(t, nil, nil)
	h := newHarness(t, policytest.Allow("pypi.org"), map[string][]netip.Addr{"pypi.org": lo}, nil)
	h.allowUpstreams(up)
	c := h.proxyClient(nil)
	resp, err := c.Get(fmt.Sprintf("http://pypi.org:%d/", up.port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := contextWithTimeout(10 * time.Second)
		defer cancel()
		done <- h.g.Shutdown(ctx)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("shutdown did not close an idle keep-alive connection")
	}
	if _, err := net.DialTimeout("tcp", h.explicit, time.Second); err == nil {
		t.Fatal("still accepting after shutdown")
	}
}

func TestHeaderLimit(t *testing.T) {
	up := newUpstream(t, nil, nil)
	h := newHarness(t, policytest.Allow("pypi.org"), names("pypi.org"), nil, func(c *Config) { c.MaxHeaderBytes = 2048 })
	h.allowUpstreams(up)
	raw := fmt.Sprintf("GET http://pypi.org:%d/ HTTP/1.1\r\nHost: pypi.org:%d\r\nX-Big: %s\r\n\r\n", up.port, up.port, strings.Repeat("a", 4096))
	resp, _ := rawRequest(t, h.explicit, raw)
	if resp.StatusCode != http.StatusForbidden || up.reqs.Load() != 0 {
		t.Fatalf("oversized header: got %d, upstream %d", resp.StatusCode, up.reqs.Load())
	}
}

func TestLeafCache(t *testing.T) {
	pki := newTestPKI(t)
	ca, err := LoadCA(pki.mitmCert, pki.mitmKey)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := newLeafCache(ca, 24*time.Hour, 2)
	if err != nil {
		t.Fatal(err)
	}
	a1, _ := lc.get("pypi.org")
	a2, _ := lc.get("pypi.org")
	if a1 != a2 {
		t.Fatal("second get minted again")
	}
	if got := a1.Leaf.NotAfter.Sub(a1.Leaf.NotBefore); got > MaxLeafTTL+time.Hour {
		t.Fatalf("leaf validity %v exceeds %v", got, MaxLeafTTL)
	}
	if err := a1.Leaf.VerifyHostname("pypi.org"); err != nil {
		t.Fatal(err)
	}
	ip, _ := lc.get("198.18.0.1")
	if err := ip.Leaf.VerifyHostname("198.18.0.1"); err != nil {
		t.Fatal(err)
	}
	lc.get("c.example") // evicts pypi.org (size 2)
	if b, _ := lc.get("pypi.org"); b == a1 {
		t.Fatal("LRU did not evict")
	}
	if _, _, err := InitCA(t.TempDir(), false, time.Now()); err != nil {
		t.Fatal(err)
	}
}
