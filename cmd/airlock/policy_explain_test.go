//go:build !airlock_front

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var tableDir = filepath.Join("..", "..", "policies", "examples", "http-allow-table")

func TestPolicyExplainCommand(t *testing.T) {
	out, errOut, code := runPolicy(t, "", "explain", tableDir)
	if code != 0 {
		t.Fatalf("explain: exit %d, %s", code, errOut)
	}
	for _, want := range []string{"presets: none\n", "api.github.com\n  dns\n", "  connect/tls 443 intercepted\n", "  http 443 GET /repos/acme/*\n", "  http 443 POST /v1/chat/completions\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain: got\n%s\nwant it to contain %q", out, want)
		}
	}
	if strings.Contains(out, "DELETE") || strings.Contains(out, "pypi.org") {
		t.Errorf("explain lists what the policy does not allow:\n%s", out)
	}
	out, _, code = runPolicy(t, "", "explain", tableDir, "--format", "json")
	if code != 0 || !strings.Contains(out, `"host": "api.openai.com"`) {
		t.Fatalf("explain json: exit %d\n%s", code, out)
	}
	if _, errOut, code := runPolicy(t, "", "explain", tableDir, "--format", "yaml"); code != 2 || !strings.Contains(errOut, "want text or json") {
		t.Fatalf("bad format: exit %d, %s", code, errOut)
	}
}

// diff without --from: host by host; exit 3 when NEW lets more through, 0
// when it only tightens.
func TestPolicyDiffWithoutLog(t *testing.T) {
	wider := t.TempDir()
	writePolicyFiles(t, wider, map[string]string{
		"airlock-policy.yaml": "presets: [none]\n",
		"policy.rego": `package airlock.egress

http_allow := {
	"api.github.com": [{"methods": ["GET", "DELETE"], "paths": ["/repos/acme/*"]}],
	"api.openai.com": [{"methods": ["POST"], "paths": ["/v1/chat/completions"]}],
}
`,
	})
	out, errOut, code := runPolicy(t, "", "diff", tableDir, wider)
	if code != exitNewlyAllowed || !strings.Contains(out, "api.github.com\n  + http 443 DELETE /repos/acme/*\n") {
		t.Fatalf("widening: exit %d, %s\n%s", code, errOut, out)
	}
	out, errOut, code = runPolicy(t, "", "diff", wider, tableDir)
	if code != 0 || !strings.Contains(out, "  - http 443 DELETE /repos/acme/*\n") {
		t.Fatalf("tightening: exit %d, %s\n%s", code, errOut, out)
	}
	out, _, code = runPolicy(t, "", "diff", tableDir, tableDir)
	if code != 0 || out != "no difference\n" {
		t.Fatalf("same: exit %d\n%s", code, out)
	}
}

// eval answers while the directory's tests fail, with a warning naming the
// failing expression; run and serve (policy.New without FailingTests) refuse.
func TestPolicyEvalWhileTestsFail(t *testing.T) {
	dir := t.TempDir()
	writePolicyFiles(t, dir, map[string]string{
		"policy.rego":      "package airlock.egress\n\nallow if input.destination.host == \"x.example\"\n",
		"policy_test.rego": "package airlock.egress_test\n\nimport data.airlock\n\ntest_y if {\n\tairlock.decision.allowed with input as {\"kind\": \"connect\", \"sandbox\": {\"id\": \"s\"}, \"destination\": {\"host\": \"y.example\", \"port\": 443}}\n}\n",
	})
	in := `{"kind": "connect", "sandbox": {"id": "s"}, "destination": {"host": "x.example", "port": 443}}`
	out, errOut, code := runPolicy(t, in, "eval", "--policy", dir, "-i", "-")
	if code != 0 || !strings.Contains(out, `"allowed": true`) {
		t.Fatalf("eval: exit %d, %s\n%s", code, errOut, out)
	}
	if !strings.Contains(errOut, "warning: policy: 1 test(s) failed") || !strings.Contains(errOut, "policy_test.rego:6: airlock.decision.allowed") {
		t.Fatalf("eval: want a warning naming the failing expression, got %s", errOut)
	}
	out, _, code = runPolicy(t, "", "test", dir)
	if code != 1 || !strings.Contains(out, `input: {"destination": {"host": "y.example"`) {
		t.Fatalf("test: exit %d, want the failing input\n%s", code, out)
	}
}

func writePolicyFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for rel, src := range files {
		if err := os.WriteFile(filepath.Join(dir, rel), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
