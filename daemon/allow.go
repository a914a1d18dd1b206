package daemon

import (
	"fmt"
	"slices"
	"strings"

	"golang.org/x/net/idna"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/policy"
)

// parseAllow parses a sandbox's own allow entries with the policy's parser
// (--allow's spellings). Every check runs on what the policy will enforce,
// and an entry is refused naming it and its index: one that does not parse
// (400); for a caller other than root, one of the parsed list's own entries
// that reaches past one registrable domain (callerAllowBounded, 403); then
// one not written as enforced (allowVerbatim, 400).
func parseAllow(allow []string, root bool) (*policy.AllowList, *api.Error) {
	if len(allow) > maxAllow {
		return nil, apiErr(api.CodeInvalidField, "allow", "allow: %d entries, at most %d", len(allow), maxAllow)
	}
	norm := make([]string, len(allow))
	for i, a := range allow {
		n, err := policy.NormalizeAllow(a)
		if err != nil {
			return nil, apiErr(api.CodeInvalidField, fmt.Sprintf("allow[%d]", i), "allow[%d]: %+.80q: %v", i, a, err)
		}
		norm[i] = n
	}
	l, err := policy.NewAllowList(norm)
	if err != nil {
		return nil, apiErr(api.CodeInvalidField, "allow", "allow: %v", err)
	}
	if !root {
		for _, n := range l.Entries() {
			if why := callerAllowBounded(n); why != "" {
				i := slices.Index(norm, n)
				return nil, apiErr(api.CodeForbidden, fmt.Sprintf("allow[%d]", i),
					"allow[%d]: %+.80q is enforced as %q, which %s; only root may ask for it (a wildcard must sit below a registrable domain, as in *.example.com or **.api.example.com)", i, allow[i], n, why)
			}
		}
	}
	for i, a := range allow {
		if !allowVerbatim(a, norm[i]) {
			return nil, apiErr(api.CodeInvalidField, fmt.Sprintf("allow[%d]", i),
				"allow[%d]: %+.80q is enforced as %q: write it as enforced (no invisible, fullwidth or mapped characters, no trailing dot, no other spelling of an address or port)", i, a, norm[i])
		}
	}
	return l, nil
}

// callerAllowBounded says why a normalized allow entry is refused to a
// caller other than root ("" when it is not): a wildcard that reaches past
// one registrable domain by the Public Suffix List (hostname.WildcardBounded:
// "*.com", "**.co.uk:*", "*.github.io", "**.amazonaws.com") would open
// nearly every host, or every tenant of a shared domain, which is turning
// enforcement off by another name. An exact host or IP names one host.
func callerAllowBounded(entry string) string {
	pattern, _ := splitEntryPort(entry)
	if hostname.WildcardBounded(pattern) {
		return ""
	}
	return "reaches past one registrable domain (over a public suffix such as com, co.uk or github.io, or at any depth under a registrable domain)"
}

// allowVerbatim reports whether the entry as written is the entry enforced
// (n, its normalized form), up to ASCII case: n itself, or n with its
// punycode labels shown as Unicode ("bücher.example" for
// "xn--bcher-kva.example"). Anything normalization drops or maps (a soft
// hyphen, a zero-width space, a BOM, a combining mark NFC composes,
// fullwidth letters or dots, a trailing dot, 0x7f.1 for 127.0.0.1, port
// 0443) makes the two differ, so what a reviewer reads is what is enforced.
func allowVerbatim(written, n string) bool {
	w := asciiLower(written)
	if w == n {
		return true
	}
	pattern, port := splitEntryPort(n)
	if strings.Contains(pattern, ":") { // an IPv6 literal is ASCII
		return false
	}
	prefix := ""
	switch {
	case strings.HasPrefix(pattern, "**."):
		prefix, pattern = "**.", pattern[3:]
	case strings.HasPrefix(pattern, "*."):
		prefix, pattern = "*.", pattern[2:]
	}
	u, err := idna.ToUnicode(pattern)
	if err != nil || u == pattern {
		return false
	}
	return w == prefix+u+port
}

// splitEntryPort splits a normalized allow entry into its pattern and its
// port suffix (":443", ":*" or ""); a bracketed IPv6 literal loses its
// brackets, an unbracketed one has no port.
func splitEntryPort(n string) (pattern, port string) {
	if rest, ok := strings.CutPrefix(n, "["); ok {
		addr, p, _ := strings.Cut(rest, "]")
		return addr, p
	}
	if strings.Count(n, ":") == 1 {
		i := strings.IndexByte(n, ':')
		return n[:i], n[i:]
	}
	return n, ""
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
