package netns

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/identity"
)

func TestRulesIsland(t *testing.T) {
	got := ruleSpec{DNSPort: 53, TransparentPort: 15001, NFLogGroup: 100}.render()
	want := `*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:AIRLOCK-NAT-OUT - [0:0]
-A OUTPUT -j AIRLOCK-NAT-OUT
-A AIRLOCK-NAT-OUT -p udp --dport 53 -j REDIRECT --to-ports 53
-A AIRLOCK-NAT-OUT -p tcp --dport 53 -j REDIRECT --to-ports 53
-A AIRLOCK-NAT-OUT -d 127.0.0.0/8 -j RETURN
-A AIRLOCK-NAT-OUT -p tcp -j REDIRECT --to-ports 15001
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:AIRLOCK-OUT - [0:0]
-A OUTPUT -j AIRLOCK-OUT
-A AIRLOCK-OUT -m conntrack --ctstate NEW -m hashlimit --hashlimit-above 500/sec --hashlimit-burst 2000 --hashlimit-name airlock-new -j DROP
-A AIRLOCK-OUT -o lo -d 127.0.0.0/8 -j ACCEPT
-A AIRLOCK-OUT -m conntrack --ctstate DNAT --ctdir REPLY -j ACCEPT
-A AIRLOCK-OUT -j NFLOG --nflog-group 100 --nflog-prefix airlock-out --nflog-size 128
-A AIRLOCK-OUT -j DROP
COMMIT
`
	if got != want {
		t.Errorf("island rules:\n%s\nwant\n%s", got, want)
	}
}

func TestRulesAttach(t *testing.T) {
	got := ruleSpec{DNSPort: 5353, TransparentPort: 15001, NFLogGroup: 7, Attach: true}.render()
	for _, line := range []string{
		"-I OUTPUT 1 -j AIRLOCK-NAT-OUT",
		"-I PREROUTING 1 -j AIRLOCK-NAT-PRE",
		"-A AIRLOCK-NAT-PRE -i lo -j RETURN",
		"-A AIRLOCK-NAT-PRE -p udp --dport 53 -j DNAT --to-destination 127.0.0.1:5353",
		"-A AIRLOCK-NAT-PRE -p tcp --dport 53 -j DNAT --to-destination 127.0.0.1:5353",
		"-A AIRLOCK-NAT-PRE -p tcp -j DNAT --to-destination 127.0.0.1:15001",
		"-A AIRLOCK-NAT-PRE -j NFLOG --nflog-group 7 --nflog-prefix airlock-in --nflog-size 128",
		"-I INPUT 1 -j AIRLOCK-IN",
		"-A AIRLOCK-IN -d 127.0.0.1/32 -p tcp --dport 15001 -m conntrack --ctstate DNAT -j ACCEPT",
		"-A AIRLOCK-IN -d 127.0.0.1/32 -p udp --dport 5353 -m conntrack --ctstate DNAT -j ACCEPT",
		"-A AIRLOCK-IN -j DROP",
		"-I FORWARD 1 -j AIRLOCK-FWD",
		"-A AIRLOCK-FWD -j DROP",
		// Regression: with a default route through eth0 (a CNI pod) the redirected
		// DNS and TCP left nat OUTPUT with eth0 as their output device, so the
		// "-o lo" accept missed them and every lookup and captured connection
		// was dropped.
		"-A AIRLOCK-OUT -d 127.0.0.1/32 -p tcp --dport 15001 -m conntrack --ctstate DNAT --ctdir ORIGINAL -j ACCEPT",
		"-A AIRLOCK-OUT -d 127.0.0.1/32 -p udp --dport 5353 -m conntrack --ctstate DNAT --ctdir ORIGINAL -j ACCEPT",
		"-A AIRLOCK-OUT -j NFLOG --nflog-group 7 --nflog-prefix airlock-out --nflog-size 128",
	} {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("attach rules lack %q:\n%s", line, got)
		}
	}
	// --noflush input must not redeclare built-in chains: that would reset their
	// policies and counters in someone else's namespace.
	if strings.Contains(got, ":OUTPUT") || strings.Contains(got, ":INPUT") || strings.Contains(got, "-A OUTPUT") {
		t.Errorf("attach rules touch built-in chains beyond one inserted jump:\n%s", got)
	}
}

