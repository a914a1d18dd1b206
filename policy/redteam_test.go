package policy

import (
	"context"
	"strings"
	"testing"
	"time"
)

func portIn(kind Kind, host string, port int) *Input {
	in := kindIn(kind, host)
	in.Destination.Port = port
	return in
}

func httpAt(method, host string, port int, path string) *Input {
	in := httpIn(method, host, path)
	in.Destination.Port = port
	if port == 80 {
		in.HTTP.Scheme = "http"
	}
	return in
}

func withBody(in *Input, size int64, headers map[string]string) *Input {
	in.HTTP.BodySize = size
	in.HTTP.Headers = headers
	return in
}

// TestRedTeamDefaultPolicy attacks the default policy through
// the real engine: an allowed registry on another port, a tunnel to a
// DNS port, git's fetch on a registry that is not a git host and a
// read with a body. Each row also has the request that must still
// pass, so a rule that denied everything would fail too.
func TestRedTeamDefaultPolicy(t *testing.T) {
	// A generous deadline: these rows test rules, not latency, and -race on a
	// shared machine can stall one evaluation past the 100 ms default.
	const timeout = 10 * time.Second
	def := newEngine(t, Config{EvalTimeout: timeout})
	allow := newEngine(t, Config{EvalTimeout: timeout, AllowHosts: []string{"api.example.com:8443", "api.example.com", "db.example.com:*", "resolver.example:53", "[2001:db8::1]:8443"}})
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"presets/forge.json": `{"git.corp.example": {"ports": [443, 9418], "git": true}, "pkgs.corp.example": true}`,
		"p.rego": `package airlock.egress

allow if {
	input.kind == "tcp"
	input.destination.host == "10.0.0.53"
	input.destination.port in {53, 5353}
}

dns_port_optin contains 53 if input.destination.host == "10.0.0.53"

git_host if input.destination.host == "pkgs.corp.example"
`,
	})
	user := newEngine(t, Config{Dir: dir, EvalTimeout: timeout})
	tests := []struct {
		name    string
		e       *Engine
		in      *Input
		allowed bool
		reasons string
	}{
		// Ports.
		{"registry other port connect", def, portIn(KindConnect, "pypi.org", 4444), false, "port_not_allowed"},
		{"registry other port tls", def, portIn(KindTLS, "pypi.org", 4444), false, "port_not_allowed"},
		{"registry ssh port tls", def, portIn(KindTLS, "github.com", 22), false, "port_not_allowed"},
		{"registry other port http", def, httpAt("GET", "pypi.org", 4444, "/simple/"), false, "port_not_allowed"},
		{"registry name tcp", def, portIn(KindTCP, "pypi.org", 4444), false, "port_not_allowed"},
		{"registry 443 connect", def, portIn(KindConnect, "pypi.org", 443), true, ""},
		{"registry 443 tls", def, portIn(KindTLS, "pypi.org", 443), true, ""},
		{"registry 80 http", def, httpAt("GET", "pypi.org", 80, "/simple/"), true, ""},
		{"registry 80 connect", def, portIn(KindConnect, "pypi.org", 80), true, ""},
		{"registry dns", def, portIn(KindDNS, "pypi.org", 53), true, ""},
		{"preset-declared port", user, portIn(KindConnect, "git.corp.example", 9418), true, ""},
		{"preset-declared ports only", user, portIn(KindConnect, "git.corp.example", 22), false, "port_not_allowed"},
		{"preset-declared ports not 80", user, portIn(KindConnect, "git.corp.example", 80), false, "default_deny"},
		{"allow host:port", allow, portIn(KindTCP, "api.example.com", 8443), true, ""},
		{"allow host default ports too", allow, portIn(KindConnect, "api.example.com", 443), true, ""},
		{"allow host other port", allow, portIn(KindConnect, "api.example.com", 4444), false, "port_not_allowed"},
		{"allow host:* any port", allow, portIn(KindTCP, "db.example.com", 5432), true, ""},
		{"allow ipv6:port", allow, portIn(KindTCP, "2001:db8::1", 8443), true, ""},
		{"allow ipv6 other port", allow, portIn(KindTCP, "2001:db8::1", 4444), false, "port_not_allowed"},
		{"allow ipv6 not 443", allow, portIn(KindTCP, "2001:db8::1", 443), false, "default_deny"},
		{"user rule names a port", user, portIn(KindTCP, "10.0.0.53", 5353), true, ""},

		// DNS ports (the policy's part).
		{"registry dns port connect", def, portIn(KindConnect, "pypi.org", 53), false, "dns_port"},
		{"registry dot port tls", def, portIn(KindTLS, "pypi.org", 853), false, "dns_port"},
		{"registry dns port http", def, httpAt("GET", "pypi.org", 53, "/"), false, "dns_port"},
		{"allow host:* not dns port", allow, portIn(KindTCP, "db.example.com", 53), false, "dns_port"},
		{"allow host:* not dot port", allow, portIn(KindTCP, "db.example.com", 853), false, "dns_port"},
		{"allow host:53 named", allow, portIn(KindTCP, "resolver.example", 53), true, "dns_port_optin"},
		{"allow host:53 not 853", allow, portIn(KindTCP, "resolver.example", 853), false, "dns_port"},
		{"user rule with dns_port_optin", user, portIn(KindTCP, "10.0.0.53", 53), true, "dns_port_optin"},

		// Read-only means read-only.
		{"git fetch on pypi", def, httpIn("POST", "pypi.org", "/o/r.git/git-upload-pack"), false, "git_fetch_not_git_host"},
		{"git fetch on npm", def, httpIn("POST", "registry.npmjs.org", "/x/git-upload-pack"), false, "git_fetch_not_git_host"},
		{"git fetch on github", def, httpIn("POST", "github.com", "/o/r.git/git-upload-pack"), true, ""},
		{"git fetch on codeload", def, httpIn("POST", "codeload.github.com", "/o/r.git/git-upload-pack"), false, "git_fetch_not_git_host"},
		{"git fetch on preset git host", user, httpIn("POST", "git.corp.example", "/r.git/git-upload-pack"), true, ""},
		{"git fetch on host a rule names", user, httpIn("POST", "pkgs.corp.example", "/r.git/git-upload-pack"), true, ""},
		{"GET with content length", def, withBody(httpIn("GET", "pypi.org", "/simple/"), 64, nil), false, "read_only_body"},
		{"GET chunked", def, withBody(httpIn("GET", "pypi.org", "/simple/"), -1, nil), false, "read_only_body"},
		{"HEAD with body", def, withBody(httpIn("HEAD", "pypi.org", "/simple/"), 3, nil), false, "read_only_body"},
		{"OPTIONS with body", def, withBody(httpIn("OPTIONS", "registry.npmjs.org", "/"), 3, nil), false, "read_only_body"},
		{"GET content-length header only", def, withBody(httpIn("GET", "pypi.org", "/simple/"), 0, map[string]string{"content-length": "64"}), false, "read_only_body"},
		{"GET transfer-encoding header only", def, withBody(httpIn("GET", "pypi.org", "/simple/"), 0, map[string]string{"transfer-encoding": "chunked"}), false, "read_only_body"},
		{"GET content-length 0", def, withBody(httpIn("GET", "pypi.org", "/simple/"), 0, map[string]string{"content-length": "0"}), true, ""},
		{"GET without body", def, httpIn("GET", "pypi.org", "/simple/"), true, ""},
		{"allow host GET with body", allow, withBody(httpIn("GET", "api.example.com", "/"), 64, nil), true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.e.Decide(context.Background(), tc.in)
			if d.Err != nil {
				t.Fatalf("got error %v", d.Err)
			}
			if d.Allowed != tc.allowed || reasonIDs(d) != tc.reasons {
				t.Fatalf("got allowed=%v reasons=%q, want %v %q (%+v)", d.Allowed, reasonIDs(d), tc.allowed, tc.reasons, d)
			}
			if !d.Allowed && d.MITM {
				t.Fatalf("got a deny with mitm set")
			}
		})
	}
}

