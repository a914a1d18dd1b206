package hostname

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
)

// Limits from RFC 1035 (in presentation form, without the trailing dot).
const (
	MaxNameLength  = 253
	MaxLabelLength = 63
	// maxInput bounds the work done on hostile input before IDNA runs.
	maxInput = 1024
)

// Error explains why a name was rejected. It names the problem, never echoes an
// unbounded input.
type Error struct {
	Input  string // the input, cut to 80 bytes and quoted
	Reason string
}

func (e *Error) Error() string { return fmt.Sprintf("invalid host %s: %s", e.Input, e.Reason) }

// ErrInvalid matches every *Error with errors.Is.
var ErrInvalid = errors.New("invalid host")

// Is lets errors.Is(err, ErrInvalid) match.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

func bad(s, reason string) error {
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return &Error{Input: strconv.Quote(s), Reason: reason}
}

// Normalize returns the canonical form of a host name or IP literal, or an error
// naming what is wrong with it. It is idempotent: Normalize(Normalize(x)) ==
// Normalize(x) for every x it accepts.
func Normalize(s string) (string, error) {
	if s == "" {
		return "", bad(s, "empty")
	}
	if len(s) > maxInput {
		return "", bad(s, "too long")
	}
	if s[0] == '[' {
		if s[len(s)-1] != ']' {
			return "", bad(s, "unterminated IPv6 literal")
		}
		a, err := netip.ParseAddr(s[1 : len(s)-1])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return "", bad(s, "bad IPv6 literal")
		}
		return a.Unmap().String(), nil
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c < 0x20 || c == 0x7f:
			return "", bad(s, "control byte")
		case c == ' ', c == '%', c == '\\', c == '/', c == '@', c == '?', c == '#',
			c == '[', c == ']', c == '*', c == '"', c == '\'', c == '<', c == '>',
			c == '^', c == '|', c == '`', c == '{', c == '}', c == ',', c == ';', c == '=':
			return "", bad(s, fmt.Sprintf("forbidden character %q", c))
		}
	}
	if strings.IndexByte(s, ':') >= 0 {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return "", bad(s, "colon in host name")
		}
		return a.Unmap().String(), nil
	}
	if a, ok := ParseIP(s); ok {
		return a.String(), nil
	}
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return "", bad(s, "empty")
	}
	if isASCIILower(s) {
		// Fast path: already canonical ASCII still needs the label checks.
		if err := checkLDH(s); err != nil {
			return "", err
		}
		return s, nil
	}
	out, err := idna.Lookup.ToASCII(s)
	if err != nil {
		return "", bad(s, "not a valid internationalized name")
	}
	out = strings.ToLower(out)
	// A Unicode full stop mapped to a trailing dot: strip it like an ASCII one.
	out = strings.TrimSuffix(out, ".")
	if a, ok := ParseIP(out); ok {
		// Fullwidth digits map to an IP literal: treat it as one.
		return a.String(), nil
	}
	if err := checkLDH(out); err != nil {
		return "", err
	}
	return out, nil
}

// isASCIILower reports whether s holds only a-z, 0-9, '-' and '.', the output
// alphabet of Normalize for names.
func isASCIILower(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// checkLDH enforces letters-digits-hyphen labels, label and name lengths, and
// that the last label is not numeric (a host ending in a number is an IPv4
// spelling that failed to parse, and resolvers disagree about what it means).
func checkLDH(s string) error {
	if len(s) > MaxNameLength {
		return bad(s, fmt.Sprintf("name longer than %d bytes", MaxNameLength))
	}
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '.' {
			c := s[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return bad(s, fmt.Sprintf("forbidden character %q", c))
			}
			continue
		}
		label := s[start:i]
		switch {
		case label == "":
			return bad(s, "empty label")
		case len(label) > MaxLabelLength:
			return bad(s, fmt.Sprintf("label longer than %d bytes", MaxLabelLength))
		case label[0] == '-' || label[len(label)-1] == '-':
			return bad(s, "label starts or ends with a hyphen")
		}
		if i == len(s) && isNumeric(label) {
			return bad(s, "last label is numeric")
		}
		start = i + 1
	}
	return nil
}

func isNumeric(label string) bool {
	if strings.HasPrefix(label, "0x") || strings.HasPrefix(label, "0X") {
		return true
	}
	for i := 0; i < len(label); i++ {
		if label[i] < '0' || label[i] > '9' {
			return false
		}
	}
	return true
}

// Suffixes returns host and every parent domain, longest first:
// "a.pypi.org" -> ["a.pypi.org", "pypi.org", "org"]. An IP literal returns
// just itself. host must already be normalized.
func Suffixes(host string) []string {
	if host == "" {
		return nil
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return []string{host}
	}
	n := strings.Count(host, ".") + 1
	out := make([]string, 0, n)
	out = append(out, host)
	for i := 0; i < len(host); i++ {
		if host[i] == '.' {
			out = append(out, host[i+1:])
		}
	}
	return out
}

