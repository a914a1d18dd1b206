package netns

import (
	"context"
	"errors"
	"fmt"
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

// Verify reads the rules back with go-iptables from a thread inside ns and fails
// unless every airlock jump is the first rule of its built-in chain and the
// output chain ends in a drop. Attach and Recover call it before serving: those
// namespaces are shared with, or were left by, someone else.
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
		out, err := ipt.List("filter", chainOut)
		if err != nil {
			return fmt.Errorf("netns: verify rules: list filter %s: %w", chainOut, err)
		}
		if len(out) == 0 || out[len(out)-1] != "-A "+chainOut+" -j DROP" {
			return fmt.Errorf("netns: rules not in force: filter %s does not end in DROP", chainOut)
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
// namespace makes it fail, naming what it found. It changes nothing.
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
	return m.ipt.Verify(ctx, h, st.Backend, m.ruleSpec(true))
}
