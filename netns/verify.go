package netns

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/coreos/go-iptables/iptables"
	vnetns "github.com/vishvananda/netns"
)

// jump is a built-in chain and the airlock chain it must send packets to first.
type jump struct{ table, builtin, chain string }

// jumps lists the jumps the ruleset installs.
func (s ruleSpec) jumps() []jump {
	j := []jump{{"nat", "OUTPUT", chainNatOut}, {"filter", "OUTPUT", chainOut}}
	if s.Attach {
		j = append(j, jump{"nat", "PREROUTING", chainNatPre}, jump{"filter", "INPUT", chainIn}, jump{"filter", "FORWARD", chainFwd})
	}
	return j
}

// checkJumps reads a chain listing (iptables -S output) and reports whether the
// jump is the chain's first rule. First matters: in a namespace someone else
// manages (attach, or one recovered after a crash), a rule inserted above ours
// could accept traffic before airlock sees it.
func checkJumps(j jump, listing []string) error {
	for _, line := range listing {
		if strings.HasPrefix(line, "-P ") || strings.HasPrefix(line, "-N ") {
			continue
		}
		if line == "-A "+j.builtin+" -j "+j.chain {
			return nil
		}
		return fmt.Errorf("netns: rules not in force: first rule of %s %s is %q, want a jump to %s", j.table, j.builtin, line, j.chain)
	}
	return fmt.Errorf("netns: rules not in force: %s %s has no jump to %s", j.table, j.builtin, j.chain)
}

// ownChain is one chain this package owns, in its table.
type ownChain struct{ table, chain string }

