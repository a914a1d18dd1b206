package policy

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func mustAllow(entries ...string) *AllowList {
	a, err := NewAllowList(entries)
	if err != nil {
		panic(err)
	}
	return a
}

func TestNewAllowList(t *testing.T) {
	tests := []struct {
		name    string
		entries []string
		want    []string // Entries()
		json    string   // MarshalJSON
	}{
		{"none", nil, nil, "null"},
		{"bare host", []string{"PyPI.org."}, []string{"pypi.org"}, `{"pypi.org":true}`},
		{"merged and deduplicated", []string{"a.example", "a.example:8443", "A.example", "a.example:*"},
			[]string{"a.example", "a.example:*", "a.example:8443"}, `{"a.example":{"ports":[80,443,8443,"*"]}}`},
		{"wildcards and IPs", []string{"*.corp.example", "**.corp.example:22", "203.0.113.7", "[2001:DB8::1]:8443"},
			[]string{"**.corp.example:22", "*.corp.example", "203.0.113.7", "[2001:db8::1]:8443"},
			`{"**.corp.example":{"ports":[22]},"*.corp.example":true,"2001:db8::1":{"ports":[8443]},"203.0.113.7":true}`},
		{"dns port named", []string{"resolver.example:53"}, []string{"resolver.example:53"}, `{"resolver.example":{"ports":[53]}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewAllowList(tc.entries)
			if err != nil {
				t.Fatal(err)
			}
			if got := a.Entries(); !slices.Equal(got, tc.want) {
				t.Fatalf("got entries %q, want %q", got, tc.want)
			}
			if a.Len() != len(tc.want) {
				t.Fatalf("got len %d, want %d", a.Len(), len(tc.want))
			}
			b, err := json.Marshal(a)
			if err != nil || string(b) != tc.json {
				t.Fatalf("got %s, %v, want %s", b, err, tc.json)
			}
			if a == nil {
				return
			}
			// Both JSON forms read back to the same list.
			var obj, arr AllowList
			if err := json.Unmarshal(b, &obj); err != nil {
				t.Fatalf("object form: %v", err)
			}
			if err := json.Unmarshal(mustJSON(t, tc.entries), &arr); err != nil {
				t.Fatalf("array form: %v", err)
			}
			if !slices.Equal(arr.Entries(), a.Entries()) || string(mustJSON(t, &obj)) != tc.json || obj.Digest() != a.Digest() || arr.Digest() != a.Digest() {
				t.Fatalf("got object form %s, array form %q, want %s and %q, one digest", mustJSON(t, &obj), arr.Entries(), tc.json, a.Entries())
			}
		})
	}
}

func TestNewAllowListNamesTheBadEntry(t *testing.T) {
	tests := []struct {
		name    string
		entries []string
		want    string
	}{
		{"port zero", []string{"ok.example", "pypi.org:0"}, `allow[1] "pypi.org:0"`},
		{"port name", []string{"pypi.org:https"}, `allow[0] "pypi.org:https"`},
		{"space", []string{"exa mple.com"}, "forbidden character"},
		{"wildcard on IP", []string{"*.203.0.113.7"}, "wildcard on an IP"},
		{"empty", []string{""}, `allow[0] ""`},
		{"unterminated v6", []string{"[2001:db8::1"}, "unterminated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewAllowList(tc.entries)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, %v, want an error mentioning %q", a, err, tc.want)
			}
		})
	}
	for _, src := range []string{`"pypi.org"`, `{"pypi.org":false}`, `{"pypi.org":{"ports":[]}}`, `{"pypi.org":{"ports":[443],"git":true}}`, `{"pypi.org":{"ports":[0]}}`, `[1]`} {
		var a AllowList
		if err := json.Unmarshal([]byte(src), &a); err == nil {
			t.Errorf("unmarshal %s: got %q, want an error", src, a.Entries())
		}
	}
}

// sbIn is a decision input from sandbox id with its own allow list and mode.
func sbIn(id string, allow *AllowList, mode Mode, kind Kind, host string, port int) *Input {
	in := &Input{Kind: kind, Sandbox: Sandbox{ID: id, Allow: allow, Mode: mode}, Destination: Destination{Host: host, Port: port}}
	if kind == KindHTTP {
		in.HTTP = &HTTP{Method: "POST", Scheme: "https", Path: "/upload", BodySize: 10}
	}
	if kind == KindDNS {
		in.DNS = &DNS{QName: host, QType: "A"}
	}
	return in
}

// TestSandboxAllowThroughEngine: hosts on sandbox A's own list are allowed
// for A, on the ports the entries name, and denied for sandbox B (no list, or
// another one), through the real engine with the default policy and no
// --allow hosts. The cache is on, so a decision cached for one sandbox can
// never answer for another.
func TestSandboxAllowThroughEngine(t *testing.T) {
	e := newEngine(t, Config{})
	a := mustAllow("api.example.com", "**.corp.example", "db.example.com:5432", "wide.example.com:*", "resolver.example:53")
	other := mustAllow("other.example")
	tests := []struct {
		name    string
		in      *Input
		allowed bool
		reasons string
	}{
		{"A http POST", sbIn("sb-a", a, "", KindHTTP, "api.example.com", 443), true, ""},
		{"B http POST", sbIn("sb-b", nil, "", KindHTTP, "api.example.com", 443), false, "default_deny"},
		{"B other list", sbIn("sb-b", other, "", KindHTTP, "api.example.com", 443), false, "default_deny"},
		{"A connect", sbIn("sb-a", a, "", KindConnect, "api.example.com", 443), true, ""},
		{"A port 80", sbIn("sb-a", a, "", KindConnect, "api.example.com", 80), true, ""},
		{"A port not listed", sbIn("sb-a", a, "", KindConnect, "api.example.com", 4444), false, "port_not_allowed"},
		{"A tcp raw", sbIn("sb-a", a, "", KindTCP, "db.example.com", 5432), true, ""},
		{"A tcp other port", sbIn("sb-a", a, "", KindTCP, "db.example.com", 5433), false, "port_not_allowed"},
		{"A tcp default port not listed", sbIn("sb-a", a, "", KindTCP, "db.example.com", 443), false, "default_deny"},
		{"B tcp raw", sbIn("sb-b", nil, "", KindTCP, "db.example.com", 5432), false, "default_deny"},
		{"A wildcard deep", sbIn("sb-a", a, "", KindTLS, "x.y.corp.example", 443), true, ""},
		{"A wildcard apex", sbIn("sb-a", a, "", KindTLS, "corp.example", 443), false, "default_deny"},
		{"A any port", sbIn("sb-a", a, "", KindTCP, "wide.example.com", 22), true, ""},
		{"A any port not DNS", sbIn("sb-a", a, "", KindTCP, "wide.example.com", 53), false, "dns_port"},
		{"A dns port named", sbIn("sb-a", a, "", KindTCP, "resolver.example", 53), true, "dns_port_optin"},
		{"A dot port not named", sbIn("sb-a", a, "", KindTCP, "resolver.example", 853), false, "dns_port"},
		{"B dns port", sbIn("sb-b", nil, "", KindTCP, "resolver.example", 53), false, "dns_port"},
		{"A dns question", sbIn("sb-a", a, "", KindDNS, "api.example.com", 53), true, ""},
		{"B dns question", sbIn("sb-b", nil, "", KindDNS, "api.example.com", 53), false, "default_deny"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for range 2 { // evaluated, then cached
				d := e.Decide(context.Background(), tc.in)
				if d.Err != nil || d.Allowed != tc.allowed || reasonIDs(d) != tc.reasons || d.Mode != ModeEnforce {
					t.Fatalf("got %+v, want allowed=%v reasons %q mode enforce", d, tc.allowed, tc.reasons)
				}
			}
		})
	}
}

// TestSandboxModeThroughEngine: sandbox A in report mode has a deny let
// through (mode report, still a deny in the record), B is enforced; the
// policy's own enforce rule wins over a sandbox's report; an unknown mode
// fails closed.
func TestSandboxModeThroughEngine(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, Config{})
	a := e.Decide(ctx, sbIn("sb-a", nil, ModeReport, KindConnect, "evil.example", 443))
	if a.Allowed || a.Mode != ModeReport || !a.Permit() || a.Err != nil || reasonIDs(a) != "default_deny" {
		t.Fatalf("A report: got %+v permit=%v, want a deny in report mode, permitted", a, a.Permit())
	}
	b := e.Decide(ctx, sbIn("sb-b", nil, "", KindConnect, "evil.example", 443))
	if b.Allowed || b.Mode != ModeEnforce || b.Permit() {
		t.Fatalf("B: got %+v permit=%v, want an enforced deny", b, b.Permit())
	}
	// The same sandbox id switched back to enforce is not answered from the
	// cache entry of its report-mode decision.
	if d := e.Decide(ctx, sbIn("sb-a", nil, ModeEnforce, KindConnect, "evil.example", 443)); d.Mode != ModeEnforce || d.Permit() {
		t.Fatalf("A enforce after report: got %+v, want an enforced deny", d)
	}
	// Global report, sandbox enforce: enforced.
	rep := newEngine(t, Config{Mode: ModeReport})
	if d := rep.Decide(ctx, sbIn("sb-a", nil, ModeEnforce, KindConnect, "evil.example", 443)); d.Mode != ModeEnforce || d.Permit() {
		t.Fatalf("global report, sandbox enforce: got %+v, want an enforced deny", d)
	}
	if d := rep.Decide(ctx, sbIn("sb-b", nil, "", KindConnect, "evil.example", 443)); d.Mode != ModeReport || !d.Permit() {
		t.Fatalf("global report, sandbox unset: got %+v, want report", d)
	}
	// The policy's enforce rule wins over the sandbox's report.
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"p.rego": "package airlock.egress\n\nenforce if input.sandbox.labels.tier == \"prod\"\n"})
	pol := newEngine(t, Config{Dir: dir})
	in := sbIn("sb-a", nil, ModeReport, KindConnect, "evil.example", 443)
	in.Sandbox.Labels = map[string]string{"tier": "prod"}
	if d := pol.Decide(ctx, in); d.Mode != ModeEnforce || d.Permit() {
		t.Fatalf("policy enforce over sandbox report: got %+v, want an enforced deny", d)
	}
	// An unknown mode is a policy error, never let through.
	for _, m := range []Mode{"Report", "audit", "off"} {
		d := e.Decide(ctx, sbIn("sb-a", nil, m, KindConnect, "pypi.org", 443))
		if d.Err == nil || d.Permit() || reasonIDs(d) != ReasonPolicyError {
			t.Fatalf("mode %q: got %+v, want a policy_error deny", m, d)
		}
	}
	// A policy error stays a deny in a report-mode sandbox.
	broken := newEngine(t, Config{Dir: overlayLib(t, "package airlock\n\ndecision := {\"allowed\": true}\n")})
	if d := broken.Decide(ctx, sbIn("sb-a", nil, ModeReport, KindConnect, "pypi.org", 443)); d.Err == nil || d.Permit() {
		t.Fatalf("policy error in report sandbox: got %+v, want not permitted", d)
	}
}

// TestCacheKeySandboxAllow pins that a sandbox's allow list is part of the
// decision cache key: the same sandbox id, destination and everything else,
// with and without the list, must not share a cached decision.
func TestCacheKeySandboxAllow(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, Config{})
	without := sbIn("sb-a", nil, "", KindConnect, "api.example.com", 443)
	with := sbIn("sb-a", mustAllow("api.example.com"), "", KindConnect, "api.example.com", 443)
	if d := e.Decide(ctx, without); d.Allowed {
		t.Fatalf("without the list: got %+v, want a deny", d)
	}
	if d := e.Decide(ctx, with); !d.Allowed {
		t.Fatalf("with the list after a cached deny: got %+v, want an allow", d)
	}
	if d := e.Decide(ctx, without); d.Allowed {
		t.Fatalf("without the list after a cached allow: got %+v, want a deny", d)
	}
	if d := e.Decide(ctx, sbIn("sb-a", mustAllow("api.example.com:8443"), "", KindConnect, "api.example.com", 443)); d.Allowed {
		t.Fatalf("another list after a cached allow: got %+v, want a deny", d)
	}
}

// TestSandboxAllowDoesNotWidenDataHosts: the list reaches policy only as
// input.sandbox.allow; data.airlock.hosts.allow (what --allow set) is the
// same for every sandbox.
func TestSandboxAllowDoesNotWidenDataHosts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"p.rego": `package airlock.egress

deny contains {"id": "data_hosts_changed", "msg": "m"} if count(data.airlock.hosts.allow) != 1
`})
	e := newEngine(t, Config{Dir: dir, AllowHosts: []string{"global.example"}})
	in := sbIn("sb-a", mustAllow("a.example", "b.example"), "", KindConnect, "a.example", 443)
	if d := e.Decide(ctx, in); !d.Allowed {
		t.Fatalf("got %+v, want an allow", d)
	}
}
