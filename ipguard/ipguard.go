package ipguard

import (
	"fmt"
	"net/netip"
)

// Class names why an address is refused.
type Class string

// Classes of refused addresses.
const (
	ClassPublic        Class = "public"
	ClassUnspecified   Class = "unspecified"
	ClassLoopback      Class = "loopback"
	ClassPrivate       Class = "private"
	ClassCGNAT         Class = "cgnat"
	ClassLinkLocal     Class = "link_local"
	ClassMetadata      Class = "metadata"
	ClassMulticast     Class = "multicast"
	ClassBroadcast     Class = "broadcast"
	ClassReserved      Class = "reserved"
	ClassDocumentation Class = "documentation"
	ClassBenchmark     Class = "benchmark"
	ClassUniqueLocal   Class = "unique_local"
	ClassTunnel        Class = "tunnel"
	ClassOwn           Class = "gateway_own"
	ClassInvalid       Class = "invalid"
)

type rangeClass struct {
	prefix netip.Prefix
	class  Class
}

// metadata addresses are checked before their enclosing ranges. 168.63.129.16
// (Azure's wire server) sits in public space and must be named on its own.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack, DigitalOcean
	netip.MustParseAddr("169.254.170.2"),   // AWS ECS task metadata
	netip.MustParseAddr("169.254.169.123"), // AWS time sync
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	netip.MustParseAddr("168.63.129.16"),   // Azure wire server
	netip.MustParseAddr("192.0.0.192"),     // Oracle Cloud
	netip.MustParseAddr("fd00:ec2::254"),   // AWS IMDS over IPv6
	netip.MustParseAddr("fd00:ec2::23"),    // AWS DNS over IPv6
}

var v4Ranges = []rangeClass{
	{netip.MustParsePrefix("0.0.0.0/8"), ClassUnspecified},
	{netip.MustParsePrefix("10.0.0.0/8"), ClassPrivate},
	{netip.MustParsePrefix("100.64.0.0/10"), ClassCGNAT},
	{netip.MustParsePrefix("127.0.0.0/8"), ClassLoopback},
	{netip.MustParsePrefix("169.254.0.0/16"), ClassLinkLocal},
	{netip.MustParsePrefix("172.16.0.0/12"), ClassPrivate},
	{netip.MustParsePrefix("192.0.0.0/24"), ClassReserved},
	{netip.MustParsePrefix("192.0.2.0/24"), ClassDocumentation},
	{netip.MustParsePrefix("192.88.99.0/24"), ClassReserved},
	{netip.MustParsePrefix("192.168.0.0/16"), ClassPrivate},
	{netip.MustParsePrefix("198.18.0.0/15"), ClassBenchmark},
	{netip.MustParsePrefix("198.51.100.0/24"), ClassDocumentation},
	{netip.MustParsePrefix("203.0.113.0/24"), ClassDocumentation},
	{netip.MustParsePrefix("224.0.0.0/4"), ClassMulticast},
	{netip.MustParsePrefix("255.255.255.255/32"), ClassBroadcast},
	{netip.MustParsePrefix("240.0.0.0/4"), ClassReserved},
}

var v6Ranges = []rangeClass{
	{netip.MustParsePrefix("::/128"), ClassUnspecified},
	{netip.MustParsePrefix("::1/128"), ClassLoopback},
	{netip.MustParsePrefix("100::/64"), ClassReserved},
	{netip.MustParsePrefix("2001::/32"), ClassTunnel},
	{netip.MustParsePrefix("2001:db8::/32"), ClassDocumentation},
	{netip.MustParsePrefix("2001:10::/28"), ClassReserved},
	{netip.MustParsePrefix("2001:20::/28"), ClassReserved},
	{netip.MustParsePrefix("fc00::/7"), ClassUniqueLocal},
	{netip.MustParsePrefix("fe80::/10"), ClassLinkLocal},
	{netip.MustParsePrefix("fec0::/10"), ClassPrivate},
	{netip.MustParsePrefix("ff00::/8"), ClassMulticast},
}

var (
	mapped4   = netip.MustParsePrefix("::ffff:0:0/96")
	compat4   = netip.MustParsePrefix("::/96")
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	nat64Loc  = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour = netip.MustParsePrefix("2002::/16")
	global6   = netip.MustParsePrefix("2000::/3")
)

// Classify returns the class of a, judging IPv6 forms that embed an IPv4 address
// by the address they embed. Only ClassPublic is reachable by default.
func Classify(a netip.Addr) Class {
	if !a.IsValid() || a.Zone() != "" {
		return ClassInvalid
	}
	a = a.Unmap()
	for _, m := range metadataAddrs {
		if a == m {
			return ClassMetadata
		}
	}
	if a.Is4() {
		for _, r := range v4Ranges {
			if r.prefix.Contains(a) {
				return r.class
			}
		}
		return ClassPublic
	}
	b := a.As16()
	switch {
	case mapped4.Contains(a), nat64.Contains(a), nat64Loc.Contains(a):
		return embedded(b[12:16])
	case compat4.Contains(a) && a != netip.IPv6Unspecified() && a != netip.IPv6Loopback():
		return embedded(b[12:16])
	case sixToFour.Contains(a):
		return embedded(b[2:6])
	}
	for _, r := range v6Ranges {
		if r.prefix.Contains(a) {
			return r.class
		}
	}
	if !global6.Contains(a) {
		return ClassReserved
	}
	return ClassPublic
}

func embedded(b []byte) Class {
	c := Classify(netip.AddrFrom4([4]byte{b[0], b[1], b[2], b[3]}))
	return c
}

// Guard decides whether an address may be dialed or returned to a sandbox.
// It is immutable and safe for concurrent use.
type Guard struct {
	allow []netip.Prefix
	own   map[netip.Addr]struct{}
}

// New builds a Guard. allow lists prefixes an operator opened (an internal
// registry, a test network); own lists the gateway's own addresses, which are
// refused even inside an allowed prefix.
func New(allow []netip.Prefix, own []netip.Addr) *Guard {
	g := &Guard{allow: make([]netip.Prefix, 0, len(allow)), own: make(map[netip.Addr]struct{}, len(own))}
	for _, p := range allow {
		g.allow = append(g.allow, p.Masked())
	}
	for _, a := range own {
		g.own[a.Unmap()] = struct{}{}
	}
	return g
}

// BlockedError says an address was refused and why.
type BlockedError struct {
	Addr  netip.Addr
	Class Class
}

func (e *BlockedError) Error() string {
	return fmt.Sprintf("address %s refused: %s", e.Addr, e.Class)
}

// Check returns nil if a may be reached, or a *BlockedError.
func (g *Guard) Check(a netip.Addr) error {
	u := a.Unmap()
	if _, ok := g.own[u]; ok {
		return &BlockedError{Addr: a, Class: ClassOwn}
	}
	c := Classify(u)
	if c == ClassPublic {
		return nil
	}
	if c == ClassInvalid {
		return &BlockedError{Addr: a, Class: c}
	}
	for _, p := range g.allow {
		if p.Contains(u) || p.Contains(a) {
			return nil
		}
	}
	return &BlockedError{Addr: a, Class: c}
}

// ParsePrefixes parses CIDR strings from a config, naming the bad entry. A bare
// address becomes a single-address prefix.
func ParsePrefixes(field string, cidrs []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for i, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("%s[%d]: %q is not a CIDR or address", field, i, s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
