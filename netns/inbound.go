package netns

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// InboundMode says what an attached namespace's rules make of traffic that
// arrives on its interfaces other than lo.
type InboundMode string

// Inbound modes.
const (
	// InboundCapture: arriving traffic is the workload's egress (a VM behind a
	// tap, a veth whose peer is the workload): TCP and DNS go to the
	// listeners, the rest is logged and dropped. The default.
	InboundCapture InboundMode = "capture"
	// InboundAccept: arriving traffic comes from the network to the
	// namespace (a pod on a bridge): new TCP connections to the namespace's
	// own addresses on Inbound.Ports (all TCP ports when none are listed) are
	// accepted and only their replies may leave; nothing arriving is sent to
	// the listeners, and the rest is logged and dropped.
	InboundAccept InboundMode = "accept"
)

// MaxInboundPorts bounds Inbound.Ports (each port is three rules).
const MaxInboundPorts = 32

// Inbound is Attach's choice for traffic arriving on the namespace's
// interfaces. The zero value is InboundCapture.
type Inbound struct {
	Mode InboundMode `json:"mode,omitempty"`
	// Ports are the TCP ports accepted in InboundAccept mode; empty accepts
	// every TCP port. Not allowed with InboundCapture.
	Ports []int `json:"ports,omitempty"`
}

// Validate checks in and names the bad field (inbound.mode, inbound.ports)
// and the allowed values.
func (in Inbound) Validate() error {
	switch in.Mode {
	case "", InboundCapture:
		if len(in.Ports) > 0 {
			return fmt.Errorf("inbound.ports: only with inbound.mode %q (mode %q captures every arriving connection)", InboundAccept, in.mode())
		}
		return nil
	case InboundAccept:
	default:
		return fmt.Errorf("inbound.mode: %.40q is not %q or %q", string(in.Mode), InboundCapture, InboundAccept)
	}
	if len(in.Ports) > MaxInboundPorts {
		return fmt.Errorf("inbound.ports: %d ports, at most %d (none accepts every TCP port)", len(in.Ports), MaxInboundPorts)
	}
	seen := map[int]bool{}
	for i, p := range in.Ports {
		if p < 1 || p > 65535 {
			return fmt.Errorf("inbound.ports[%d]: %d is not a TCP port (1-65535)", i, p)
		}
		if seen[p] {
			return fmt.Errorf("inbound.ports[%d]: port %d given twice", i, p)
		}
		seen[p] = true
	}
	return nil
}

// mode is Mode with the default filled in.
func (in Inbound) mode() InboundMode {
	if in.Mode == "" {
		return InboundCapture
	}
	return in.Mode
}

// normalized is in with the default mode and sorted ports, as state files
// keep it and rules render it.
func (in Inbound) normalized() Inbound {
	out := Inbound{Mode: in.mode()}
	if len(in.Ports) > 0 {
		out.Ports = slices.Clone(in.Ports)
		slices.Sort(out.Ports)
	}
	return out
}

// String is "capture", "accept all TCP ports" or "accept TCP 80,8080".
func (in Inbound) String() string {
	n := in.normalized()
	if n.Mode != InboundAccept {
		return string(n.Mode)
	}
	if len(n.Ports) == 0 {
		return "accept all TCP ports"
	}
	ports := make([]string, len(n.Ports))
	for i, p := range n.Ports {
		ports[i] = strconv.Itoa(p)
	}
	return "accept TCP " + strings.Join(ports, ",")
}

// renderAccept writes the rules of InboundAccept: per port (or once for all
// ports), a RETURN in nat PREROUTING so the connection's first packet is not
// logged as a drop, and in filter INPUT an accept of the connection's later
// packets, an NFLOG (counted as an accepted connection, not a drop) and an
// accept of its SYN; in filter OUTPUT an accept of exactly the replies.
// "Own address" is an address of the namespace (addrtype LOCAL) outside
// 127.0.0.0/8, which route_localnet would otherwise let arrive.
func (s ruleSpec) renderAccept(table string, b *strings.Builder) {
	ports := s.Inbound.normalized().Ports
	if len(ports) == 0 {
		ports = []int{0} // every port: no port match
	}
	// tcp is the tcp match for port p (0: none) and extra (--syn).
	tcp := func(opt string, p int, extra string) string {
		var m []string
		if p != 0 {
			m = append(m, opt, strconv.Itoa(p))
		}
		if extra != "" {
			m = append(m, extra)
		}
		if len(m) == 0 {
			return ""
		}
		return " -m tcp " + strings.Join(m, " ")
	}
	own := " -m addrtype --dst-type LOCAL"
	for _, p := range ports {
		syn := " -p tcp ! -d 127.0.0.0/8" + tcp("--dport", p, "--syn") + own
		switch table {
		case "nat":
			fmt.Fprintf(b, "-A %s%s -j RETURN\n", chainNatPre, syn)
		case "filter-in":
			later := " -p tcp ! -d 127.0.0.0/8" + tcp("--dport", p, "") + own
			fmt.Fprintf(b, "-A %s%s -m conntrack --ctstate ESTABLISHED --ctdir ORIGINAL -j ACCEPT\n", chainIn, later)
			fmt.Fprintf(b, "-A %s%s -m conntrack --ctstate NEW -j NFLOG --nflog-group %d --nflog-prefix %s --nflog-size %d\n", chainIn, syn, s.NFLogGroup, prefixInbound, nflogSize)
			fmt.Fprintf(b, "-A %s%s -m conntrack --ctstate NEW -j ACCEPT\n", chainIn, syn)
		case "filter-out":
			fmt.Fprintf(b, "-A %s -p tcp ! -s 127.0.0.0/8%s -m addrtype --src-type LOCAL -m conntrack --ctstate ESTABLISHED --ctdir REPLY -j ACCEPT\n", chainOut, tcp("--sport", p, ""))
		}
	}
}
