package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
)

// mustDenyWith fails unless a deny record of kind for host:port carries the
// reason id.
func mustDenyWith(t *testing.T, recs []audit.Record, kind, host string, port int, id string) {
	t.Helper()
	for _, r := range find(recs, match{kind: kind, decision: audit.DecisionDeny, host: host}) {
		if r.Port == port && audittest.HasReason(r, id) {
			return
		}
	}
	t.Errorf("no %s deny of %s:%d with reason %s; records:\n%s", kind, host, port, id, dump(recs))
}

// TestRootPolicyPortsAndReadOnly attacks the default policy
// from inside `airlock run`: pypi.org, a registry, on ports it does not serve
// (4444, and the DNS ports 53 and 853) through the explicit proxy and
// transparently; git's fetch POSTed to pypi.org, which is not a git host; and
// a GET carrying a body to a registry. Each is refused, and the fake pypi.org
// counts zero connections on those ports and zero requests on those paths,
// while a plain GET in the same run still passes.
func TestRootPolicyPortsAndReadOnly(t *testing.T) {
	e := newEnv(t, "")
	ports := []int{4444, 53, 853}
	for _, p := range ports {
		if err := w.net.AddTCPPort(w.pypi, p); err != nil {
			t.Fatal(err)
		}
	}
	before := map[int]int64{}
	for _, p := range ports {
		before[p] = w.pypi.PortConns(p)
	}
	seenBefore := len(w.pypi.Seen())
	ip := w.pypi.IP.String()
	res := e.sh([]string{"--id", sandboxID("ports")}, `
c() { curl -sS --max-time 30 -o /dev/null "$@"; }
# Explicit proxy (HTTPS_PROXY / HTTP_PROXY): CONNECT pypi.org:PORT, and plain HTTP.
c -w 'connect_4444=%{http_connect}\n' https://pypi.org:4444/
c -w 'connect_53=%{http_connect}\n' https://pypi.org:53/
c -w 'connect_853=%{http_connect}\n' https://pypi.org:853/
c -w 'http_4444=%{http_code}\n' http://pypi.org:4444/simple/
# Transparent: the proxy ignored, TLS (SNI pypi.org) and HTTP to pypi.org's
# address on the port, and a raw TCP connection.
c --noproxy '*' https://pypi.org:4444/; echo "tls_4444_exit=$?"
c --noproxy '*' https://pypi.org:853/; echo "tls_853_exit=$?"
c --noproxy '*' -w 'thttp_4444=%{http_code}\n' http://pypi.org:4444/simple/
python3 - <<'EOF'
import socket
for port in (4444, 853):
    try:
        s = socket.create_connection(("`+ip+`", port), timeout=20)
        s.sendall(b"raw tcp payload\n")
        print("raw_%d=%r" % (port, s.recv(100)))
    except OSError as e:
        print("raw_%d_error=%s" % (port, type(e).__name__))
EOF
# Read-only: git's fetch to a registry that is not a git host, and a GET with a body.
c -w 'git_fetch=%{http_code}\n' -X POST -H 'Content-Type: application/x-git-upload-pack-request' --data-binary '0000' https://pypi.org/acme/tiny.git/git-upload-pack
c -w 'get_body=%{http_code}\n' -X GET --data-binary 'secret=exfiltrated' https://pypi.org/simple/body-probe/
# Control: the registry still answers a plain GET in the same run.
c -w 'get=%{http_code}\n' https://pypi.org/simple/
true
`)
	wantCode(t, res, 0)
	m := kv(res.stdout)
	for _, k := range []string{"connect_4444", "connect_53", "connect_853", "http_4444", "thttp_4444", "git_fetch", "get_body"} {
		wantKV(t, m, k, "403", res)
	}
	wantKV(t, m, "get", "200", res)
	for _, k := range []string{"tls_4444_exit", "tls_853_exit"} {
		if m[k] == "0" || m[k] == "" {
			t.Errorf("%s: got %q, want a failure\n%s", k, m[k], res)
		}
	}
	for _, k := range []string{"raw_4444", "raw_853"} {
		if v, ok := m[k]; ok && v != "b''" {
			t.Errorf("%s: got an answer %s\n%s", k, v, res)
		}
	}

	// The target saw nothing: no connection on those ports, no request on
	// those paths; only the control GET reached pypi.org.
	for _, p := range ports {
		if d := w.pypi.PortConns(p) - before[p]; d != 0 {
			t.Errorf("pypi.org:%d: got %d connections, want 0\n%s", p, d, res)
		}
	}
	seen := seenSince(w.pypi, seenBefore)
	noRequests(t, "git fetch to a registry that is not a git host", seen, func(r *http.Request) bool {
		return strings.HasSuffix(r.URL.Path, "/git-upload-pack")
	})
	noRequests(t, "a read with a body", seen, func(r *http.Request) bool {
		return strings.HasPrefix(r.URL.Path, "/simple/body-probe")
	})
	if len(seen) != 1 || seen[0].Method != http.MethodGet || seen[0].URL.Path != "/simple/" {
		t.Errorf("pypi.org: got %d requests, want only the control GET /simple/", len(seen))
	}

	recs := e.records()
	mustDenyWith(t, recs, audit.KindConnect, "pypi.org", 4444, "port_not_allowed")
	mustDenyWith(t, recs, audit.KindConnect, "pypi.org", 53, "dns_port")
	mustDenyWith(t, recs, audit.KindConnect, "pypi.org", 853, "dns_port")
	mustDenyWith(t, recs, audit.KindHTTP, "pypi.org", 4444, "port_not_allowed")
	mustDenyWith(t, recs, audit.KindTLS, "pypi.org", 4444, "port_not_allowed")
	mustDenyWith(t, recs, audit.KindTLS, "pypi.org", 853, "dns_port")
	for _, p := range []string{"/acme/tiny.git/git-upload-pack", "/simple/body-probe/"} {
		r := mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionDeny, host: "pypi.org", path: p})
		want := "read_only_body"
		if strings.HasSuffix(p, "git-upload-pack") {
			want = "git_fetch_not_git_host"
		}
		if !audittest.HasReason(r, want) || r.Status != http.StatusForbidden {
			t.Errorf("%s: got reasons %+v status %d, want %s and 403", p, r.Reasons, r.Status, want)
		}
	}
	mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "pypi.org", method: "GET", path: "/simple/"})
	mustNotFind(t, recs, match{decision: audit.DecisionAllow, host: ip})
}
