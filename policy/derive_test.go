package policy

import (
	"context"
	"strings"
	"testing"
)

// Every way found in which a rule about HTTP used to do nothing: the
// connection it needed to see was tunnelled (allowed without interception),
// so the rule never saw a request; or the host it allowed was never resolved
// or connected to. Each row is a policy, a CONNECT/TLS/DNS question, and what
// the decision must now be. Before policy/derive.go every row marked
// wasHole was allowed without mitm (the rule silently did nothing).
func TestHTTPRulesTakeEffect(t *testing.T) {
	const connectGitHub = `
allow if {
	input.kind in {"connect", "tls"}
	input.destination.host == "api.github.com"
}
`
	tests := []struct {
		name    string
		policy  string
		data    string
		presets []string
		allow   []string
		in      *Input
		allowed bool
		mitm    bool
		wasHole bool
	}{
		{
			name: "method and path allow, connect allowed, no mitm (the security engineer's first version)",
			policy: connectGitHub + `
allow if {
	input.kind == "http"
	input.destination.host == "api.github.com"
	input.http.method == "GET"
	startswith(input.http.path, "/repos/acme/")
}`,
			in: kindIn(KindConnect, "api.github.com"), allowed: true, mitm: true, wasHole: true,
		},
		{
			name: "same, transparent TLS (SNI)",
			policy: connectGitHub + `
allow if {
	input.kind == "http"
	input.destination.host == "api.github.com"
	input.http.method == "GET"
}`,
			in: kindIn(KindTLS, "api.github.com"), allowed: true, mitm: true, wasHole: true,
		},
		{
			name: "method allow with no connect rule: the tunnel is derived",
			policy: `
allow if {
	input.kind == "http"
	input.destination.host == "api.openai.com"
	input.http.method == "POST"
	input.http.path == "/v1/chat/completions"
}`,
			in: kindIn(KindConnect, "api.openai.com"), allowed: true, mitm: true,
		},
		{
			name: "method allow with no dns rule: the name resolves",
			policy: `
allow if {
	input.kind == "http"
	input.destination.host == "api.openai.com"
	input.http.method == "POST"
}`,
			in:      &Input{Kind: KindDNS, Sandbox: Sandbox{ID: "sb-1"}, Destination: Destination{Host: "api.openai.com"}, DNS: &DNS{QName: "api.openai.com.", QType: "A"}},
			allowed: true,
		},
		{
			name: "derived tunnel is for the named host only",
			policy: `
allow if {
	input.kind == "http"
	input.destination.host == "api.openai.com"
	input.http.method == "POST"
}`,
			in: kindIn(KindConnect, "evil.example"), allowed: false,
		},
		{
			name: "derived tunnel is on 443 and 80 only",
			policy: `
allow if {
	input.kind == "http"
	input.destination.host == "api.openai.com"
	input.http.method == "POST"
}`,
			in:      &Input{Kind: KindConnect, Sandbox: Sandbox{ID: "sb-1"}, Destination: Destination{Host: "api.openai.com", Port: 22}},
			allowed: false,
		},
		{
			name: "deny by method on every host, host given with --allow",
			policy: `
deny contains "no_delete" if {
	input.kind == "http"
	input.http.method == "DELETE"
}`,
			allow: []string{"example.com"},
			in:    kindIn(KindConnect, "example.com"), allowed: true, mitm: true, wasHole: true,
		},
		{
			name: "deny by method, host on the sandbox's own allow list",
			policy: `
deny contains "no_delete" if input.http.method == "DELETE"`,
			in: func() *Input {
				in := kindIn(KindConnect, "example.com")
				in.Sandbox.Allow = mustAllow("example.com")
				return in
			}(),
			allowed: true, mitm: true, wasHole: true,
		},
		{
			name: "deny for one pod namespace (examples/pod-namespaces): that namespace's connections",
			policy: `
allow if input.kind != "tcp"

deny contains "read_only" if {
	input.sandbox.pod.namespace == "sandbox"
	input.kind == "http"
	not input.http.method in {"GET", "HEAD", "OPTIONS"}
}`,
			in: func() *Input {
				in := kindIn(KindConnect, "example.com")
				in.Sandbox.Pod = &Pod{Namespace: "sandbox"}
				return in
			}(),
			allowed: true, mitm: true, wasHole: true,
		},
		{
			name: "deny for one pod namespace: another namespace stays a tunnel",
			policy: `
allow if input.kind != "tcp"

deny contains "read_only" if {
	input.sandbox.pod.namespace == "sandbox"
	input.kind == "http"
	not input.http.method in {"GET", "HEAD", "OPTIONS"}
}`,
			in: func() *Input {
				in := kindIn(KindConnect, "example.com")
				in.Sandbox.Pod = &Pod{Namespace: "web"}
				return in
			}(),
			allowed: true, mitm: false,
		},
		{
			name: "deny through a helper rule that reads the path",
			policy: `
push if endswith(input.http.path, "/git-receive-pack")

deny contains "git_push" if push`,
			allow: []string{"github.com"},
			in:    kindIn(KindConnect, "github.com"), allowed: true, mitm: true, wasHole: true,
		},
		{
			name: "deny through a function that reads the query",
			policy: `
wants(service) if service in input.http.query.service

deny contains "git_push" if wants("git-receive-pack")`,
			allow: []string{"github.com"},
			in:    kindIn(KindConnect, "github.com"), allowed: true, mitm: true, wasHole: true,
		},
		{
			name: "deny through a library helper (airlock.has_body)",
			policy: `
import data.airlock

deny contains "no_uploads" if {
	input.destination.host == "example.com"
	airlock.has_body
}`,
			allow: []string{"example.com"},
			in:    kindIn(KindConnect, "example.com"), allowed: true, mitm: true, wasHole: true,
		},
		{
			name: "deny on a header through an import alias",
			policy: `
import input.http as req

deny contains "no_auth" if req.headers.authorization`,
			allow: []string{"example.com"},
			in:    kindIn(KindConnect, "example.com"), allowed: true, mitm: true, wasHole: true,
		},
		{
			name: "deny on a variable bound from the request",
			policy: `
deny contains "no_delete" if {
	m := input.http.method
	m == "DELETE"
	input.destination.host == "example.com"
}`,
			allow: []string{"example.com"},
			in:    kindIn(KindConnect, "example.com"), allowed: true, mitm: true, wasHole: true,
		},
		{
			name: "deny with a declared variable the request binds",
			policy: `
deny contains "bad_header" if {
	some i
	input.http.headers["x-index"] == data.bad[i]
	i > 0
	input.destination.host == "example.com"
}`,
			data:  `{"bad": ["a", "b"]}`,
			allow: []string{"example.com"},
			in:    kindIn(KindConnect, "example.com"), allowed: true, mitm: true, wasHole: true,
		},
		{
			name: "deny on another host does not intercept this one",
			policy: `
deny contains "no_delete" if {
	input.destination.host == "other.example"
	input.http.method == "DELETE"
}`,
			allow: []string{"example.com"},
			in:    kindIn(KindConnect, "example.com"), allowed: true, mitm: false,
		},
		{
			name: "data-driven allow table: host from data, methods from the request",
			policy: `
allow if {
	some r in data.rules
	r.host == input.destination.host
	input.http.method in r.methods
}`,
			data: `{"rules": [{"host": "api.example.com", "methods": ["GET"]}]}`,
			in:   kindIn(KindConnect, "api.example.com"), allowed: true, mitm: true,
		},
		{
			name: "data-driven allow table: another host",
			policy: `
allow if {
	some r in data.rules
	r.host == input.destination.host
	input.http.method in r.methods
}`,
			data: `{"rules": [{"host": "api.example.com", "methods": ["GET"]}]}`,
			in:   kindIn(KindConnect, "other.example.com"), allowed: false,
		},
		{
			name: "allow by method with no host derives no tunnel (fail closed)",
			policy: `
allow if {
	input.kind == "http"
	input.http.method == "GET"
}`,
			in: kindIn(KindConnect, "example.com"), allowed: false,
		},
		{
			name: "allow by method with no host, connect allowed elsewhere: intercepted",
			policy: `
allow if {
	input.kind == "http"
	input.http.method == "GET"
}

allow if {
	input.kind == "connect"
	input.destination.host == "example.com"
}`,
			in: kindIn(KindConnect, "example.com"), allowed: true, mitm: true, wasHole: true,
		},
		{
			name: "a host every request of which is allowed stays a tunnel (--allow, default policy)",
			policy: `
allow if {
	input.kind == "http"
	input.http.method == "GET"
}`,
			allow: []string{"example.com"},
			in:    kindIn(KindConnect, "example.com"), allowed: true, mitm: false,
		},
		{
			name:    "registry host given with --allow stays a tunnel (unchanged)",
			policy:  `allow if false`,
			presets: []string{"github"},
			allow:   []string{"github.com"},
			in:      kindIn(KindConnect, "github.com"), allowed: true, mitm: false,
		},
		{
			name: "passthrough still wins: its author chose the tunnel",
			policy: connectGitHub + `
allow if {
	input.kind == "http"
	input.destination.host == "api.github.com"
	input.http.method == "GET"
}

passthrough if input.destination.host == "api.github.com"`,
			in: kindIn(KindConnect, "api.github.com"), allowed: true, mitm: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]string{"policy.rego": "package airlock.egress\n" + tt.policy + "\n"}
			if tt.data != "" {
				files["data.json"] = tt.data
			}
			writeFiles(t, dir, files)
			presets := tt.presets
			if presets == nil {
				presets = []string{PresetNone}
			}
			e := newEngine(t, Config{Dir: dir, Presets: presets, AllowHosts: tt.allow})
			d := e.Decide(context.Background(), tt.in)
			if d.Err != nil {
				t.Fatalf("decide: %v", d.Err)
			}
			if d.Allowed != tt.allowed || d.MITM != tt.mitm {
				t.Fatalf("got allowed=%v mitm=%v (%s), want allowed=%v mitm=%v", d.Allowed, d.MITM, reasonIDs(d), tt.allowed, tt.mitm)
			}
		})
	}
}

