package dnsfilter

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
)

// sandboxNamer mirrors gateway.SandboxNamer (dnsfilter must never import
// gateway): the gateway type-asserts it on the Resolver it is given.
type sandboxNamer interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	NameFor(sandboxID string, addr netip.Addr) (string, bool)
}

var _ sandboxNamer = (*Resolver)(nil)

var memoZone = map[string][]string{
	"pypi.org.":         {"pypi.org. 300 IN A 151.101.0.223", "pypi.org. 300 IN A 151.101.64.223"},
	"www.pypi.org.":     {"www.pypi.org. 300 IN CNAME pypi.org.", "pypi.org. 300 IN A 151.101.0.223"},
	"files.pypi.org.":   {"files.pypi.org. 5 IN A 151.101.1.1"}, // clamped up to MinTTL, 30 s
	"a.pypi.org.":       {"a.pypi.org. 300 IN A 151.101.7.7"},
	"b.pypi.org.":       {"b.pypi.org. 60 IN A 151.101.7.7"}, // the same address, a shorter TTL
	"rebind.pypi.org.":  {"rebind.pypi.org. 300 IN A 10.0.0.5", "rebind.pypi.org. 300 IN A 151.101.9.9"},
	"six.pypi.org.":     {"six.pypi.org. 300 IN AAAA 2a04:4e42::223"},
	"evil.example.com.": {"evil.example.com. 300 IN A 1.2.3.4"},
}

// serveAt makes the env's Filter serve one more sandbox, id, and returns its
// UDP address.
func (e *env) serveAt(t *testing.T, id string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.f.ServeSandbox(policy.Sandbox{ID: id}, nil, pc, nil); err != nil {
		t.Fatalf("ServeSandbox %s: %v", id, err)
	}
	return pc.LocalAddr().String()
}

// askAt asks name (A) at the DNS address addr and fails unless it is answered.
func askAt(t *testing.T, addr, name string, qtype uint16) {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	r, _, err := (&dns.Client{Timeout: 5 * time.Second}).Exchange(m, addr)
	if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
		t.Fatalf("query %s at %s: got %v, %v; want an answer", name, addr, r, err)
	}
}

