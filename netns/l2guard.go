package netns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The link-layer guard of an attached namespace. iptables sees what the IP
// stack sends; a workload holding CAP_NET_RAW (a Kubernetes pod, by default)
// can also write whole frames with an AF_PACKET socket, which no iptables
// chain sees: an IPv4 datagram straight to the network, ARP or any ethertype
// carrying data, spoofed ARP that poisons its neighbours. The guard is an
// nftables netdev table with an egress chain on each of the namespace's
// interfaces (the egress hook sees AF_PACKET frames, PACKET_QDISC_BYPASS
// included; kernel 5.17 and later, with CONFIG_NETFILTER_EGRESS and
// CONFIG_IP_ROUTE_CLASSID) whose policy is drop, and which lets out
//   - ARP the kernel writes (no socket: ARP written by a socket is dropped
//     first);
//   - frames that carry a route (skb dst): the IP stack routed them, so they
//     went through the iptables rules; a packet socket's frame has none.
// conntrack, which would say the same, cannot be asked from the netdev
// family. The workload cannot change the guard without CAP_NET_ADMIN (which
// it must not hold, as for the iptables rules).

// l2GuardTable names the guard's table in the namespace.
const l2GuardTable = "airlock-l2guard"

var l2GuardT = &nftables.Table{Name: l2GuardTable, Family: nftables.TableFamilyNetdev}

// l2GuardChain names the egress chain of one interface.
func l2GuardChain(link string) string { return "egress-" + link }

// l2GuardRules are the guard's rules, the same for every interface.
func l2GuardRules() [][]expr.Any {
	arp := binary.BigEndian.AppendUint16(nil, unix.ETH_P_ARP)
	return [][]expr.Any{
		{ // ARP from a socket (a packet socket: the kernel's has none)
			&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: arp},
			&expr.Meta{Key: expr.MetaKeySKUID, Register: 1}, // no socket: the rule stops here
			&expr.Counter{},
			&expr.Verdict{Kind: expr.VerdictDrop},
		},
		{ // the kernel's ARP
			&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: arp},
			&expr.Verdict{Kind: expr.VerdictAccept},
		},
		{ // a routed frame: the IP stack's, past iptables
			// meta rtclassid reads the route (the rt expression is not
			// allowed in the netdev family); no route: the rule stops here.
			&expr.Meta{Key: expr.MetaKeyRTCLASSID, Register: 1},
			&expr.Verdict{Kind: expr.VerdictAccept},
		},
		{ // the rest (the policy drops it too; this counts it)
			&expr.Counter{},
			&expr.Verdict{Kind: expr.VerdictDrop},
		},
	}
}

// guardedLinks are the links the guard covers: all but loopback (a frame
// written to lo stays in the namespace).
func guardedLinks(links []string) []string {
	return slices.DeleteFunc(slices.Clone(links), func(l string) bool { return l == "lo" })
}

// installL2Guard replaces the namespace's guard table with one covering
// links. An error (a kernel without netdev egress hooks) fails the attach:
// without the guard a packet socket leaves unseen.
func installL2Guard(ns vnetns.NsHandle, links []string) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return fmt.Errorf("link-layer guard: %w", err)
	}
	if err := removeL2Guard(ns); err != nil {
		return err
	}
	c.AddTable(l2GuardT)
	prio := nftables.ChainPriorityFilter
	drop := nftables.ChainPolicyDrop
	for _, l := range guardedLinks(links) {
		ch := c.AddChain(&nftables.Chain{Name: l2GuardChain(l), Table: l2GuardT, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookEgress, Priority: prio, Policy: &drop, Device: l})
		for _, r := range l2GuardRules() {
			c.AddRule(&nftables.Rule{Table: l2GuardT, Chain: ch, Exprs: r})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("link-layer guard (nftables netdev egress: kernel 5.17 or later with CONFIG_NETFILTER_EGRESS and CONFIG_IP_ROUTE_CLASSID): %w", err)
	}
	return nil
}

// removeL2Guard deletes the guard table; none is no error.
func removeL2Guard(ns vnetns.NsHandle) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return fmt.Errorf("link-layer guard: %w", err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyNetdev)
	if err != nil {
		return fmt.Errorf("link-layer guard: list tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == l2GuardTable {
			c.DelTable(l2GuardT)
			if err := c.Flush(); err != nil {
				return fmt.Errorf("link-layer guard: delete: %w", err)
			}
		}
	}
	return nil
}

// checkL2Guard reports whether the guard covers every link with its rules.
func checkL2Guard(ns vnetns.NsHandle, links []string) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return fmt.Errorf("netns: link-layer guard: %w", err)
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyNetdev)
	if err != nil {
		return fmt.Errorf("netns: link-layer guard: list chains: %w", err)
	}
	want := len(l2GuardRules())
	var errs []error
	for _, l := range guardedLinks(links) {
		i := slices.IndexFunc(chains, func(ch *nftables.Chain) bool {
			return ch.Table.Name == l2GuardTable && ch.Name == l2GuardChain(l)
		})
		if i < 0 {
			errs = append(errs, fmt.Errorf("netns: rules not in force: no link-layer guard on %s (table netdev %s)", l, l2GuardTable))
			continue
		}
		ch := chains[i]
		if ch.Hooknum == nil || *ch.Hooknum != *nftables.ChainHookEgress || ch.Policy == nil || *ch.Policy != nftables.ChainPolicyDrop {
			errs = append(errs, fmt.Errorf("netns: rules not in force: link-layer guard chain %s is not an egress chain", ch.Name))
			continue
		}
		rules, err := c.GetRules(l2GuardT, ch)
		if err != nil {
			errs = append(errs, fmt.Errorf("netns: link-layer guard %s: %w", ch.Name, err))
			continue
		}
		if len(rules) != want {
			errs = append(errs, fmt.Errorf("netns: rules not in force: link-layer guard on %s has %d rules, want %d", l, len(rules), want))
		}
	}
	return errors.Join(errs...)
}
