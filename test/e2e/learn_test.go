package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// learnAgent is the "agent" of the suggest round trip: what it does, each
// step printing one key=value line.
const learnAgent = `
noenv() { env -u HTTP_PROXY -u HTTPS_PROXY -u ALL_PROXY -u http_proxy -u https_proxy -u all_proxy "$@"; }
code() { curl -sS --max-time 30 -o /dev/null -w '%{http_code}' "$@" 2>/dev/null || true; }
echo "pypi=$(code https://pypi.org/simple/)"
echo "api_get=$(code https://api.example.test/v1/items)"
echo "api_get2=$(code https://api.example.test/v1/users)"
echo "api_post=$(code -X POST -H 'Content-Type: application/json' -d '{}' https://api.example.test/v1/jobs)"
echo "other=$(code http://other.example.test/status)"
echo "metadata=$(noenv curl -sS --max-time 10 -o /dev/null -w '%{http_code}' http://169.254.169.254/latest/meta-data/ 2>/dev/null)"
python3 - <<'EOF'
import socket
try:
    s = socket.create_connection(("other.example.test", 5432), timeout=20)
    s.sendall(b"ping\n")
    print("db=%s" % s.recv(10).decode().strip())
except OSError as e:
    print("db_error=%s" % type(e).__name__)
EOF
`

// TestRootSuggestRoundTrip: the suggest round trip with the real
// gateway: an agent runs in report mode (everything it does goes through,
// what the default policy would refuse is logged as denied), `airlock policy
// suggest` writes a policy from that log, and the same agent in enforce mode
// under the suggested policy gets exactly the same answers, while what it
// never did (another host, another method and path, another port) is
// refused with the targets seeing nothing. Report mode intercepts the HTTPS
// it lets through only because it is reported, so HTTPS is learned
// with its methods and paths, as plain HTTP is, and written as an http_allow
// table: under it a DELETE the agent never sent is refused at HTTP level and
// never reaches the API. `policy replay` of the suggestion against the
// report-mode log exits 3 (it newly allows what the log shows denied), and
// against the enforce-mode log 0.
func TestRootSuggestRoundTrip(t *testing.T) {
	requireTool(t, "/usr/bin/curl")
	requireTool(t, "/usr/bin/python3")
	if err := w.net.AddTCPPort(w.other, 5432); err != nil {
		t.Fatal(err)
	}
	learnRun := newEnv(t, "")
	res := learnRun.sh([]string{"--id", sandboxID("learn"), "--mode", "report"}, learnAgent)
	wantCode(t, res, 0)
	seen := kv(res.stdout)
	for k, v := range map[string]string{"pypi": "200", "api_get": "200", "api_post": "200", "other": "200", "db": "ping"} {
		wantKV(t, seen, k, v, res)
	}
	if v := seen["metadata"]; v == "200" {
		t.Fatalf("the metadata address answered in report mode\n%s", res)
	}
	learned := learnRun.records()
	// HTTPS no rule allows is intercepted in report mode: its requests are
	// in the log with their methods and paths, as plain HTTP's are.
	mustFind(t, learned, match{kind: audit.KindConnect, decision: audit.DecisionDeny, host: "api.example.test"})
	mustFind(t, learned, match{kind: audit.KindHTTP, decision: audit.DecisionDeny, host: "api.example.test", method: "GET", path: "/v1/items"})
	mustFind(t, learned, match{kind: audit.KindHTTP, decision: audit.DecisionDeny, host: "api.example.test", method: "POST", path: "/v1/jobs"})
	mustFind(t, learned, match{kind: audit.KindHTTP, decision: audit.DecisionDeny, host: "other.example.test", method: "GET", path: "/status"})

	pol := filepath.Join(learnRun.dir, "suggested")
	if out, code := airlockCLI(t, "policy", "suggest", "--from", learnRun.audit, "--out", pol); code != 0 {
		t.Fatalf("policy suggest: exit %d\n%s", code, out)
	}
	if table, err := os.ReadFile(filepath.Join(pol, "http_allow.rego")); err != nil || !strings.Contains(string(table), `"api.example.test": [{"methods":["GET"]`) {
		t.Errorf("suggest: want api.example.test in http_allow.rego, got %q (%v)", table, err)
	}
	if out, code := airlockCLI(t, "policy", "replay", "--policy", pol, "--from", learnRun.audit); code != 3 {
		t.Errorf("policy replay of the suggestion on the report-mode log: exit %d, want 3 (it opens what the log shows denied)\n%s", code, out)
	}

	enforce := newEnv(t, "")
	before := snap(w.evil)
	otherSeen, apiSeen := len(w.other.Seen()), len(w.api.Seen())
	res = enforce.sh([]string{"--id", sandboxID("learned"), "--policy", pol}, learnAgent+`
echo "evil=$(code https://evil.example/x)"
echo "api_other_port=$(code --max-time 10 https://api.example.test:8443/v1/items)"
echo "other_admin=$(code -X POST -d x http://other.example.test/admin)"
echo "api_delete=$(code -X DELETE https://api.example.test/v1/items)"
`)
	wantCode(t, res, 0)
	got := kv(res.stdout)
	for _, k := range []string{"pypi", "api_get", "api_get2", "api_post", "other", "metadata", "db", "db_error"} {
		if got[k] != seen[k] {
			t.Errorf("%s: got %q under the suggested policy, %q in report mode", k, got[k], seen[k])
		}
	}
	for _, k := range []string{"evil", "api_other_port", "other_admin", "api_delete"} {
		if v := got[k]; v == "200" || v == "" {
			t.Errorf("%s: got %q, want a refusal: the agent never did it\n%s", k, v, res)
		}
	}
	if d := snap(w.evil).sub(before); d.conns != 0 || d.requests != 0 {
		t.Errorf("evil.example: got %d connections, %d requests, want 0 and 0", d.conns, d.requests)
	}
	for _, r := range seenSince(w.other, otherSeen) {
		if r.URL.Path == "/admin" {
			t.Errorf("other.example.test saw %s /admin, which the suggested policy must refuse", r.Method)
		}
	}
	for _, r := range seenSince(w.api, apiSeen) {
		if r.Method == "DELETE" {
			t.Errorf("api.example.test saw DELETE %s, which the suggested policy must refuse", r.URL.Path)
		}
	}
	recs := enforce.records()
	for _, r := range recs {
		if r.Decision == audit.DecisionDeny && (r.Host == "pypi.org" || r.Host == "api.example.test" && r.Port == 443 && r.Method != "DELETE" || r.Path == "/status") {
			t.Errorf("the suggested policy denied what the agent did in report mode: %+v", r)
		}
	}
	if out, code := airlockCLI(t, "policy", "replay", "--policy", pol, "--from", enforce.audit); code != 0 {
		t.Errorf("policy replay of the suggestion on its own enforce-mode log: exit %d, want 0\n%s", code, out)
	}
}

// airlockCLI runs the airlock binary with args and returns its combined
// output and exit code.
func airlockCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, w.bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	}
	t.Fatalf("airlock %s: %v\n%s", strings.Join(args, " "), err, out.String())
	return "", -1
}