// SplitHostPort splits "host", "host:port", "[v6]" or "[v6]:port", normalizes
// the host and returns defaultPort when no port is given. A port must be
// decimal digits in 1..65535.
func SplitHostPort(s string, defaultPort int) (host string, port int, err error) {
	if s == "" {
		return "", 0, bad(s, "empty")
	}
	h, p := s, ""
	switch {
	case s[0] == '[':
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", 0, bad(s, "unterminated IPv6 literal")
		}
		h = s[:end+1]
		rest := s[end+1:]
		if rest != "" {
			if rest[0] != ':' {
				return "", 0, bad(s, "junk after IPv6 literal")
			}
			p = rest[1:]
			if p == "" {
				return "", 0, bad(s, "empty port")
			}
		}
	case strings.Count(s, ":") == 1:
		i := strings.IndexByte(s, ':')
		h, p = s[:i], s[i+1:]
		if p == "" {
			return "", 0, bad(s, "empty port")
		}
	case strings.Count(s, ":") > 1:
		// Unbracketed IPv6 literal, no port.
	}
	port = defaultPort
	if p != "" {
		port, err = ParsePort(p)
		if err != nil {
			return "", 0, bad(s, err.Error())
		}
	}
	if port < 1 || port > 65535 {
		return "", 0, bad(s, "no port")
	}
	host, err = Normalize(h)
	if err != nil {
		return "", 0, err
	}
	return host, port, nil
}

// ParsePort parses a decimal port in 1..65535 with no sign and at most 5 digits.
func ParsePort(p string) (int, error) {
	if p == "" || len(p) > 5 {
		return 0, errors.New("bad port")
	}
	n := 0
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return 0, errors.New("bad port")
		}
		n = n*10 + int(p[i]-'0')
	}
	if n < 1 || n > 65535 {
		return 0, errors.New("port out of range")
	}
	return n, nil
}

// JoinHostPort formats a normalized host and port, bracketing IPv6.
func JoinHostPort(host string, port int) string {
	if strings.IndexByte(host, ':') >= 0 {
		return "[" + host + "]:" + strconv.Itoa(port)
	}
	return host + ":" + strconv.Itoa(port)
}

// ParseIP parses an IP literal the way the lenient resolvers and URL parsers do,
// so that a spelling they accept cannot slip past a check that expected dotted
// quads: IPv4 in 1 to 4 parts, each decimal, octal (leading 0) or hex (0x), the
// last part filling the remaining bytes (2130706433, 0177.1, 0x7f.0.0.1), one
// trailing dot allowed; and IPv6 without a zone. IPv4-mapped IPv6 is unmapped.
func ParseIP(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	if strings.IndexByte(s, ':') >= 0 {
		a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
		if err != nil || a.Zone() != "" {
			return netip.Addr{}, false
		}
		return a.Unmap(), true
	}
	s = strings.TrimSuffix(s, ".")
	// Split on dots without allocating: this runs for every name a sandbox sends.
	var nums [4]uint64
	n := 0
	for start := 0; ; n++ {
		end := strings.IndexByte(s[start:], '.')
		part := s[start:]
		if end >= 0 {
			part = s[start : start+end]
		}
		if n == 4 {
			return netip.Addr{}, false
		}
		v, ok := parseIPv4Part(part)
		if !ok {
			return netip.Addr{}, false
		}
		nums[n] = v
		if end < 0 {
			break
		}
		start += end + 1
	}
	last := n
	for i := 0; i < last; i++ {
		if nums[i] > 255 {
			return netip.Addr{}, false
		}
	}
	if nums[last] >= 1<<(8*(4-last)) {
		return netip.Addr{}, false
	}
	v := nums[last]
	for i := 0; i < last; i++ {
		v |= nums[i] << (8 * (3 - i))
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

func parseIPv4Part(p string) (uint64, bool) {
	if p == "" {
		return 0, false
	}
	base, digits := 10, p
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		base, digits = 16, p[2:]
		if digits == "" {
			return 0, true
		}
	case len(p) > 1 && p[0] == '0':
		base, digits = 8, p[1:]
	}
	if len(digits) > 32 {
		return 0, false
	}
	// Parse by hand: strconv allocates an error for every name that is not a
	// number, and almost every name is not.
	var n uint64
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case base == 16 && c >= 'a' && c <= 'f':
			d = uint64(c-'a') + 10
		case base == 16 && c >= 'A' && c <= 'F':
			d = uint64(c-'A') + 10
		default:
			return 0, false
		}
		if d >= uint64(base) {
			return 0, false
		}
		n = n*uint64(base) + d
		if n > 0xffffffff {
			return 0, false
		}
	}
	return n, true
}

// NormalizePattern normalizes a host pattern from a config or policy list:
// an exact host, "*.domain" (exactly one more label) or "**.domain" (one or
// more). The apex is never matched by a wildcard; list it on its own.
func NormalizePattern(p string) (string, error) {
	prefix := ""
	switch {
	case strings.HasPrefix(p, "**."):
		prefix, p = "**.", p[3:]
	case strings.HasPrefix(p, "*."):
		prefix, p = "*.", p[2:]
	}
	h, err := Normalize(p)
	if err != nil {
		return "", err
	}
	if prefix != "" {
		if _, isIP := ParseIP(h); isIP {
			return "", bad(p, "wildcard on an IP address")
		}
	}
	return prefix + h, nil
}

// MatchPattern reports whether the normalized host matches a pattern returned by
// NormalizePattern.
func MatchPattern(pattern, host string) bool {
	switch {
	case strings.HasPrefix(pattern, "**."):
		dom := pattern[2:] // ".domain"
		return len(host) > len(dom) && strings.HasSuffix(host, dom)
	case strings.HasPrefix(pattern, "*."):
		dom := pattern[1:]
		if len(host) <= len(dom) || !strings.HasSuffix(host, dom) {
			return false
		}
		return strings.IndexByte(host[:len(host)-len(dom)], '.') < 0
	}
	return pattern == host
}
