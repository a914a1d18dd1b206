package daemon

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/airlock-dev/airlock/api"
)

// TestAllowCheckedAsEnforced pins the holes in a sandbox's own allow
// entries found by the security review: the bound on a caller other than
// root ran on the entries as written, before normalization, so a wildcard
// over a top-level domain refused as "**.com:*" was accepted with an
// invisible character or a trailing dot after it ("**.com.\u00ad:*") and
// enforced as "**.com:*"; and the bound counted labels, so wildcards over a
// public suffix ("**.co.uk", "*.github.io", "*.s3.amazonaws.com") or over
// every tenant of a shared domain ("**.amazonaws.com") were accepted. Now
// the bound runs on the parsed list's entries against the Public Suffix
// List, and an entry not written as enforced is refused for every caller.
// A refused create prepares nothing.
func TestAllowCheckedAsEnforced(t *testing.T) {
	const (
		ok        = http.StatusCreated
		forbidden = http.StatusForbidden
		invalid   = http.StatusBadRequest
	)
	tests := []struct {
		name  string
		entry string
		root  bool
		want  int
	}{
		// Normalization would drop a code point: the bound sees what is enforced.
		{"soft hyphen after a trailing dot", "**.com.\u00ad:*", false, forbidden},
		{"zero-width space after a trailing dot", "**.com.\u200b:*", false, forbidden},
		{"BOM after a trailing dot", "**.org.\ufeff:*", false, forbidden},
		{"variation selector after a trailing dot", "**.net.\ufe0f", false, forbidden},
		{"combining grapheme joiner after a trailing dot", "*.io.\u034f:*", false, forbidden},
		{"soft hyphen inside a label", "*.exam\u00adple.com", false, invalid},
		{"zero-width space inside a label", "*.exam\u200bple.com", false, invalid},
		{"BOM before a label", "*.\ufeffexample.com", false, invalid},
		{"combining mark NFC composes", "*.bu\u0308cher.example.com", false, invalid},
		{"invisible, root too", "**.com.\u00ad:*", true, invalid},
		{"soft hyphen inside a label, root", "api.exam\u00adple.com", true, invalid},
		// A trailing dot.
		{"trailing dot", "*.example.com.", false, invalid},
		{"trailing dot, root", "pypi.org.", true, invalid},
		{"trailing dot on a top-level wildcard", "**.com.:*", false, forbidden},
		// Case.
		{"ascii case", "*.Example.COM:443", false, ok},
		{"ascii case of a top-level wildcard", "**.COM:*", false, forbidden},
		{"kelvin sign maps to k", "*.\u212aelvin.example.com", false, invalid},
		{"kelvin sign, root", "\u212aelvin.example.com", true, invalid},
		// Fullwidth and ideographic dots, fullwidth letters: IDNA maps them.
		{"fullwidth dot", "*.example\uff0ecom", false, invalid},
		{"ideographic full stop", "*.example\u3002com", false, invalid},
		{"fullwidth dot over a public suffix", "**.co\uff0euk:*", false, forbidden},
		{"fullwidth letters", "*.\uff45xample.com", false, invalid},
		// Punycode and Unicode spellings.
		{"unicode label", "*.bücher.example.com", false, ok},
		{"its punycode", "*.xn--bcher-kva.example.com", false, ok},
		{"upper-case punycode", "*.XN--BCHER-KVA.example.com", false, ok},
		{"upper-case unicode", "*.BÜCHER.example.com", false, invalid},
		{"unicode top-level domain", "**.рф:*", false, forbidden},
		{"punycode top-level domain", "**.xn--p1ai:*", false, forbidden},
		{"punycode registrable domain", "*.xn--e1afmkfd.xn--p1ai", false, ok},
		// Wildcards over public suffixes and shared domains.
		{"any depth over co.uk", "**.co.uk", false, forbidden},
		{"one label over co.uk", "*.co.uk:*", false, forbidden},
		{"under a registrable domain in co.uk", "*.example.co.uk", false, ok},
		{"over github.io", "*.github.io", false, forbidden},
		{"any depth over github.io", "**.github.io", false, forbidden},
		{"under a github.io site", "*.foo.github.io", false, ok},
		{"any depth over amazonaws.com", "**.amazonaws.com", false, forbidden},
		{"over the S3 suffix", "*.s3.amazonaws.com", false, forbidden},
		{"over a wildcard rule of the list", "*.compute-1.amazonaws.com:*", false, forbidden},
		{"any depth over a registrable domain", "**.example.com:*", false, forbidden},
		{"any depth below a registrable domain", "**.api.example.com:*", false, ok},
		{"one label under a registrable domain", "*.example.com:*", false, ok},
		{"over a name the list does not know", "*.example", false, forbidden},
		{"root may", "**.co.uk:*", true, ok},
		{"root may, top level", "**.com:*", true, ok},
		// Exact hosts and addresses name one host; other spellings are refused.
		{"bare top-level domain", "com:*", false, ok},
		{"a public suffix as a host", "github.io", false, ok},
		{"an IPv4 address on every port", "198.51.100.7:*", false, ok},
		{"an IPv6 address", "[2001:DB8::7]:443", false, ok},
		{"IPv4-mapped IPv6", "[::ffff:198.51.100.7]:*", false, invalid},
		{"hex IPv4", "0xc6.51.100.7:443", false, invalid},
		{"integer IPv4", "3325256711", false, invalid},
		{"port with a leading zero", "pypi.org:0443", false, invalid},
		{"everything", "*:*", false, invalid},
		{"a bare star", "*", false, invalid},
	}
	w := newFakeWorld(t)
	clients := map[bool]*apiClient{false: w.client(alice), true: w.client(0)}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := json.Marshal(api.CreateSandboxRequest{Allow: []string{"pypi.org", tt.entry}})
			if err != nil {
				t.Fatal(err)
			}
			before := w.exe.prepared.Load()
			r := clients[tt.root].json(t, "POST", "/v1/sandboxes", string(body))
			if r.status == ok {
				var sb api.Sandbox
				r.decode(t, &sb)
				defer clients[true].json(t, "DELETE", "/v1/sandboxes/"+sb.ID, "")
			}
			if r.status != tt.want {
				t.Fatalf("%+q (root %v): got %d %s, want %d", tt.entry, tt.root, r.status, r.body, tt.want)
			}
			if tt.want == ok {
				return
			}
			if e := r.apiError(t); e.Field != "allow[1]" {
				t.Errorf("%+q: got field %q, want allow[1] (%s)", tt.entry, e.Field, e.Message)
			}
			if n := w.exe.prepared.Load() - before; n != 0 {
				t.Errorf("%+q: %d sandboxes prepared for a refused entry, want 0", tt.entry, n)
			}
		})
	}
}
