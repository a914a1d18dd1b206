package netns

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	vnetns "github.com/vishvananda/netns"
)

// Chains this package owns. Attach inserts one jump to each at the top of the
// built-in chain; the island owns its tables outright.
const (
	chainOut    = "AIRLOCK-OUT"
	chainIn     = "AIRLOCK-IN"
	chainFwd    = "AIRLOCK-FWD"
	chainNatOut = "AIRLOCK-NAT-OUT"
	chainNatPre = "AIRLOCK-NAT-PRE"
)

// NFLOG prefixes say which chain dropped a packet.
const (
	prefixOut = "airlock-out"
	prefixIn  = "airlock-in"
	// prefixInbound logs an inbound connection InboundAccept let in: it is
	// counted, not written as a drop.
	prefixInbound = "airlock-inbound"
)

// New-flow limit: every flow a sandbox starts (a TCP connection, a UDP
// datagram to a new address or port, redirected or on loopback) is a conntrack
// entry in kernel memory, outside any cgroup, in a hash table the host shares.
// Unlimited, a sandbox made 20,000 in 0.2 s (datagrams to distinct IP:53, each
// redirected to the DNS listener) against a table of 262,144. Past this rate new
// flows are dropped (the sender gets EPERM); with the island's short conntrack
// timeouts (islandConntrackSysctls) the table holds at most about
// NewFlowBurst + NewFlowRate*30 entries per sandbox (Config.NewFlowRate and
// NewFlowBurst; DefaultNewFlowRate and DefaultNewFlowBurst unless configured).

// nflogSize is how many bytes of each dropped packet reach the log: enough for an
// IPv4 header with options and the TCP/UDP ports or ICMP type.
const nflogSize = 128

// ruleSpec is everything the ruleset depends on.
type ruleSpec struct {
	DNSPort         int
	TransparentPort int
	NFLogGroup      int
	// NewFlowRate and NewFlowBurst bound the namespace's new flows (per second
	// sustained, and the burst above it).
	NewFlowRate, NewFlowBurst int
	// Attach adds PREROUTING/INPUT/FORWARD rules for traffic arriving on
	// interfaces other than lo, and renders for iptables-restore --noflush
	// (insert jumps, leave the namespace's own rules alone).
	Attach bool
	// Inbound says what those rules make of arriving traffic (Attach only).
	Inbound Inbound
}

// orDefault is v, or def when v is zero (a ruleSpec made without a Config).
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// accept reports whether arriving traffic is from the network (InboundAccept)
// rather than the workload's egress.
func (s ruleSpec) accept() bool { return s.Attach && s.Inbound.mode() == InboundAccept }

