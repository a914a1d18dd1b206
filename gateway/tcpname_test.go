package gateway

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
)

// namingResolver is a SandboxNamer: fakeResolver's names for the gateway's
// own lookups, plus the answers each sandbox was given (sandbox -> address ->
// name until an expiry), as dnsfilter remembers them.
type namingResolver struct {
	fakeResolver
	mu       sync.Mutex
	answered map[string]map[netip.Addr]namedAddr
	now      time.Time
	asked    []string // "sandbox addr" per NameFor call
}

type namedAddr struct {
	name    string
	expires time.Time
}

var _ SandboxNamer = (*namingResolver)(nil)

func (r *namingResolver) LookupForSandbox(ctx context.Context, _, host string) ([]netip.Addr, error) {
	return r.LookupNetIP(ctx, "ip", host)
}

// answer records that sandbox was answered name -> addr for ttl.
func (r *namingResolver) answer(sandbox, name, addr string, ttl time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.answered[sandbox] == nil {
		r.answered[sandbox] = map[netip.Addr]namedAddr{}
	}
	r.answered[sandbox][netip.MustParseAddr(addr)] = namedAddr{name: name, expires: r.now.Add(ttl)}
}

func (r *namingResolver) NameFor(sandbox string, addr netip.Addr) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, sandbox+" "+addr.String())
	e, ok := r.answered[sandbox][addr]
	if !ok || !r.now.Before(e.expires) {
		return "", false
	}
	return e.name, true
}

// tcpNamePolicy allows kind tcp to db.example, meta.example and priv.example on dbPort
// only (by name: an address literal matches nothing).
func tcpNamePolicy(dbPort int) *policytest.Decider {
	return policytest.Func(func(in *policy.Input) policy.Decision {
		h, p := in.Destination.Host, in.Destination.Port
		if in.Kind == policy.KindTCP && in.Destination.Protocol == "tcp" && p == dbPort && (h == "db.example" || h == "meta.example" || h == "priv.example") {
			return policytest.Allowed()
		}
		return policytest.Denied(policytest.ReasonNotAllowed)
	})
}