// A rule about HTTP whose connections cannot be told is refused at load,
// naming the rule, by New (run, serve, eval), RunTests (policy test) and
// Check (policy check).
func TestHTTPRuleRefusedAtLoad(t *testing.T) {
	tests := []struct{ name, policy, want string }{
		{"else chain", `
allow if {
	input.http.method == "GET"
} else := false if {
	input.destination.host == "x.example"
}`, "policy.rego:3: rule airlock.egress.allow reads input.http: airlock cannot tell"},
		{"reserved name", `_airlock_http_open if true`, "names starting with _airlock_ are airlock's"},
		{"mitm on a request field", `
mitm if input.http.method == "POST"`, "policy.rego:3: rule airlock.egress.mitm reads input.http: mitm is decided for the CONNECT"},
		{"passthrough through a helper", `
import data.airlock

passthrough if airlock.has_body`, "policy.rego:5: rule airlock.egress.passthrough reads input.http"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{"policy.rego": "package airlock.egress\n" + tt.policy + "\n"})
			_, err := New(Config{Dir: dir}, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: got %v, want %q", err, tt.want)
			}
			if _, err := RunTests(context.Background(), dir); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("RunTests: got %v, want %q", err, tt.want)
			}
			ps, err := Check(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(ps) == 0 || !strings.Contains(ps[0].String(), tt.want) {
				t.Fatalf("Check: got %v, want %q", ps, tt.want)
			}
		})
	}
}