// chains lists the chains the ruleset fills, with the rules render gives
// each ("-A CHAIN ..." lines), in order.
func (s ruleSpec) chains() ([]ownChain, map[ownChain][]string) {
	var order []ownChain
	rules := map[ownChain][]string{}
	table := ""
	for _, line := range strings.Split(s.render(), "\n") {
		if t, ok := strings.CutPrefix(line, "*"); ok {
			table = t
			continue
		}
		if name, ok := strings.CutPrefix(line, ":"); ok {
			c := ownChain{table, strings.Fields(name)[0]}
			if strings.HasPrefix(c.chain, "AIRLOCK-") {
				order = append(order, c)
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) > 1 && f[0] == "-A" && strings.HasPrefix(f[1], "AIRLOCK-") {
			c := ownChain{table, f[1]}
			rules[c] = append(rules[c], line)
		}
	}
	return order, rules
}

// shapeOpts are the options a rule's shape keeps: what it matches on and
// where it sends the packet. Their values are printed by iptables -S as they
// are written by render; match module names and counters are left out.
var shapeOpts = map[string]bool{
	"-i": true, "-o": true, "-p": true, "-s": true, "-d": true, "--dport": true, "--sport": true,
	"--ctstate": true, "--ctdir": true, "--dst-type": true, "--src-type": true, "-j": true,
	"--nflog-prefix": true, "--to-destination": true, "--to-ports": true, "--hashlimit-above": true,
}

// ruleShape reduces one rule ("-A CHAIN ..." as render writes it or iptables
// -S prints it) to its sorted match and target options, so the two compare
// equal whatever order and spelling each uses ("--syn" is "--tcp-flags
// FIN,SYN,RST,ACK SYN").
func ruleShape(rule string) string {
	f := strings.Fields(rule)
	var opts []string
	for i := 2; i < len(f); i++ {
		neg := ""
		if f[i] == "!" && i+1 < len(f) {
			neg = "!"
			i++
		}
		switch {
		case f[i] == "--syn":
			opts = append(opts, neg+"syn")
		case f[i] == "--tcp-flags" && i+2 < len(f):
			if f[i+1] == "FIN,SYN,RST,ACK" && f[i+2] == "SYN" {
				opts = append(opts, neg+"syn")
			} else {
				opts = append(opts, neg+"tcp-flags="+f[i+1]+"/"+f[i+2])
			}
			i += 2
		case shapeOpts[f[i]] && i+1 < len(f):
			opts = append(opts, neg+f[i]+"="+f[i+1])
			i++
		}
	}
	slices.Sort(opts)
	return strings.Join(opts, " ")
}

// checkChain compares the listing of one of our chains (iptables -S) with
// the rules render gave it, rule by rule by shape: a rule removed, added,
// moved or changed (an inbound port, the inbound mode) is reported.
func checkChain(c ownChain, want, listing []string) error {
	var got []string
	for _, line := range listing {
		if strings.HasPrefix(line, "-A ") {
			got = append(got, line)
		}
	}
	for i := range max(len(got), len(want)) {
		switch {
		case i >= len(got):
			return fmt.Errorf("netns: rules not in force: %s %s has %d rules, want %d (missing %q)", c.table, c.chain, len(got), len(want), want[i])
		case i >= len(want):
			return fmt.Errorf("netns: rules not in force: %s %s has %d rules, want %d (extra %q)", c.table, c.chain, len(got), len(want), got[i])
		case ruleShape(got[i]) != ruleShape(want[i]):
			return fmt.Errorf("netns: rules not in force: %s %s rule %d is %q, want %q", c.table, c.chain, i+1, got[i], want[i])
		}
	}
	return nil
}

// Verify reads the rules back with go-iptables from a thread inside ns and fails
// unless every airlock jump is the first rule of its built-in chain and every
// airlock chain holds exactly the rules s renders (so the output chain ends in
// a drop, and an attached namespace's inbound rules are those of its mode and
// ports). Attach and Recover call it before serving: those namespaces are
// shared with, or were left by, someone else. islandRules calls it on the
// island whose tables become the template of the later ones.
func (r execRunner) Verify(ctx context.Context, ns vnetns.NsHandle, backend string, s ruleSpec) error {
	bin := "iptables-nft"
	if backend == IPTablesLegacy {
		bin = "iptables-legacy"
	}
	return inNS(ns, func() error {
		// go-iptables execs the binary from this thread, so it reads this
		// namespace's tables.
		ipt, err := iptables.New(iptables.IPFamily(iptables.ProtocolIPv4), iptables.Path(bin), iptables.Timeout(5))
		if err != nil {
			return fmt.Errorf("netns: verify rules: %w", err)
		}
		for _, j := range s.jumps() {
			if err := ctx.Err(); err != nil {
				return err
			}
			rules, err := ipt.List(j.table, j.builtin)
			if err != nil {
				return fmt.Errorf("netns: verify rules: list %s %s: %w", j.table, j.builtin, err)
			}
			if err := checkJumps(j, rules); err != nil {
				return err
			}
		}
		order, want := s.chains()
		for _, c := range order {
			if err := ctx.Err(); err != nil {
				return err
			}
			listing, err := ipt.List(c.table, c.chain)
			if err != nil {
				return fmt.Errorf("netns: verify rules: list %s %s: %w", c.table, c.chain, err)
			}
			if err := checkChain(c, want[c], listing); err != nil {
				return err
			}
		}
		return nil
	})
}

// ErrNotAttached is CheckAttached's error for an id that names no attached
// sandbox.
var ErrNotAttached = errors.New("netns: no attached sandbox")

// CheckAttached verifies that the rules of attached sandbox id are still in
// force in its namespace, as Attach left them: every airlock jump is the
// first rule of its built-in chain and the output chain ends in a drop. A
// rule removed or put above ours by someone with CAP_NET_ADMIN in the
// namespace makes it fail, naming what it found, and so does any change to
// the airlock chains (an inbound port's rules removed, a rule added). It
// changes nothing.
func (m *Manager) CheckAttached(ctx context.Context, id string) error {
	s, ok := m.Get(id)
	if !ok || !s.Attached {
		return fmt.Errorf("%w %q", ErrNotAttached, id)
	}
	st, err := m.readState(id)
	if err != nil {
		return fmt.Errorf("netns: check %s: read state: %w", id, err)
	}
	h, err := vnetns.GetFromPath(s.Path)
	if err != nil {
		return fmt.Errorf("netns: check %s: open %s: %w", id, s.Path, err)
	}
	defer h.Close()
	if err := m.ipt.Verify(ctx, h, st.Backend, m.ruleSpec(true, st.inbound())); err != nil {
		return err
	}
	links, err := linkNames(h)
	if err != nil {
		return fmt.Errorf("netns: check %s: %w", id, err)
	}
	return checkL2Guard(h, links)
}
