package gateway

import (
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/policy/policytest"
)

// TestRefusalsExplainThemselves: a refusal's status line and body tell the
// agent (and the person reading its output) what was refused, why, and how
// to allow it, for a plain request and a CONNECT through the explicit proxy
// (the gateway writes every status line itself); the upstream sees nothing.
func TestRefusalsExplainThemselves(t *testing.T) {
	up := newHeaderUpstream(t)
	h := newHarness(t, policytest.Allow("pypi.org"), names("pypi.org", "evil.example"), nil)
	h.allowUpstreams(up.upstream)
	p := strconv.Itoa(up.port)
	tests := []struct {
		name       string
		raw        string
		wantPhrase string
		wantBody   []string
	}{
		{"plain GET", "GET http://evil.example:" + p + "/repos/acme/x?token=SECRET HTTP/1.1\r\nHost: evil.example:" + p + "\r\n\r\n",
			"airlock denied evil.example:" + p + " (" + policytest.ReasonNotAllowed + ")",
			[]string{"policy denies GET evil.example:" + p + "/repos/acme/x", policytest.ReasonNotAllowed, "evil.example is not allowed",
				"add evil.example:" + p + " to the sandbox's allow list", "policy suggest", "decision "}},
		{"CONNECT", "CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n",
			"airlock denied evil.example:443 (" + policytest.ReasonNotAllowed + ")",
			[]string{"policy denies evil.example:443", "add evil.example to the sandbox's allow list"}},
		{"host mismatch", "GET http://pypi.org:" + p + "/ HTTP/1.1\r\nHost: evil.example\r\n\r\n",
			"", []string{"names another host"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := rawRequest(t, h.explicit, tt.raw)
			if resp.StatusCode != 403 {
				t.Fatalf("status: got %d, want 403", resp.StatusCode)
			}
			if phrase := strings.TrimPrefix(resp.Status, "403 "); !strings.HasPrefix(phrase, tt.wantPhrase) {
				t.Errorf("reason phrase: got %q, want %q", phrase, tt.wantPhrase)
			}
			for _, w := range tt.wantBody {
				if !strings.Contains(body, w) {
					t.Errorf("body lacks %q:\n%s", w, body)
				}
			}
			if strings.Contains(body, "SECRET") || strings.Contains(resp.Status, "SECRET") {
				t.Errorf("the refusal quotes the query: %q %q", resp.Status, body)
			}
			if id := resp.Header.Get("X-Airlock-Decision"); id == "" || !strings.Contains(body, "decision "+id) {
				t.Errorf("body %q does not name the decision %q", body, id)
			}
		})
	}
	if n, c := up.reqs.Load(), up.conns.Load(); n != 0 || c != 0 {
		t.Errorf("upstream saw %d requests on %d connections, want 0", n, c)
	}
}

func TestPhrasable(t *testing.T) {
	if got := phrasable("a\r\nb\x1b[2K\u202ec"); got != "ab[2Kc" {
		t.Errorf("got %q, want control bytes and non-ASCII dropped", got)
	}
	if got := phrasable(strings.Repeat("x", 200)); len(got) != 120 || !strings.HasSuffix(got, "...") {
		t.Errorf("got %d bytes %q, want 120 ending in ...", len(got), got)
	}
}
