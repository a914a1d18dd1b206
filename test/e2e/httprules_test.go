package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/test/fakenet"
)

// TestRootSecurityEngineerPolicy is a security engineer's task done from the docs inside
// `airlock run`: GET a GitHub-like API's /repos/acme/*, POST an AI API's
// /v1/chat/completions, nothing else. The policy is the first version that
// used to be silently wrong (a CONNECT allow and method/path rules, no mitm:
// DELETE, another repository and /v1/embeddings all got 200). Now the
// interception is derived: the allowed calls pass, every other one gets 403
// and its upstream sees nothing; airlock-policy.yaml builds on no preset.
func TestRootSecurityEngineerPolicy(t *testing.T) {
	e := newEnv(t, "")
	requireTool(t, "/usr/bin/curl")
	tag := strings.TrimPrefix(sandboxID("s"), "e2e-s-")
	gh, ai := "gh-"+tag+".example.test", "ai-"+tag+".example.test"
	var hosts [2]*fakenet.Host
	for i, name := range []string{gh, ai} {
		h, err := w.net.AddHost([]string{name}, nil)
		if err != nil {
			t.Fatal(err)
		}
		hosts[i] = h
	}
	pol := filepath.Join(e.dir, "policy")
	if err := os.MkdirAll(pol, 0o755); err != nil {
		t.Fatal(err)
	}
	rego := fmt.Sprintf(`package airlock.egress

allow if {
	input.kind == "http"
	input.destination.host == %[1]q
	input.http.method == "GET"
	glob.match("/repos/acme/*", null, input.http.path)
}

allow if {
	input.kind == "http"
	input.destination.host == %[2]q
	input.http.method == "POST"
	input.http.path == "/v1/chat/completions"
}

allow if {
	input.kind in {"connect", "tls", "dns"}
	input.destination.host in {%[1]q, %[2]q}
}
`, gh, ai)
	for name, src := range map[string]string{"policy.rego": rego, "airlock-policy.yaml": "presets: [none]\n"} {
		if err := os.WriteFile(filepath.Join(pol, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res := e.sh([]string{"--id", sandboxID("sec"), "--policy", pol}, strings.NewReplacer("GH", gh, "AI", ai).Replace(`
c() { curl -sS --max-time 60 -o /dev/null -w '%{http_code}' "$@"; }
echo "get_acme=$(c https://GH/repos/acme/widget)"
echo "chat=$(c -X POST -d '{}' https://AI/v1/chat/completions)"
echo "delete_acme=$(c -X DELETE https://GH/repos/acme/widget)"
echo "get_other=$(c https://GH/repos/other/widget)"
echo "embeddings=$(c -X POST -d '{}' https://AI/v1/embeddings)"
true
`))
	wantCode(t, res, 0)
	m := kv(res.stdout)
	for k, v := range map[string]string{"get_acme": "200", "chat": "200", "delete_acme": "403", "get_other": "403", "embeddings": "403"} {
		wantKV(t, m, k, v, res)
	}
	seen := map[string]int{}
	for i, h := range hosts {
		for _, r := range h.Seen() {
			seen[fmt.Sprintf("%d %s %s", i, r.Method, r.URL.Path)]++
		}
	}
	want := map[string]int{"0 GET /repos/acme/widget": 1, "1 POST /v1/chat/completions": 1}
	if len(seen) != len(want) || seen["0 GET /repos/acme/widget"] != 1 || seen["1 POST /v1/chat/completions"] != 1 {
		t.Errorf("the upstreams saw %v, want only %v", seen, want)
	}
	recs := e.records()
	for _, mm := range []match{
		{kind: audit.KindHTTP, decision: audit.DecisionDeny, host: gh, method: "DELETE", path: "/repos/acme/widget"},
		{kind: audit.KindHTTP, decision: audit.DecisionDeny, host: gh, method: "GET", path: "/repos/other/widget"},
		{kind: audit.KindHTTP, decision: audit.DecisionDeny, host: ai, method: "POST", path: "/v1/embeddings"},
		{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: ai, method: "POST", path: "/v1/chat/completions"},
	} {
		mustFind(t, recs, mm)
	}
}
