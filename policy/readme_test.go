package policy

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/util"
)

// blocks returns the fenced code blocks of a markdown file with the given tag.
func blocks(t *testing.T, path, tag string) []string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	parts := strings.Split(string(src), "```")
	for i := 1; i < len(parts); i += 2 {
		if body, ok := strings.CutPrefix(parts[i], tag+"\n"); ok {
			out = append(out, body)
		}
	}
	return out
}

// Every example in policies/README.md runs.
func TestReadmeExamples(t *testing.T) {
	readme := filepath.Join("..", "policies", "README.md")
	regos := blocks(t, readme, "rego")
	if len(regos) == 0 {
		t.Fatal("got no rego examples in the README")
	}
	for i, src := range regos {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"policy.rego": src})
		e := newEngine(t, Config{Dir: dir})
		switch {
		case strings.Contains(src, "input.sandbox.pod"):
			// The pods example reads its lists from data, as in
			// examples/pod-namespaces.
			writeFiles(t, dir, map[string]string{"data.json": `{"namespace_hosts": {"ci": {"ghcr.io": true}}}`})
			e = newEngine(t, Config{Dir: dir})
			podIn := func(ns string) *Input {
				in := portIn(KindConnect, "ghcr.io", 443)
				in.Sandbox.Pod = &Pod{Namespace: ns}
				return in
			}
			if d := e.Decide(context.Background(), podIn("ci")); !d.Allowed {
				t.Fatalf("pod namespace policy: got %+v, want ghcr.io allowed for namespace ci", d)
			}
			if d := e.Decide(context.Background(), podIn("web")); d.Allowed {
				t.Fatalf("pod namespace policy: got %+v, want ghcr.io denied for namespace web", d)
			}
			if d := e.Decide(context.Background(), portIn(KindConnect, "ghcr.io", 443)); d.Allowed {
				t.Fatalf("pod namespace policy: got %+v, want ghcr.io denied for a sandbox that is no pod", d)
			}
		case strings.Contains(src, "airlock.host_in"):
			if d := e.Decide(context.Background(), portIn(KindConnect, "api.openai.com", 443)); !d.Allowed {
				t.Fatalf("host_in policy: got %+v, want api.openai.com:443 allowed", d)
			}
			if d := e.Decide(context.Background(), portIn(KindConnect, "api.openai.com", 4444)); d.Allowed {
				t.Fatalf("host_in policy: got %+v, want api.openai.com:4444 denied", d)
			}
		case strings.Contains(src, "sandbox_allowed_host"):
			own := mustAllow("api.example.com")
			ci := sbIn("sb-ci", own, "", KindConnect, "api.example.com", 443)
			ci.Sandbox.Labels = map[string]string{"pool": "ci"}
			if d := e.Decide(context.Background(), ci); d.Allowed || reasonIDs(d) != "no_own_hosts" {
				t.Fatalf("no_own_hosts policy: got %+v, want the ci sandbox's own host denied", d)
			}
			if d := e.Decide(context.Background(), sbIn("sb-dev", own, "", KindConnect, "api.example.com", 443)); !d.Allowed {
				t.Fatalf("no_own_hosts policy: got %+v, want another sandbox's own host allowed", d)
			}
		case strings.Contains(src, "tcp_hosts"):
			tcpAt := func(host string, port int) *Input {
				in := portIn(KindTCP, host, port)
				in.Destination.Protocol = "tcp"
				return in
			}
			for _, c := range []struct {
				in   *Input
				want bool
			}{
				{tcpAt("github.com", 22), true},
				{tcpAt("db.corp.example", 5432), true},
				{portIn(KindDNS, "db.corp.example", 53), true},
				{tcpAt("db.corp.example", 5433), false},
				{tcpAt("github.com", 2222), false},
				{tcpAt("140.82.112.3", 22), false},
				{tcpAt("evil.example", 22), false},
				{portIn(KindDNS, "evil.example", 53), false},
			} {
				if d := e.Decide(context.Background(), c.in); d.Allowed != c.want {
					t.Fatalf("tcp_hosts policy: %s %s:%d got %+v, want allowed %v", c.in.Kind, c.in.Destination.Host, c.in.Destination.Port, d, c.want)
				}
			}
		case strings.Contains(src, "dns_port_optin"):
			if d := e.Decide(context.Background(), portIn(KindTCP, "10.0.0.53", 53)); !d.Allowed {
				t.Fatalf("dns_port_optin policy: got %+v, want 10.0.0.53:53 allowed", d)
			}
		}
		if i == 0 {
			if d := e.Decide(context.Background(), kindIn(KindConnect, "api.openai.com")); !d.Allowed {
				t.Fatalf("five-line policy: got %+v, want api.openai.com allowed", d)
			}
			if d := e.Decide(context.Background(), kindIn(KindConnect, "api.openai.com.evil.example")); d.Allowed {
				t.Fatalf("five-line policy: got %+v, want a lookalike denied", d)
			}
		}
	}
	for _, src := range blocks(t, readme, "json") {
		var v any
		if err := util.UnmarshalJSON([]byte(src), &v); err != nil {
			t.Fatal(err)
		}
		if obj, ok := v.(map[string]any); ok && obj["allowed"] == nil {
			readmePreset(t, src, obj)
			continue
		}
		rs := rego.ResultSet{{Expressions: []*rego.ExpressionValue{{Value: v}}}}
		if _, err := parseResult(rs); err != nil {
			t.Fatalf("README decision example: %v", err)
		}
	}
}

// readmePreset loads a README preset example and checks each of its hosts is
// reachable on 443 or on the first port it names.
func readmePreset(t *testing.T, src string, obj map[string]any) {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"presets/readme.json": src})
	e := newEngine(t, Config{Dir: dir, Presets: []string{"readme"}})
	for host, v := range obj {
		port := 443
		if m, ok := v.(map[string]any); ok {
			if ps, ok := m["ports"].([]any); ok {
				n, _ := ps[len(ps)-1].(json.Number).Int64()
				port = int(n)
			}
		}
		if d := e.Decide(context.Background(), portIn(KindConnect, host, port)); !d.Allowed {
			t.Fatalf("README preset example: %s:%d got %+v, want allowed", host, port, d)
		}
	}
}
