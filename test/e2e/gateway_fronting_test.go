package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
)

// TestRootConnectTunnelFronting from inside a sandbox, on
// the fake internet where other.example.test (allowed with --allow, so not
// intercepted) and evil.example are separate servers, as two sites behind one
// CDN address would not be: a CONNECT to other.example.test carries neither
// plaintext HTTP naming evil.example nor a ClientHello for evil.example sent
// in two parts around the 2 s peek window. Plaintext HTTP naming the CONNECT
// host, and raw TCP to a host policy allows it for, still go through.
// other.example.test's server never receives a request for evil.example, and
// evil.example's nothing at all.
func TestRootConnectTunnelFronting(t *testing.T) {
	e := newEnv(t, "")
	otherSeen := len(w.other.Seen())
	evilBefore := snap(w.evil)
	res := e.sh([]string{"--id", sandboxID("fronting"), "--allow", "other.example.test"}, `
curl -sS --max-time 30 -p -x "$HTTP_PROXY" -o /dev/null -w 'fronted=%{http_code}\n' -H 'Host: evil.example' http://other.example.test/steal
curl -sS --max-time 30 -p -x "$HTTP_PROXY" -o /dev/null -w 'pinned=%{http_code}\n' http://other.example.test/pinned
python3 - <<'PY'
import os, socket, ssl, time
from urllib.parse import urlparse

proxy = urlparse(os.environ["HTTP_PROXY"])

def tunnel(target):
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=20)
    s.sendall(b"CONNECT " + target + b" HTTP/1.1\r\nHost: " + target + b"\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    return s, head.split(b" ")[1].decode()

def rest(s, n=4096):
    out = b""
    try:
        while len(out) < n:
            b = s.recv(n)
            if not b:
                break
            out += b
    except OSError as e:
        return "error:" + type(e).__name__
    return repr(out[:20])

ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
obj = ctx.wrap_bio(inc, out, server_hostname="evil.example")
try:
    obj.do_handshake()
except ssl.SSLWantReadError:
    pass
hello = out.read()

s, status = tunnel(b"other.example.test:443")
s.sendall(hello[:7])
time.sleep(3)
s.sendall(hello[7:])
print("split_connect=%s" % status)
print("split_hello=%s" % rest(s))

s, status = tunnel(b"other.example.test:7")
s.sendall(b"raw tcp payload\n")
print("raw_connect=%s" % status)
print("raw=%s" % rest(s, 16))
PY
true
`)
	wantCode(t, res, 0)
	m := kv(res.stdout)
	wantKV(t, m, "fronted", "403", res)
	wantKV(t, m, "pinned", "200", res)
	wantKV(t, m, "split_connect", "200", res)
	wantKV(t, m, "split_hello", "b''", res)
	// A policy that limits --allow hosts to ports 443 and 80 refuses the
	// CONNECT to port 7 itself; one that allows it allows raw TCP too.
	rawAllowed := m["raw_connect"] != "403"
	if rawAllowed {
		wantKV(t, m, "raw_connect", "200", res)
		wantKV(t, m, "raw", `b'raw tcp payload\n'`, res)
	}

	var paths []string
	for _, r := range seenSince(w.other, otherSeen) {
		paths = append(paths, r.URL.Path)
		if !strings.HasPrefix(r.Host, "other.example.test") {
			t.Errorf("other.example.test's server received a request for Host %q", r.Host)
		}
	}
	if fmt.Sprint(paths) != "[/pinned]" {
		t.Errorf("other.example.test's server received %v, want only /pinned", paths)
	}
	if d := snap(w.evil).sub(evilBefore); d.conns != 0 || d.requests != 0 {
		t.Errorf("evil.example: got %d connections, %d requests, want 0 and 0", d.conns, d.requests)
	}

	recs := e.records()
	mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionDeny, host: "other.example.test", path: "/steal"})
	mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "other.example.test", path: "/pinned"})
	var fronting, raw bool
	for _, r := range find(recs, match{kind: audit.KindConnect, host: "other.example.test"}) {
		if r.Port == 443 && r.Decision == audit.DecisionDeny && len(r.Reasons) > 0 && r.Reasons[len(r.Reasons)-1].ID == "host_mismatch" {
			fronting = true
		}
		if r.Port == 7 && r.Decision == audit.DecisionAllow && string(r.Extra["carries"]) == `"tcp"` {
			raw = true
		}
	}
	raw = raw || !rawAllowed
	if !fronting || !raw {
		t.Errorf("want a host_mismatch deny for the split ClientHello (%v) and an allowed raw TCP tunnel on port 7 (%v)\n%s", fronting, raw, dump(recs))
	}
}
