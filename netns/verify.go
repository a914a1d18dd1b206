package netns

import (
	"context"
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
