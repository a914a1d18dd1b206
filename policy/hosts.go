package policy

import "github.com/airlock-dev/airlock/identity"

// Ports a preset host or a bare --allow HOST is reachable on (the library's
// default_ports), and the ports that carry DNS (its dns_ports).
const (
	PortHTTPS = identity.PortHTTPS
	PortHTTP  = identity.PortHTTP
	PortDNS   = identity.PortDNS
	PortDoT   = identity.PortDoT
)

// AnyPort as the port of an allow entry (HOST:*) means every port; DNS ports
// still need naming.
const AnyPort = identity.AnyPort

// NormalizeAllow returns the canonical form of one allow entry
// (identity.NormalizeAllow).
func NormalizeAllow(s string) (string, error) { return identity.NormalizeAllow(s) }

func normalizeAllow(s string) (string, error) { return identity.NormalizeAllow(s) }

func splitAllow(s string) (pattern, port string, err error) { return identity.SplitAllow(s) }