// TestRulesNewFlowLimit: the configured new-flow limit is what the rule
// enforces, in islands and attached namespaces alike.
func TestRulesNewFlowLimit(t *testing.T) {
	want := "-A AIRLOCK-OUT -m conntrack --ctstate NEW -m hashlimit --hashlimit-above 20000/sec --hashlimit-burst 5000 --hashlimit-name airlock-new -j DROP\n"
	for _, attach := range []bool{false, true} {
		m := &Manager{cfg: Config{NewFlowRate: 20000, NewFlowBurst: 5000}.withDefaults()}
		if got := m.ruleSpec(attach, Inbound{}).render(); !strings.Contains(got, want) || strings.Contains(got, "500/sec") {
			t.Fatalf("attach=%v: no rule %q in\n%s", attach, want, got)
		}
	}
}

func TestRestoreText(t *testing.T) {
	tests := []struct {
		name, saved string
		wantTables  []string
	}{
		{"nothing saved", "", []string{"*filter", "*nat"}},
		{"filter only", "*filter\n:INPUT DROP [0:0]\n-A INPUT -i lo -j ACCEPT\nCOMMIT\n", []string{"*filter", "*nat"}},
		{"both", "*nat\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n*filter\n:INPUT ACCEPT [0:0]\nCOMMIT", []string{"*filter", "*nat"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := restoreText(tt.saved)
			if !strings.HasPrefix(got, tt.saved) {
				t.Errorf("restore text does not start with the saved dump: %q", got)
			}
			for _, table := range tt.wantTables {
				if n := strings.Count(got, table+"\n"); n != 1 {
					t.Errorf("table %s appears %d times, want 1:\n%s", table, n, got)
				}
			}
		})
	}
	if !hasRules("*filter\n-A INPUT -j ACCEPT\nCOMMIT\n") || hasRules("*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n") {
		t.Errorf("hasRules wrong")
	}
}

// nflogPacket builds one NFULNL_MSG_PACKET netlink message carrying pkt.
func nflogPacket(prefix string, pkt []byte) []byte {
	attr := func(typ uint16, val []byte) []byte {
		b := make([]byte, nlaAlign(4+len(val)))
		binary.NativeEndian.PutUint16(b[0:2], uint16(4+len(val)))
		binary.NativeEndian.PutUint16(b[2:4], typ)
		copy(b[4:], val)
		return b
	}
	body := []byte{unix.AF_INET, 0, 0, 100}
	body = append(body, attr(nfulaPrefix, append([]byte(prefix), 0))...)
	body = append(body, attr(nfulaPayload, pkt)...)
	msg := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(body))
	binary.NativeEndian.PutUint32(msg[0:4], uint32(unix.NLMSG_HDRLEN+len(body)))
	binary.NativeEndian.PutUint16(msg[4:6], unix.NFNL_SUBSYS_ULOG<<8|nfulnlMsgPacket)
	return append(msg, body...)
}

func ipv4Packet(proto byte, dst netip.Addr, l4 []byte) []byte {
	p := make([]byte, 20, 20+len(l4))
	p[0] = 0x45
	p[9] = proto
	d := dst.As4()
	copy(p[16:20], d[:])
	return append(p, l4...)
}