// TestAllowHostsPorts: what an --allow entry may say, and the error naming a
// bad one.
func TestAllowHostsPorts(t *testing.T) {
	good := []struct{ in, want string }{
		{"PyPI.org", "pypi.org"},
		{"pypi.org:8443", "pypi.org:8443"},
		{"pypi.org:08443", "pypi.org:8443"},
		{"*.Corp.example:*", "*.corp.example:*"},
		{"**.corp.example:53", "**.corp.example:53"},
		{"203.0.113.7:5432", "203.0.113.7:5432"},
		{"2001:db8::1", "2001:db8::1"},
		{"[2001:DB8::1]:8443", "[2001:db8::1]:8443"},
		{"[2001:db8::1]", "2001:db8::1"},
	}
	for _, tc := range good {
		t.Run(tc.in, func(t *testing.T) {
			got, err := normalizeAllow(tc.in)
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v, want %q", got, err, tc.want)
			}
		})
	}
	bad := []struct{ in, want string }{
		{"pypi.org:", "port"},
		{"pypi.org:0", "port"},
		{"pypi.org:65536", "port"},
		{"pypi.org:https", "port"},
		{"pypi.org:-1", "port"},
		{"[2001:db8::1", "unterminated"},
		{"[2001:db8::1]8443", "junk"},
		{"[2001:db8::1]:", "port"},
		{"exa mple.com:443", "forbidden character"},
		{"*.203.0.113.7:443", "wildcard on an IP"},
	}
	for _, tc := range bad {
		t.Run("bad "+tc.in, func(t *testing.T) {
			_, err := New(Config{AllowHosts: []string{tc.in}}, nil)
			if err == nil || !strings.Contains(err.Error(), "allow_hosts") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an allow_hosts error mentioning %q", err, tc.want)
			}
		})
	}
}

