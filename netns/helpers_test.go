package netns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/dnsfilter"
	"github.com/airlock-dev/airlock/gateway"
	"github.com/airlock-dev/airlock/identity"
	"github.com/airlock-dev/airlock/netns/netnstest"
	"github.com/airlock-dev/airlock/policy/policytest"
)

func TestMain(m *testing.M) {
	if os.Geteuid() == 0 {
		for _, r := range netnstest.RemoveStale(DefaultRunDir, DefaultStateDir) {
			fmt.Fprintln(os.Stderr, "removed stale", r)
		}
	}
	os.Exit(m.Run())
}

// teardownAll tears down every sandbox m manages, then closes m (which
// removes its pool).
func teardownAll(ctx context.Context, m *Manager) error {
	var errs []error
	for _, id := range m.IDs() {
		if err := m.Teardown(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(append(errs, m.Close())...)
}

// poolReady counts the pool namespaces ready now.
func poolReady(m *Manager) int {
	if m.pool == nil {
		return 0
	}
	return len(m.pool)
}

// testServer is the netns.Server for the root tests: the real gateway and the
// real DNS filter, deciding with a policytest.Decider that allows exactly the
// hosts given (and DNS questions for them). The gateway resolves through the
// filter's resolver (the fake internet's DNS) and dials through a recording
// dialer that refuses every address outside the fake internet's subnet.
type testServer struct {
	gw  *gateway.Gateway
	dns *dnsfilter.Filter

	dialed  atomic.Int64
	refused atomic.Int64

	dialMu sync.Mutex
	dials  []string // every address the gateway tried to dial, allowed or not

	mu  sync.Mutex
	sbs map[string]bool
}

func newTestServer(t testing.TB, upstream string, subnet netip.Prefix, allow []string, al audit.Logger) *testServer {
	t.Helper()
	dec := policytest.Allow(allow...)
	logger := slog.New(slog.DiscardHandler)
	f, err := dnsfilter.New(dnsfilter.Config{
		Upstreams:  []string{upstream},
		AllowCIDRs: []string{"198.18.0.0/15"},
		Timeout:    2 * time.Second,
	}, dec, al, logger)
	if err != nil {
		t.Fatalf("dnsfilter.New: %v", err)
	}
	s := &testServer{dns: f, sbs: map[string]bool{}}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		s.dialMu.Lock()
		s.dials = append(s.dials, addr)
		s.dialMu.Unlock()
		ap, err := netip.ParseAddrPort(addr)
		if err != nil || !subnet.Contains(ap.Addr()) {
			s.refused.Add(1)
			return nil, fmt.Errorf("test dialer refuses %s", addr)
		}
		s.dialed.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	gw, err := gateway.New(gateway.Config{
		AllowCIDRs:  []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")},
		DialFunc:    dial,
		PeekTimeout: time.Second,
	}, dec, al, f.Resolver(), logger)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	s.gw = gw
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		gw.Shutdown(ctx)
		f.Shutdown(ctx)
	})
	return s
}

var _ Server = (*testServer)(nil)

// The gateway charges its own lookups for a sandbox to that sandbox's DNS
// limits when its Resolver is a gateway.SandboxResolver, as dnsfilter's is.
// (dnsfilter must never import gateway, so the check lives here, where both
// are glued together as package daemon does.)
var _ gateway.SandboxResolver = (*dnsfilter.Resolver)(nil)
var _ gateway.SandboxNamer = (*dnsfilter.Resolver)(nil)

func (s *testServer) Serve(sb identity.Sandbox, own []netip.Addr, ls Listeners) error {
	if err := s.dns.ServeSandbox(sb, own, ls.DNSUDP, ls.DNSTCP); err != nil {
		return err
	}
	if err := s.gw.ServeSandbox(sb, ls.Explicit, ls.Transparent); err != nil {
		s.dns.StopSandbox(sb.ID)
		return err
	}
	s.mu.Lock()
	s.sbs[sb.ID] = true
	s.mu.Unlock()
	return nil
}

func (s *testServer) Stop(id string) {
	s.gw.StopSandbox(id)
	s.dns.StopSandbox(id)
	s.mu.Lock()
	delete(s.sbs, id)
	s.mu.Unlock()
}

// dialLog returns every address the gateway tried to dial so far.
func (s *testServer) dialLog() []string {
	s.dialMu.Lock()
	defer s.dialMu.Unlock()
	return append([]string(nil), s.dials...)
}

func (s *testServer) served() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sbs)
}

// nsExec runs argv inside the namespace at path (via nsenter) with a bounded
// time and returns its combined output.
func nsExec(t testing.TB, path string, timeout time.Duration, argv ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + path, "--"}, argv...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// fdCount counts this process's open file descriptors.
func fdCount(t testing.TB) int {
	t.Helper()
	// io.Copy between TCP connections caches splice pipes in a sync.Pool that
	// only a GC releases; collect twice so they are not counted as leaks.
	runtime.GC()
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

var errInjected = fmt.Errorf("injected failure")