func TestParseNFLog(t *testing.T) {
	dst := netip.MustParseAddr("198.19.7.20")
	udp := make([]byte, 8)
	binary.BigEndian.PutUint16(udp[2:4], 5353)
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp[2:4], 8443)
	batch := append(nflogPacket("airlock-out", ipv4Packet(unix.IPPROTO_UDP, dst, udp)), nflogPacket("airlock-in", ipv4Packet(unix.IPPROTO_TCP, dst, tcp))...)
	batch = append(batch, nflogPacket("airlock-out", ipv4Packet(unix.IPPROTO_ICMP, dst, []byte{8, 0, 0, 0}))...)
	batch = append(batch, nflogPacket("airlock-out", ipv4Packet(47, dst, nil))...)
	batch = append(batch, nflogPacket("airlock-out", []byte{0x60, 0, 0})...) // not IPv4: skipped
	got := parseNFLog(batch)
	want := []droppedPacket{
		{Prefix: "airlock-out", Protocol: "udp", Dst: dst, Port: 5353},
		{Prefix: "airlock-in", Protocol: "tcp", Dst: dst, Port: 8443},
		{Prefix: "airlock-out", Protocol: "icmp", Dst: dst, ICMPType: 8},
		{Prefix: "airlock-out", Protocol: "ip-47", Dst: dst},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d packets %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("packet %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	// Truncated and garbage input never panics.
	for i := range batch {
		parseNFLog(batch[:i])
	}
}

func FuzzParseNFLog(f *testing.F) {
	f.Add(nflogPacket("airlock-out", ipv4Packet(unix.IPPROTO_UDP, netip.MustParseAddr("1.2.3.4"), make([]byte, 8))))
	f.Fuzz(func(t *testing.T, b []byte) { parseNFLog(b) })
}

func TestDropLimiter(t *testing.T) {
	l := dropLimiter{burst: 3, interval: time.Second}
	t0 := time.Unix(1000, 0)
	allowed := 0
	for i := range 10 {
		if l.allow(t0.Add(time.Duration(i)*time.Millisecond), "udp") {
			allowed++
		}
	}
	if allowed != 3 {
		t.Errorf("allowed in one window: got %d, want 3", allowed)
	}
	if due, _ := l.due(t0.Add(500 * time.Millisecond)); due {
		t.Errorf("summary due before the window ends")
	}
	due, at := l.due(t0.Add(time.Second))
	if !due || !at.Equal(t0.Add(time.Second)) {
		t.Errorf("due at window end: got %v %v, want true %v", due, at, t0.Add(time.Second))
	}
	n, by := l.take()
	if n != 7 || by["udp"] != 7 {
		t.Errorf("suppressed: got %d %v, want 7 udp", n, by)
	}
	if !l.allow(t0.Add(2*time.Second), "tcp") {
		t.Errorf("a new window does not allow")
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"defaults", Config{}, ""},
		{"relative run dir", Config{RunDir: "netns"}, "run_dir"},
		{"island not /32", Config{IslandAddr: "10.0.0.1/24"}, "island_addr"},
		{"island loopback", Config{IslandAddr: "127.0.0.2/32"}, "island_addr"},
		{"island v6", Config{IslandAddr: "fd00::1/128"}, "island_addr"},
		{"port clash", Config{ExplicitPort: 53}, "same as"},
		{"port range", Config{TransparentPort: 70000}, "transparent_port"},
		{"nflog group", Config{NFLogGroup: 70000}, "nflog_group"},
		{"drop interval", Config{DropInterval: time.Millisecond}, "drop_interval"},
		{"pool size", Config{PoolSize: -1}, "pool_size"},
		{"iptables", Config{IPTables: "ipfw"}, "iptables"},
		{"new flow rate negative", Config{NewFlowRate: -1}, "new_flow_rate"},
		{"new flow rate too high", Config{NewFlowRate: MaxNewFlowRate + 1}, "new_flow_rate"},
		{"new flow burst too high", Config{NewFlowBurst: MaxNewFlowBurst + 1}, "new_flow_burst"},
		{"new flows raised", Config{NewFlowRate: 20000, NewFlowBurst: 20000}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.withDefaults().validate()
			if tt.wantErr == "" && err != nil {
				t.Fatalf("got %v, want nil", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("got %v, want an error naming %q", err, tt.wantErr)
			}
		})
	}
}

func TestValidateID(t *testing.T) {
	for _, tt := range []struct {
		id string
		ok bool
	}{
		{"sb-1", true}, {"A.b_c", true}, {"", false}, {"-x", false}, {"a/b", false},
		{"pool-1", false}, {strings.Repeat("a", 63), true}, {strings.Repeat("a", 64), false}, {"a b", false},
	} {
		if err := ValidateID(tt.id); (err == nil) != tt.ok {
			t.Errorf("ValidateID(%q) = %v, want ok=%v", tt.id, err, tt.ok)
		}
	}
}

// fakeRunner is the in-memory iptablesRunner: it keeps the last restored text per
// namespace, answers Save from it, and fails on demand.
type fakeRunner struct {
	rules   map[string]string
	calls   []string
	failOn  string
	restore int
}

func (f *fakeRunner) key(ns vnetns.NsHandle) string { return ns.String() }