// rawExchange connects to the transparent listener as a sandbox client whose
// connection was redirected from dst, sends a line and returns what came
// back before the gateway closed (or 5 s passed).
func (h *harness) rawExchange(t *testing.T, dst netip.AddrPort) string {
	t.Helper()
	h.origDst.Store(dst)
	c, err := net.DialTimeout("tcp", h.transp, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	// A client-first protocol that is neither TLS nor HTTP (an SSH banner).
	if _, err := c.Write([]byte("SSH-2.0-alk-test\r\n")); err != nil {
		return "write: " + err.Error()
	}
	br := bufio.NewReader(c)
	line, _ := br.ReadString('\n')
	return line
}

// TestTCPByName: a raw TCP connection to an address the
// DNS filter answered this sandbox is decided by the name it resolved and the
// port, and dialed at the address the gateway resolves for that name (never
// the original destination). Every other case is refused with the target
// seeing zero connections: another port, an address never answered, one
// answered to another sandbox, one past its TTL, and a name the gateway
// resolves to a metadata or private address.
func TestTCPByName(t *testing.T) {
	db := newRawUpstream(t, "")    // db.example on its port
	other := newRawUpstream(t, "") // the same host on a port policy does not allow
	now := time.Now()
	res := &namingResolver{
		fakeResolver: fakeResolver{names: map[string][]netip.Addr{
			"db.example":   {netip.MustParseAddr("127.0.0.1")},
			"meta.example": {netip.MustParseAddr("169.254.169.254")},
			"priv.example": {netip.MustParseAddr("10.0.0.7")},
		}},
		answered: map[string]map[netip.Addr]namedAddr{},
		now:      now,
	}
	// What the sandbox (sb-test) was answered: public addresses, none of them
	// where the target listens, so only a dial by name can reach it.
	res.answer("sb-test", "db.example", "198.51.100.7", time.Minute)
	res.answer("sb-other", "db.example", "198.51.100.8", time.Minute)
	res.answer("sb-test", "db.example", "198.51.100.9", -time.Second) // TTL ran out
	res.answer("sb-test", "meta.example", "198.51.100.10", time.Minute)
	res.answer("sb-test", "priv.example", "198.51.100.11", time.Minute)
	h := newHarnessResolver(t, tcpNamePolicy(db.port), res, nil, nil)
	h.dialer.allow(db.addr)
	h.dialer.allow(other.addr) // reachable if policy were skipped: the attack could succeed

	dst := func(ip string, port int) netip.AddrPort {
		return netip.AddrPortFrom(netip.MustParseAddr(ip), uint16(port))
	}
	tests := []struct {
		name     string
		dst      netip.AddrPort
		allowed  bool
		host     string // the record's host
		reason   string
		targetOf *rawUpstream // the server a wrong allow would reach
	}{
		{"answered name, allowed port", dst("198.51.100.7", db.port), true, "db.example", "", db},
		{"answered name, another port", dst("198.51.100.7", other.port), false, "db.example", policytest.ReasonNotAllowed, other},
		{"address never answered (the target's own)", dst("127.0.0.1", db.port), false, "127.0.0.1", policytest.ReasonNotAllowed, db},
		{"address answered to another sandbox", dst("198.51.100.8", db.port), false, "198.51.100.8", policytest.ReasonNotAllowed, db},
		{"address past its TTL", dst("198.51.100.9", db.port), false, "198.51.100.9", policytest.ReasonNotAllowed, db},
		{"allowed name resolving to metadata", dst("198.51.100.10", db.port), false, "meta.example", ReasonForbiddenAddress, db},
		{"allowed name resolving to a private address", dst("198.51.100.11", db.port), false, "priv.example", ReasonForbiddenAddress, db},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := len(h.log.Records())
			before := tt.targetOf.conns.Load()
			dialed := len(h.dialer.dialedAddrs())
			got := h.rawExchange(t, tt.dst)
			recs := settledRecords(t, h.log, n, 1)
			if tt.allowed {
				if got != "SSH-2.0-alk-test\r\n" {
					t.Fatalf("echo: got %q, want the banner back", got)
				}
				recs = settledRecords(t, h.log, n, 2) // decision and close
				if d := tt.targetOf.conns.Load() - before; d != 1 {
					t.Errorf("target connections: got %d, want 1", d)
				}
				if got := h.dialer.dialedAddrs()[dialed:]; !slices.Equal(got, []string{db.addr}) {
					t.Errorf("dialed: got %v, want only %s (the name's address, not the original destination)", got, db.addr)
				}
				r := recs[0]
				if r.Kind != audit.KindTCP || r.Decision != audit.DecisionAllow || r.Host != "db.example" || r.Port != db.port || r.IP != "127.0.0.1" {
					t.Errorf("record: got %s %s %s:%d ip %s, want tcp allow db.example:%d ip 127.0.0.1", r.Kind, r.Decision, r.Host, r.Port, r.IP, db.port)
				}
				if o := string(r.Extra["original_ip"]); o != strconv.Quote(tt.dst.Addr().String()) {
					t.Errorf("record extra.original_ip: got %s, want %q", o, tt.dst.Addr())
				}
				return
			}
			if got != "" {
				t.Errorf("client read %q, want the connection closed", got)
			}
			if len(recs) != 1 {
				t.Fatalf("records: got %d, want 1", len(recs))
			}
			r := recs[0]
			if r.Kind != audit.KindTCP || r.Decision != audit.DecisionDeny || r.Host != tt.host || !audittest.HasReason(r, tt.reason) {
				t.Errorf("record: got %s %s host %s reasons %+v, want tcp deny host %s reason %s", r.Kind, r.Decision, r.Host, r.Reasons, tt.host, tt.reason)
			}
			if d := tt.targetOf.conns.Load() - before; d != 0 {
				t.Errorf("target connections: got %d, want 0", d)
			}
			if got := h.dialer.dialedAddrs()[dialed:]; len(got) != 0 {
				t.Errorf("dialed %v, want nothing", got)
			}
		})
	}
	if r := h.dialer.refusedAddrs(); len(r) != 0 {
		t.Errorf("the gateway tried to dial %v: an original destination or a guarded address", r)
	}
	res.mu.Lock()
	for _, a := range res.asked {
		if a[:len("sb-test ")] != "sb-test " {
			t.Errorf("NameFor asked for %q: want only the connection's own sandbox", a)
		}
	}
	res.mu.Unlock()
}

// TestTCPByNameWithoutNamer: a Resolver that remembers no names (a plain
// *net.Resolver) leaves kind tcp decided by the bare address, as before.
func TestTCPByNameWithoutNamer(t *testing.T) {
	db := newRawUpstream(t, "")
	h := newHarness(t, tcpNamePolicy(db.port), names("db.example"), nil)
	h.dialer.allow(db.addr)
	n := len(h.log.Records())
	if got := h.rawExchange(t, netip.MustParseAddrPort(db.addr)); got != "" {
		t.Errorf("client read %q, want the connection closed", got)
	}
	r := settledRecords(t, h.log, n, 1)[0]
	if r.Host != "127.0.0.1" || r.Decision != audit.DecisionDeny {
		t.Errorf("record: got %s %s, want a deny of the bare address", r.Decision, r.Host)
	}
	if c := db.conns.Load(); c != 0 {
		t.Errorf("target connections: got %d, want 0", c)
	}
}