// TestPresetEntries: what a preset value may say, and the error naming a bad
// one. A preset can never open a DNS port.
func TestPresetEntries(t *testing.T) {
	tests := []struct {
		name, json, want string
	}{
		{"dns port", `{"a.example": {"ports": [443, 53]}}`, "port 53 carries DNS"},
		{"dot port", `{"a.example": {"ports": [853]}}`, "port 853 carries DNS"},
		{"any port", `{"a.example": {"ports": ["*"]}}`, "not a number"},
		{"port range", `{"a.example": {"ports": [70000]}}`, "not a number in 1..65535"},
		{"fractional port", `{"a.example": {"ports": [443.5]}}`, "not a number in 1..65535"},
		{"empty ports", `{"a.example": {"ports": []}}`, "non-empty"},
		{"ports not a list", `{"a.example": {"ports": 443}}`, "non-empty"},
		{"git not bool", `{"a.example": {"git": "yes"}}`, "git must be"},
		{"unknown field", `{"a.example": {"port": [443]}}`, `unknown field "port"`},
		{"false", `{"a.example": false}`, "value must be true or an object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{"presets/x.json": tc.json})
			_, err := New(Config{Dir: dir}, nil)
			if err == nil || !strings.Contains(err.Error(), "preset x") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a preset x error mentioning %q", err, tc.want)
			}
		})
	}
	// Two presets naming one host: ports and git merge.
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"presets/a.json": `{"git.corp.example": true}`,
		"presets/b.json": `{"git.corp.example": {"ports": [9418], "git": true}}`,
	})
	e := newEngine(t, Config{Dir: dir, Presets: []string{"a", "b"}, EvalTimeout: 10 * time.Second})
	for _, port := range []int{443, 80, 9418} {
		if d := e.Decide(context.Background(), portIn(KindConnect, "git.corp.example", port)); !d.Allowed {
			t.Fatalf("port %d: got %+v, want allowed (merged presets)", port, d)
		}
	}
	if d := e.Decide(context.Background(), httpIn("POST", "git.corp.example", "/r.git/git-upload-pack")); !d.Allowed {
		t.Fatalf("git fetch: got %+v, want allowed (git from preset b)", d)
	}
}

// FuzzNormalizeAllow: an allow entry's canonical form is stable (normalizing
// it again changes nothing) and always parses back to the same pattern and
// port.
func FuzzNormalizeAllow(f *testing.F) {
	for _, s := range []string{"pypi.org", "pypi.org:8443", "*.corp.example:*", "**.x.example:53", "[2001:db8::1]:443", "2001:db8::1", "203.0.113.7:22", "PyPI.org.:080", "[::ffff:1.2.3.4]:80", "a:b:c", "x:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := normalizeAllow(s)
		if err != nil {
			return
		}
		again, err := normalizeAllow(n)
		if err != nil || again != n {
			t.Fatalf("normalizeAllow(%q) = %q, then %q, %v", s, n, again, err)
		}
		p1, port1, _ := splitAllow(s)
		p2, port2, err := splitAllow(n)
		if err != nil || p1 != p2 || port1 != port2 {
			t.Fatalf("split %q = %q %q, split %q = %q %q %v", s, p1, port1, n, p2, port2, err)
		}
	})
}