// TestNameFor: the filter remembers, per sandbox,
// which allowed name it answered with which address, for the TTL it sent.
// Addresses it never sent (a denied name, a rebinding answer it dropped),
// sent to another sandbox, or past their TTL have no name.
func TestNameFor(t *testing.T) {
	var skew atomic.Int64 // added to the clock NameFor reads
	up := startUpstream(t, records(memoZone))
	e := newEnvWith(t, Config{MinTTL: 30 * time.Second, MaxTTL: time.Hour, IPv6: true}, up, policytest.AllowUnder("pypi.org"), func(f *Filter) {
		f.res.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	})
	sb2 := e.serveAt(t, "sb-2")
	e.askOK(t, "pypi.org")
	e.askOK(t, "rebind.pypi.org")
	if r := e.ask(t, "udp", "evil.example.com.", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Fatalf("evil.example.com: got %s, want NXDOMAIN", rcodeString(r.Rcode))
	}
	askAt(t, e.udp, "six.pypi.org.", dns.TypeAAAA)

	type want struct {
		name string
		ok   bool
	}
	check := func(t *testing.T, sandbox, addr string, w want) {
		t.Helper()
		name, ok := e.f.NameFor(sandbox, netip.MustParseAddr(addr))
		if name != w.name || ok != w.ok {
			t.Errorf("NameFor(%s, %s): got %q %v, want %q %v", sandbox, addr, name, ok, w.name, w.ok)
		}
		// The gateway holds the Resolver: it answers the same.
		rn, rok := e.f.Resolver().NameFor(sandbox, netip.MustParseAddr(addr))
		if rn != name || rok != ok {
			t.Errorf("Resolver().NameFor(%s, %s): got %q %v, want the Filter's %q %v", sandbox, addr, rn, rok, name, ok)
		}
	}
	tests := []struct {
		name    string
		sandbox string
		addr    string
		want    want
	}{
		{"answered", "sb-1", "151.101.0.223", want{"pypi.org", true}},
		{"answered, second address", "sb-1", "151.101.64.223", want{"pypi.org", true}},
		{"answered, IPv4-mapped form", "sb-1", "::ffff:151.101.0.223", want{"pypi.org", true}},
		{"answered AAAA", "sb-1", "2a04:4e42::223", want{"six.pypi.org", true}},
		{"kept half of a rebinding answer", "sb-1", "151.101.9.9", want{"rebind.pypi.org", true}},
		{"dropped half of a rebinding answer", "sb-1", "10.0.0.5", want{}},
		{"denied name's address", "sb-1", "1.2.3.4", want{}},
		{"never asked", "sb-1", "151.101.200.1", want{}},
		{"answered to another sandbox", "sb-2", "151.101.0.223", want{}},
		{"unknown sandbox", "sb-none", "151.101.0.223", want{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { check(t, tt.sandbox, tt.addr, tt.want) })
	}

	t.Run("the most recent answer wins", func(t *testing.T) {
		e.askOK(t, "www.pypi.org") // CNAME to pypi.org, same address
		check(t, "sb-1", "151.101.0.223", want{"www.pypi.org", true})
		check(t, "sb-1", "151.101.64.223", want{"pypi.org", true}) // not in www's answer
		e.askOK(t, "pypi.org")
		check(t, "sb-1", "151.101.0.223", want{"pypi.org", true})
	})

	t.Run("until the TTL sent", func(t *testing.T) {
		e.askOK(t, "files.pypi.org") // 30 s after clamping
		skew.Store(int64(25 * time.Second))
		check(t, "sb-1", "151.101.1.1", want{"files.pypi.org", true})
		skew.Store(int64(31 * time.Second))
		check(t, "sb-1", "151.101.1.1", want{})
		check(t, "sb-1", "151.101.0.223", want{"pypi.org", true}) // 300 s
		skew.Store(0)
	})

	t.Run("a newer name with a shorter TTL forgets the older", func(t *testing.T) {
		e.askOK(t, "a.pypi.org")
		e.askOK(t, "b.pypi.org")
		check(t, "sb-1", "151.101.7.7", want{"b.pypi.org", true})
		skew.Store(int64(61 * time.Second))
		check(t, "sb-1", "151.101.7.7", want{}) // a's 300 s do not come back: fail closed
		skew.Store(0)
	})

	t.Run("forgotten when the sandbox stops", func(t *testing.T) {
		askAt(t, sb2, "pypi.org.", dns.TypeA)
		check(t, "sb-2", "151.101.0.223", want{"pypi.org", true})
		e.f.StopSandbox("sb-2")
		check(t, "sb-2", "151.101.0.223", want{})
		e.f.memo.mu.RLock()
		n := len(e.f.memo.sbs)
		e.f.memo.mu.RUnlock()
		if n != 1 {
			t.Errorf("memo holds %d sandboxes after StopSandbox, want 1 (sb-1)", n)
		}
		// Served again under the same id: nothing of the old one is known.
		e.serveAt(t, "sb-2")
		check(t, "sb-2", "151.101.0.223", want{})
		check(t, "sb-1", "151.101.0.223", want{"pypi.org", true})
	})
}

// memoInvariants fails unless the memo's count, maps and both orders agree.
func memoInvariants(t *testing.T, m *nameMemo) {
	t.Helper()
	total := 0
	for s, sb := range m.sbs {
		n := 0
		for e := sb.own.head; e != nil; e = e.own.next {
			if sb.m[e.addr] != e || e.owner != s {
				t.Fatalf("entry %v is in its sandbox's order but not its map", e.addr)
			}
			n++
		}
		if n != len(sb.m) || n == 0 || n > m.perSandbox {
			t.Fatalf("sandbox order holds %d entries, map %d (bound %d)", n, len(sb.m), m.perSandbox)
		}
		total += n
	}
	n := 0
	for e := m.all.head; e != nil; e = e.all.next {
		n++
	}
	if n != total || n != m.count || n > m.total {
		t.Fatalf("global order %d, sandboxes %d, count %d (bound %d)", n, total, m.count, m.total)
	}
}

// TestNameMemoBounds: past the per-sandbox or the total bound the oldest
// entries go (an answer again makes an entry the newest), and what is gone
// has no name.
func TestNameMemoBounds(t *testing.T) {
	m := newNameMemo(2, 3)
	s1, s2 := &sandboxServer{}, &sandboxServer{}
	now := time.Now()
	later := now.Add(time.Minute)
	put := func(s *sandboxServer, name, addr string) {
		m.put(s, name, []memoAddr{{addr: netip.MustParseAddr(addr), expires: later}})
		memoInvariants(t, m)
	}
	has := func(s *sandboxServer, addr, want string) {
		t.Helper()
		got, ok := m.get(s, netip.MustParseAddr(addr), now)
		if want == "" && ok || want != "" && got != want {
			t.Errorf("get %s: got %q %v, want %q", addr, got, ok, want)
		}
	}
	put(s1, "a1", "192.0.2.1")
	put(s1, "a2", "192.0.2.2")
	put(s1, "a3", "192.0.2.3") // per-sandbox bound: a1 goes
	has(s1, "192.0.2.1", "")
	has(s1, "192.0.2.3", "a3")
	put(s2, "b1", "192.0.2.11")
	put(s2, "b2", "192.0.2.12") // total bound: the oldest of all, a2, goes
	has(s1, "192.0.2.2", "")
	has(s2, "192.0.2.11", "b1")
	put(s1, "a3-again", "192.0.2.3") // answered again: now the newest
	put(s2, "b3", "192.0.2.13")      // s2's bound: b1 goes
	has(s2, "192.0.2.11", "")
	put(s1, "a4", "192.0.2.4") // total bound: b2 (older than a3-again) goes
	has(s2, "192.0.2.12", "")
	has(s1, "192.0.2.3", "a3-again")
	has(s1, "192.0.2.4", "a4")
	has(s2, "192.0.2.13", "b3")
	// The same address in two sandboxes is two entries.
	has(s2, "192.0.2.3", "")
	m.forget(s1)
	memoInvariants(t, m)
	has(s1, "192.0.2.3", "")
	has(s2, "192.0.2.13", "b3")
	if m.count != 1 {
		t.Errorf("count after forget: got %d, want 1", m.count)
	}
}

func TestNameMemoConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"defaults", Config{}, ""},
		{"negative per sandbox", Config{NameMemoPerSandbox: -1}, "name_memo_per_sandbox"},
		{"negative total", Config{NameMemoTotal: -1}, "name_memo_total"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Upstreams = []string{"127.0.0.1:53"}
			c, err := tt.cfg.compile()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("compile: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("compile: got %v, want an error naming %s", err, tt.wantErr)
			case tt.wantErr == "" && (c.NameMemoPerSandbox != DefaultNameMemoPerSandbox || c.NameMemoTotal != DefaultNameMemoTotal):
				t.Errorf("defaults: got %d/%d", c.NameMemoPerSandbox, c.NameMemoTotal)
			}
		})
	}
}

