// Package ipguard owns the one list of addresses airlock never lets a sandbox
// reach by default: loopback, private, link-local and cloud metadata, CGNAT,
// multicast, unspecified, broadcast, reserved and documentation ranges, IPv6
// unique-local and site-local, and IPv6 forms that embed an IPv4 address
// (IPv4-mapped, IPv4-compatible, NAT64, 6to4), which are judged by the address
// they embed. Teredo is refused outright. The gateway's dialer and the DNS
// filter's rebinding check ask the same Guard, so what a sandbox is told and
// what the gateway dials are judged by one rule. An operator may allow
// prefixes; the gateway's own addresses stay refused even inside them.
//
// Entry points: New, (*Guard).Check, ParsePrefixes.
//
// ipguard must never import: any other airlock package.
package ipguard
