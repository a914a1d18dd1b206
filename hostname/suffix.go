package hostname

import (
	"net/netip"
	"strings"

	"golang.org/x/net/publicsuffix"
)

// probeLabel stands for "any label" when asking the Public Suffix List what a
// wildcard covers. A wildcard rule of the list ("*.compute-1.amazonaws.com")
// matches it like any other label; an explicit rule never names it.
const probeLabel = "airlock-probe"

// BelowRegistrable reports whether a normalized name lies strictly below its
// registrable domain (its eTLD+1) by the Public Suffix List, ICANN and private
// sections (golang.org/x/net/publicsuffix): "api.example.com",
// "a.example.co.uk" and "x.foo.github.io" do; "example.com", "foo.github.io",
// "co.uk", "com", a name the list makes a suffix of its own
// ("x.compute-1.amazonaws.com"), a single label and an IP literal do not.
func BelowRegistrable(name string) bool {
	if name == "" {
		return false
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return false
	}
	reg, err := publicsuffix.EffectiveTLDPlusOne(name)
	return err == nil && reg != name
}

// WildcardBounded reports whether a normalized wildcard pattern (as
// NormalizePattern returns it) stays inside one registrable domain by the
// Public Suffix List, so it never covers names of different owners:
//
//   - "*.D" when a name one label under D is below a registrable domain: D is
//     a registrable domain or under one ("*.example.com", "*.example.co.uk",
//     "*.foo.github.io"), not a public suffix ("*.com", "*.co.uk",
//     "*.github.io", "*.s3.amazonaws.com") nor the parent of a wildcard rule
//     of the list ("*.compute-1.amazonaws.com").
//   - "**.D" when, in addition, D itself is below a registrable domain
//     ("**.api.example.com", not "**.example.com"): the list can say what a
//     name is, but not whether a registrable domain hands names under it to
//     other owners ("**.amazonaws.com" holds every S3 bucket), so a wildcard
//     of any depth starts below one.
//
// A pattern without a wildcard is bounded (it names one host); an empty
// pattern is not.
func WildcardBounded(pattern string) bool {
	if d, ok := strings.CutPrefix(pattern, "**."); ok {
		return BelowRegistrable(d) && BelowRegistrable(probeLabel+"."+d)
	}
	if d, ok := strings.CutPrefix(pattern, "*."); ok {
		return BelowRegistrable(probeLabel + "." + d)
	}
	return pattern != "" && !strings.Contains(pattern, "*")
}
