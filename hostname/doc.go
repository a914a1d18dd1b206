// Package hostname owns the one normalizer every airlock caller uses for names
// that come from a sandbox: a CONNECT target, a URL or Host header, a TLS SNI,
// a DNS question, a secret binding's host. Two spellings of one destination
// must become one string before policy sees it, or an allowlist can be walked
// around.
//
// Normalize lowercases, strips one trailing dot, turns Unicode into punycode
// (UTS #46 lookup rules with STD3 and hyphen checks), and rejects NUL, control
// bytes, escapes, spaces, empty labels, labels over 63 bytes and names over
// 253. IP literals in any spelling a resolver or browser accepts (decimal
// integer, octal, hex, shortened dotted forms, bracketed IPv6, IPv4-mapped
// IPv6) become the canonical netip string, so 2130706433 and 0x7f.1 are both
// 127.0.0.1. Suffixes precomputes the keys policy matches host lists against.
// BelowRegistrable and WildcardBounded are the one Public Suffix List rule for
// how far a wildcard may reach.
//
// ValidNode is the one rule for a node name (audit.node).
//
// Entry points: Normalize, SplitHostPort, NormalizePattern, Suffixes,
// WildcardBounded, ValidNode.
//
// hostname must never import: any other airlock package.
package hostname
