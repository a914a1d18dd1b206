package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/net/websocket"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/test/fakenet"
)

// streamHandler serves /ws (a WebSocket that answers each text message with
// "echo:" and the message) and /sse (three server-sent events, each flushed
// on its own).
func streamHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/ws", websocket.Server{Handler: func(c *websocket.Conn) {
		var msg string
		for websocket.Message.Receive(c, &msg) == nil {
			if websocket.Message.Send(c, "echo:"+msg) != nil {
				return
			}
		}
	}})
	mux.HandleFunc("/sse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		for _, ev := range []string{"data: one\n\n", "data: two\n\n", "event: end\ndata: bye\n\n"} {
			fmt.Fprint(w, ev)
			w.(http.Flusher).Flush()
		}
	})
	return mux
}

// wsClientPy is a stdlib WebSocket client: TLS to argv[1] (the address the
// name resolves to, or argv[3] when given), the upgrade handshake, one masked
// text frame out and one text frame back. It prints ws_status and ws_reply,
// or ws_error.
const wsClientPy = `import base64, os, socket, ssl, sys
host = sys.argv[1]
addr = sys.argv[3] if len(sys.argv) > 3 else host
tag = sys.argv[2]
try:
    raw = socket.create_connection((addr, 443), timeout=30)
    s = ssl.create_default_context().wrap_socket(raw, server_hostname=host)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(("GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nOrigin: https://%s\r\n\r\n" % (host, key, host)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(1)
        if not b:
            raise EOFError("closed during the handshake")
        head += b
    print("%s_status=%s" % (tag, head.split(b" ")[1].decode()))
    payload = b"hello-ws"
    mask = os.urandom(4)
    s.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + bytes(c ^ mask[i % 4] for i, c in enumerate(payload)))
    def exact(n):
        out = b""
        while len(out) < n:
            b = s.recv(n - len(out))
            if not b:
                raise EOFError("closed mid-frame")
            out += b
        return out
    h = exact(2)
    n = h[1] & 0x7f
    print("%s_reply=%s" % (tag, exact(n).decode()))
except Exception as e:
    print("%s_error=%s" % (tag, type(e).__name__))
`

// TestRootWebSocketAndSSEIntercepted: a WebSocket (Python, stdlib only) and
// a server-sent event stream (curl -N) to a host the policy allows and
// intercepts work end to end inside airlock run, each with exactly one audit
// record of its request; the same clients to a host the policy does not
// allow, reached by its address so that DNS is not what stops them, are
// refused and the target sees zero connections.
func TestRootWebSocketAndSSEIntercepted(t *testing.T) {
	e := newEnv(t, "")
	requireTool(t, "/usr/bin/python3")
	requireTool(t, "/usr/bin/curl")
	tag := strings.TrimPrefix(sandboxID("s"), "e2e-s-")
	allowed, denied := "stream-"+tag+".example.test", "nostream-"+tag+".example.test"
	var hosts [2]*fakenet.Host
	for i, name := range []string{allowed, denied} {
		h, err := w.net.AddHost([]string{name}, streamHandler())
		if err != nil {
			t.Fatal(err)
		}
		hosts[i] = h
	}
	pol := filepath.Join(e.dir, "policy")
	if err := os.MkdirAll(pol, 0o755); err != nil {
		t.Fatal(err)
	}
	rego := fmt.Sprintf("package airlock.egress\n\nallow if input.destination.host == %q\n\nmitm if input.destination.host == %q\n", allowed, allowed)
	if err := os.WriteFile(filepath.Join(pol, "streams.rego"), []byte(rego), 0o644); err != nil {
		t.Fatal(err)
	}
	deniedBefore := snap(hosts[1])
	deniedIP := hosts[1].IP.String()
	res := e.sh([]string{"--id", sandboxID("streams"), "--policy", pol}, `
cat > /tmp/ws.py <<'PY'
`+wsClientPy+`PY
/usr/bin/python3 /tmp/ws.py `+allowed+` ws
printf 'sse=%s\n' "$(curl -sSN --noproxy '*' --max-time 60 https://`+allowed+`/sse | grep '^data:' | tr '\n' ',')"
/usr/bin/python3 /tmp/ws.py `+denied+` denied_ws `+deniedIP+`
curl -sSN --noproxy '*' --max-time 30 --resolve `+denied+`:443:`+deniedIP+` -o /dev/null https://`+denied+`/sse; echo "denied_sse_exit=$?"
`)
	wantCode(t, res, 0)
	m := kv(res.stdout)
	wantKV(t, m, "ws_status", "101", res)
	wantKV(t, m, "ws_reply", "echo:hello-ws", res)
	wantKV(t, m, "sse", "data: one,data: two,data: bye,", res)
	if _, ok := m["denied_ws_reply"]; ok || m["denied_ws_status"] == "101" {
		t.Errorf("the WebSocket to a denied host went through\n%s", res)
	}
	if m["denied_sse_exit"] == "0" || m["denied_sse_exit"] == "" {
		t.Errorf("the event stream from a denied host went through\n%s", res)
	}
	if d := snap(hosts[1]).sub(deniedBefore); d.conns != 0 || d.requests != 0 {
		t.Errorf("denied host: got %d connections, %d requests, want 0 and 0\n%s", d.conns, d.requests, res)
	}
	recs := e.records()
	for _, path := range []string{"/ws", "/sse"} {
		if n := len(find(recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: allowed, method: "GET", path: path})); n != 1 {
			t.Errorf("got %d allowed GET %s records, want 1\n%s", n, path, dump(recs))
		}
	}
	mustFind(t, recs, match{decision: audit.DecisionDeny, host: denied})
	mustNotFind(t, recs, match{decision: audit.DecisionAllow, host: denied})
}