// render returns the iptables-restore input for s.
func (s ruleSpec) render() string {
	var b strings.Builder
	dns := strconv.Itoa(s.DNSPort)
	tp := strconv.Itoa(s.TransparentPort)
	nflog := func(chain, prefix string) {
		fmt.Fprintf(&b, "-A %s -j NFLOG --nflog-group %d --nflog-prefix %s --nflog-size %d\n", chain, s.NFLogGroup, prefix, nflogSize)
		fmt.Fprintf(&b, "-A %s -j DROP\n", chain)
	}
	jump := func(builtin, chain string) {
		if s.Attach {
			fmt.Fprintf(&b, "-I %s 1 -j %s\n", builtin, chain)
		} else {
			fmt.Fprintf(&b, "-A %s -j %s\n", builtin, chain)
		}
	}

	b.WriteString("*nat\n")
	if !s.Attach {
		b.WriteString(":PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n")
	}
	fmt.Fprintf(&b, ":%s - [0:0]\n", chainNatOut)
	if s.Attach {
		fmt.Fprintf(&b, ":%s - [0:0]\n", chainNatPre)
	}
	jump("OUTPUT", chainNatOut)
	fmt.Fprintf(&b, "-A %s -p udp --dport 53 -j REDIRECT --to-ports %s\n", chainNatOut, dns)
	fmt.Fprintf(&b, "-A %s -p tcp --dport 53 -j REDIRECT --to-ports %s\n", chainNatOut, dns)
	fmt.Fprintf(&b, "-A %s -d 127.0.0.0/8 -j RETURN\n", chainNatOut)
	fmt.Fprintf(&b, "-A %s -p tcp -j REDIRECT --to-ports %s\n", chainNatOut, tp)
	if s.Attach {
		// REDIRECT in PREROUTING would pick the interface's address; the
		// listeners are on 127.0.0.1, which needs route_localnet (set by Attach).
		jump("PREROUTING", chainNatPre)
		fmt.Fprintf(&b, "-A %s -i lo -j RETURN\n", chainNatPre)
		if s.accept() {
			// From the network: accepted connections pass untouched, and
			// nothing arriving ever reaches the listeners (the pod's gateway
			// is not the network's).
			s.renderAccept("nat", &b)
		} else {
			fmt.Fprintf(&b, "-A %s -p udp --dport 53 -j DNAT --to-destination 127.0.0.1:%s\n", chainNatPre, dns)
			fmt.Fprintf(&b, "-A %s -p tcp --dport 53 -j DNAT --to-destination 127.0.0.1:%s\n", chainNatPre, dns)
			fmt.Fprintf(&b, "-A %s -p tcp -j DNAT --to-destination 127.0.0.1:%s\n", chainNatPre, tp)
		}
		// Everything else arriving is dropped in filter INPUT or FORWARD (or by
		// routing when forwarding is off); nat sees each flow's first packet once,
		// whichever way it dies, so this is where it is logged.
		fmt.Fprintf(&b, "-A %s -j NFLOG --nflog-group %d --nflog-prefix %s --nflog-size %d\n", chainNatPre, s.NFLogGroup, prefixIn, nflogSize)
	}
	b.WriteString("COMMIT\n")

	b.WriteString("*filter\n")
	if !s.Attach {
		b.WriteString(":INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	}
	fmt.Fprintf(&b, ":%s - [0:0]\n", chainOut)
	if s.Attach {
		fmt.Fprintf(&b, ":%s - [0:0]\n:%s - [0:0]\n", chainIn, chainFwd)
	}
	jump("OUTPUT", chainOut)
	fmt.Fprintf(&b, "-A %s -m conntrack --ctstate NEW -m hashlimit --hashlimit-above %d/sec --hashlimit-burst %d --hashlimit-name airlock-new -j DROP\n", chainOut, orDefault(s.NewFlowRate, DefaultNewFlowRate), orDefault(s.NewFlowBurst, DefaultNewFlowBurst))
	// Loopback traffic (including everything the nat rules redirected) and the
	// listeners' replies to redirected connections; all else is logged and dropped.
	fmt.Fprintf(&b, "-A %s -o lo -d 127.0.0.0/8 -j ACCEPT\n", chainOut)
	if s.Attach {
		// In an attached namespace whose default route leaves by eth0 (a CNI
		// pod, a docker bridge container), filter OUTPUT still sees eth0 as the
		// output device of a packet nat OUTPUT redirected to the listeners (the
		// hook's devices are fixed before nat reroutes): accept exactly those.
		fmt.Fprintf(&b, "-A %s -d 127.0.0.1/32 -p tcp --dport %s -m conntrack --ctstate DNAT --ctdir ORIGINAL -j ACCEPT\n", chainOut, tp)
		fmt.Fprintf(&b, "-A %s -d 127.0.0.1/32 -p tcp --dport %s -m conntrack --ctstate DNAT --ctdir ORIGINAL -j ACCEPT\n", chainOut, dns)
		fmt.Fprintf(&b, "-A %s -d 127.0.0.1/32 -p udp --dport %s -m conntrack --ctstate DNAT --ctdir ORIGINAL -j ACCEPT\n", chainOut, dns)
	}
	fmt.Fprintf(&b, "-A %s -m conntrack --ctstate DNAT --ctdir REPLY -j ACCEPT\n", chainOut)
	if s.accept() {
		s.renderAccept("filter-out", &b)
	}
	nflog(chainOut, prefixOut)
	if s.Attach {
		jump("INPUT", chainIn)
		fmt.Fprintf(&b, "-A %s -i lo -j RETURN\n", chainIn)
		if s.accept() {
			s.renderAccept("filter-in", &b)
		} else {
			fmt.Fprintf(&b, "-A %s -d 127.0.0.1/32 -p tcp --dport %s -m conntrack --ctstate DNAT -j ACCEPT\n", chainIn, tp)
			fmt.Fprintf(&b, "-A %s -d 127.0.0.1/32 -p tcp --dport %s -m conntrack --ctstate DNAT -j ACCEPT\n", chainIn, dns)
			fmt.Fprintf(&b, "-A %s -d 127.0.0.1/32 -p udp --dport %s -m conntrack --ctstate DNAT -j ACCEPT\n", chainIn, dns)
		}
		fmt.Fprintf(&b, "-A %s -j DROP\n", chainIn)
		jump("FORWARD", chainFwd)
		fmt.Fprintf(&b, "-A %s -j DROP\n", chainFwd)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// restoreText turns an iptables-save dump into the input that puts a namespace
// back exactly as it was: the dump itself, plus an empty filter and nat table for
// any of the two the dump did not have (so the rules Attach added go too).
func restoreText(saved string) string {
	var b strings.Builder
	b.WriteString(saved)
	if saved != "" && !strings.HasSuffix(saved, "\n") {
		b.WriteString("\n")
	}
	has := func(table string) bool {
		for _, line := range strings.Split(saved, "\n") {
			if strings.TrimSpace(line) == "*"+table {
				return true
			}
		}
		return false
	}
	if !has("filter") {
		b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n")
	}
	if !has("nat") {
		b.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n")
	}
	return b.String()
}

// hasRules reports whether an iptables-save dump holds any rule.
func hasRules(saved string) bool {
	for _, line := range strings.Split(saved, "\n") {
		if strings.HasPrefix(line, "-A ") {
			return true
		}
	}
	return false
}

// iptablesRunner runs iptables-restore and iptables-save inside a namespace. The
// real one execs the binaries from a thread setns()ed into ns; tests use fakes.
type iptablesRunner interface {
	// Restore feeds rules to iptables-restore (with --noflush when asked).
	Restore(ctx context.Context, ns vnetns.NsHandle, backend, rules string, noflush bool) error
	// Save returns iptables-save's output.
	Save(ctx context.Context, ns vnetns.NsHandle, backend string) (string, error)
	// Verify reads the rules back and fails unless the spec's jumps come first.
	Verify(ctx context.Context, ns vnetns.NsHandle, backend string, s ruleSpec) error
}

// execRunner is the iptablesRunner that execs the iptables binaries.
type execRunner struct {
	timeout time.Duration
}

var _ iptablesRunner = execRunner{}

func (r execRunner) run(ctx context.Context, ns vnetns.NsHandle, bin string, args []string, stdin string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	var out string
	err := inNS(ns, func() error {
		// The child is forked from this thread, so it starts in ns.
		cmd := exec.CommandContext(ctx, bin, args...)
		if stdin != "" {
			cmd.Stdin = strings.NewReader(stdin)
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout = &stdout
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w: %s", bin, err, strings.TrimSpace(stderr.String()))
		}
		out = stdout.String()
		return nil
	})
	return out, err
}

func (r execRunner) Restore(ctx context.Context, ns vnetns.NsHandle, backend, rules string, noflush bool) error {
	bin, _ := backendBinaries(backend)
	args := []string{"-w", "5"}
	if noflush {
		args = append(args, "--noflush")
	}
	_, err := r.run(ctx, ns, bin, args, rules)
	return err
}

func (r execRunner) Save(ctx context.Context, ns vnetns.NsHandle, backend string) (string, error) {
	_, bin := backendBinaries(backend)
	return r.run(ctx, ns, bin, nil, "")
}