func (f *fakeRunner) Restore(_ context.Context, ns vnetns.NsHandle, backend, rules string, noflush bool) error {
	f.calls = append(f.calls, "restore "+backend)
	if f.failOn == "restore" {
		return errInjected
	}
	f.restore++
	if noflush {
		f.rules[f.key(ns)] += rules
	} else {
		f.rules[f.key(ns)] = rules
	}
	return nil
}

func (f *fakeRunner) Save(_ context.Context, ns vnetns.NsHandle, backend string) (string, error) {
	f.calls = append(f.calls, "save "+backend)
	if f.failOn == "save" {
		return "", errInjected
	}
	return f.rules[f.key(ns)], nil
}

// Verify checks the last restored text the way the real runner checks the
// kernel's listing: every jump present (the fake keeps no order for --noflush).
func (f *fakeRunner) Verify(_ context.Context, ns vnetns.NsHandle, backend string, s ruleSpec) error {
	f.calls = append(f.calls, "verify "+backend)
	if f.failOn == "verify" {
		return errInjected
	}
	text := f.rules[f.key(ns)]
	for _, j := range s.jumps() {
		if !strings.Contains(text, " "+j.builtin+" ") || !strings.Contains(text, "-j "+j.chain+"\n") {
			return fmt.Errorf("fake: no jump from %s to %s", j.builtin, j.chain)
		}
	}
	return nil
}

func TestCheckJumps(t *testing.T) {
	j := jump{"filter", "OUTPUT", chainOut}
	tests := []struct {
		name    string
		listing []string
		wantErr bool
	}{
		{"first", []string{"-P OUTPUT ACCEPT", "-A OUTPUT -j AIRLOCK-OUT", "-A OUTPUT -j ACCEPT"}, false},
		{"someone above us", []string{"-P OUTPUT ACCEPT", "-A OUTPUT -d 1.2.3.4/32 -j ACCEPT", "-A OUTPUT -j AIRLOCK-OUT"}, true},
		{"missing", []string{"-P OUTPUT ACCEPT"}, true},
		{"flushed", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := checkJumps(j, tt.listing); (err != nil) != tt.wantErr {
				t.Fatalf("checkJumps(%v) = %v, want error %v", tt.listing, err, tt.wantErr)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(Config{PoolSize: -2}, &testServerStub{}, nil, nil); err == nil || !strings.Contains(err.Error(), "pool_size") {
		t.Errorf("New with a bad pool size: got %v", err)
	}
	if _, err := New(Config{}, nil, nil, nil); err == nil {
		t.Errorf("New with a nil server succeeded")
	}
	m, err := New(Config{}, &testServerStub{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Create(context.Background(), policyStubSandbox("bad/id")); err == nil {
		t.Errorf("Create with a bad id succeeded")
	}
	if err := m.Teardown(context.Background(), "nope"); err == nil {
		t.Errorf("Teardown of an unknown sandbox succeeded")
	}
	if _, err := m.Recover(context.Background(), "maybe"); err == nil {
		t.Errorf("Recover with a bad policy succeeded")
	}
}

// TestRestoreRoundTripWithFake checks that what Attach saves is what Detach
// feeds back, through the in-memory runner.
func TestRestoreRoundTripWithFake(t *testing.T) {
	f := &fakeRunner{rules: map[string]string{}}
	ns := vnetns.None()
	orig := "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 22 -j ACCEPT\nCOMMIT\n"
	f.rules[f.key(ns)] = orig
	saved, _ := f.Save(context.Background(), ns, IPTablesLegacy)
	f.Restore(context.Background(), ns, IPTablesLegacy, ruleSpec{DNSPort: 53, TransparentPort: 15001, NFLogGroup: 1, Attach: true}.render(), true)
	if !strings.Contains(f.rules[f.key(ns)], "AIRLOCK-OUT") {
		t.Fatalf("attach rules not applied")
	}
	f.Restore(context.Background(), ns, IPTablesLegacy, restoreText(saved), false)
	if got := f.rules[f.key(ns)]; !strings.HasPrefix(got, orig) || strings.Contains(got, "AIRLOCK") {
		t.Errorf("after restore: %q, want the original rules back", got)
	}
}

type testServerStub struct{}

func (testServerStub) Serve(identity.Sandbox, []netip.Addr, Listeners) error { return nil }
func (testServerStub) Stop(string)                                           {}

func policyStubSandbox(id string) identity.Sandbox { return identity.Sandbox{ID: id} }
