package dnsfilter

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/policy/policytest"
)

// waitDone fails the test when the sandbox's UDP workers have not all returned
// (a hang detector, not a timing assertion).
func waitDone(t *testing.T, u *udpServer) {
	t.Helper()
	select {
	case <-u.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("udp workers still running: %d", u.workers.Load())
	}
	if n := u.workers.Load(); n != 0 {
		t.Fatalf("workers after stop: got %d, want 0", n)
	}
}

func sandboxOf(t *testing.T, f *Filter, id string) *sandboxServer {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sandboxes[id]
	if s == nil || s.udp == nil {
		t.Fatalf("sandbox %q has no udp server", id)
	}
	return s
}

func TestUDPWorkersStop(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(*env)
	}{
		{"StopSandbox", func(e *env) { e.f.StopSandbox("sb-1") }},
		{"Shutdown", func(e *env) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := e.f.Shutdown(ctx); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startUpstream(t, records(testZone))
			e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
			u := sandboxOf(t, e.f, "sb-1").udp
			if r := e.ask(t, "udp", "pypi.org.", dns.TypeA); r.Rcode != dns.RcodeSuccess {
				t.Fatalf("before stop: got rcode %s, want NOERROR", dns.RcodeToString[r.Rcode])
			}
			tc.stop(e)
			waitDone(t, u)
			// The socket is closed: nothing answers any more.
			m := new(dns.Msg)
			m.SetQuestion("pypi.org.", dns.TypeA)
			pkt, err := m.Pack()
			if err != nil {
				t.Fatal(err)
			}
			before := up.count("pypi.org.")
			if r := e.rawUDP(t, pkt, 300*time.Millisecond); r != nil {
				t.Fatalf("reply after stop: %d bytes", len(r))
			}
			if n := up.count("pypi.org."); n != before {
				t.Fatalf("upstream queries after stop: got %d, want %d", n, before)
			}
		})
	}
}

// A query waiting on a slow upstream must not hold up the sandbox's other
// queries: the workers that are busy start spares.
func TestUDPSlowUpstreamDoesNotBlock(t *testing.T) {
	release := make(chan struct{})
	zone := records(testZone)
	up := startUpstream(t, func(network string, req *dns.Msg) *dns.Msg {
		if strings.HasSuffix(req.Question[0].Name, ".slow.pypi.org.") {
			select {
			case <-release:
			case <-time.After(20 * time.Second):
			}
		}
		return zone(network, req)
	})
	e := newEnv(t, Config{Timeout: 10 * time.Second}, up, policytest.AllowUnder("pypi.org"))
	t.Cleanup(func() { close(release) })
	u := sandboxOf(t, e.f, "sb-1").udp
	if r := e.ask(t, "udp", "pypi.org.", dns.TypeA); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("warm-up: got rcode %s, want NOERROR", dns.RcodeToString[r.Rcode])
	}
	// More slow questions than there are base workers, each a distinct name so
	// singleflight cannot fold them.
	slow := u.base + 2
	conns := make([]net.Conn, slow)
	for i := range slow {
		c, err := net.Dial("udp", e.udp)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		m := new(dns.Msg)
		m.SetQuestion(string(rune('a'+i))+".slow.pypi.org.", dns.TypeA)
		pkt, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(pkt); err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	// Wait until every base worker is held by a slow lookup.
	waiting := func() int {
		n := 0
		for _, q := range up.queries() {
			if strings.HasSuffix(q.name, "slow.pypi.org.") {
				n++
			}
		}
		return n
	}
	for i := 0; waiting() < u.base; i++ {
		if i == 1000 {
			t.Fatalf("slow lookups at the upstream: got %d, want at least %d", waiting(), u.base)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The cached name still answers while the slow ones wait.
	if r := e.ask(t, "udp", "pypi.org.", dns.TypeA); r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
		t.Fatalf("cached name during slow lookups: got rcode %s, %d answers; want NOERROR with answers",
			dns.RcodeToString[r.Rcode], len(r.Answer))
	}
	if n := u.workers.Load(); n > udpMaxWorkers {
		t.Fatalf("workers: got %d, want at most %d", n, udpMaxWorkers)
	}
}

// Spares a burst started exit once the burst is over, and Shutdown waits for
// them too.
func TestUDPSparesBounded(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{RateLimit: 1e6, RateBurst: 1 << 20}, up, policytest.AllowUnder("pypi.org"))
	s := sandboxOf(t, e.f, "sb-1")
	u := s.udp
	m := new(dns.Msg)
	m.SetQuestion("pypi.org.", dns.TypeA)
	pkt, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("udp", e.udp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const burst = 500
	for range burst {
		if _, err := c.Write(pkt); err != nil {
			t.Fatal(err)
		}
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 1500)
	got := 0
	for got < burst {
		if _, err := c.Read(buf); err != nil {
			break // the kernel may drop some of a burst; the count below is a floor
		}
		got++
	}
	if got == 0 {
		t.Fatal("no replies to the burst")
	}
	if n := u.workers.Load(); n > udpMaxWorkers || n < int32(u.base) {
		t.Fatalf("workers after burst: got %d, want %d..%d", n, u.base, udpMaxWorkers)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.f.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	waitDone(t, u)
}