// BenchmarkNameFor is what the gateway pays per captured raw TCP connection
// to learn its name (a hit and a miss, with the memo full: 16 sandboxes of
// 4096 addresses), beside a loopback TCP connect measured in the same run as
// the reference.
func BenchmarkNameFor(b *testing.B) {
	up := startUpstream(b, nil)
	f, err := New(Config{Upstreams: []string{up.addr}}, policytest.AllowUnder("pypi.org"), audittest.Discard{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	var target *sandboxServer
	for i := range 16 {
		s := newSandboxServer(f, policy.Sandbox{ID: "sb-" + strconv.Itoa(i)}, nil)
		f.sandboxes[s.sb.ID] = s
		target = s
		for j := range DefaultNameMemoPerSandbox {
			a := netip.AddrFrom4([4]byte{198, 18, byte(j >> 8), byte(j)})
			f.memo.put(s, "host"+strconv.Itoa(j)+".example", []memoAddr{{addr: a, expires: time.Now().Add(time.Hour)}})
		}
	}
	hit := netip.AddrFrom4([4]byte{198, 18, 3, 7})
	miss := netip.MustParseAddr("203.0.113.9")
	b.Run("hit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := f.NameFor(target.sb.ID, hit); !ok {
				b.Fatal("miss")
			}
		}
	})
	b.Run("miss", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := f.NameFor(target.sb.ID, miss); ok {
				b.Fatal("hit")
			}
		}
	})
	b.Run("reference_loopback_connect", func(b *testing.B) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		for b.Loop() {
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
}
