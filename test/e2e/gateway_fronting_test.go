package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// TestRootConnectTunnelFronting (issue 16 item 1) from inside a sandbox, on
// the fake internet where pypi.org and evil.example are separate servers: a
// CONNECT to pypi.org carries neither plaintext HTTP naming evil.example nor
// a ClientHello for evil.example sent in two parts around the 2 s peek
// window, nor raw bytes to a port policy allows no raw TCP to; plaintext HTTP
// naming pypi.org through the same kind of tunnel still works. pypi.org's
// server never receives a request for evil.example, nor a handshake byte.
func TestRootConnectTunnelFronting(t *testing.T) {
	e := newEnv(t, "")
	pypiSeen := len(w.pypi.Seen())
	evilBefore := snap(w.evil)
	res := e.sh([]string{"--id", sandboxID("fronting")}, `
curl -sS --max-time 30 -p -x "$HTTP_PROXY" -o /dev/null -w 'fronted=%{http_code}\n' -H 'Host: evil.example' http://pypi.org/simple/
curl -sS --max-time 30 -p -x "$HTTP_PROXY" -o /dev/null -w 'pinned=%{http_code}\n' http://pypi.org/simple/
python3 - <<'EOF'
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

def rest(s):
    out = b""
    try:
        while True:
            b = s.recv(4096)
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

s, status = tunnel(b"pypi.org:443")
s.sendall(hello[:7])
time.sleep(3)
s.sendall(hello[7:])
print("split_connect=%s" % status)
print("split_hello=%s" % rest(s))

s, status = tunnel(b"pypi.org:7")
s.sendall(b"raw tcp payload\n")
print("raw_connect=%s" % status)
print("raw=%s" % rest(s))
EOF
true
`)
	wantCode(t, res, 0)
	m := kv(res.stdout)
	wantKV(t, m, "fronted", "403", res)
	wantKV(t, m, "pinned", "200", res)
	wantKV(t, m, "split_connect", "200", res)
	wantKV(t, m, "split_hello", "b''", res)
	// A policy that refuses port 7 for pypi.org already refuses the CONNECT.
	if m["raw_connect"] != "403" {
		wantKV(t, m, "raw_connect", "200", res)
		wantKV(t, m, "raw", "b''", res)
	}

	for _, r := range seenSince(w.pypi, pypiSeen) {
		if !strings.HasPrefix(r.Host, "pypi.org") {
			t.Errorf("pypi.org's server received a request for Host %q", r.Host)
		}
	}
	got := 0
	for _, r := range seenSince(w.pypi, pypiSeen) {
		if r.Method == http.MethodGet && r.URL.Path == "/simple/" {
			got++
		}
	}
	if got != 1 {
		t.Errorf("pypi.org received %d GET /simple/, want 1 (the pinned one)", got)
	}
	if d := snap(w.evil).sub(evilBefore); d.conns != 0 || d.requests != 0 {
		t.Errorf("evil.example: got %d connections, %d requests, want 0 and 0", d.conns, d.requests)
	}

	recs := e.records()
	mustFind(t, recs, match{kind: "http", decision: "deny", host: "pypi.org", path: "/simple/"})
	mustFind(t, recs, match{kind: "http", decision: "allow", host: "pypi.org", path: "/simple/"})
	var fronting, rawDenied bool
	for _, r := range find(recs, match{kind: "connect", decision: "deny", host: "pypi.org"}) {
		for _, x := range r.Reasons {
			if r.Port == 443 && x.ID == "host_mismatch" {
				fronting = true
			}
			if r.Port == 7 {
				rawDenied = true
			}
		}
	}
	if !fronting || !rawDenied {
		t.Errorf("want a host_mismatch deny for the split ClientHello (%v) and a deny for raw TCP on port 7 (%v)\n%s", fronting, rawDenied, dump(recs))
	}
}
