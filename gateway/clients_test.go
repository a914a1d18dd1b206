package gateway

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy/policytest"
)

const bigSize = 64 << 20

// bigHandler streams bigSize deterministic bytes without a Content-Length.
func bigHandler(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/big" {
		fmt.Fprintf(w, "hello %s %s", r.Host, r.URL.Path)
		return
	}
	buf := bytes.Repeat([]byte("airlock!"), 4096)
	for sent := 0; sent < bigSize; sent += len(buf) {
		if _, err := w.Write(buf); err != nil {
			return
		}
	}
}

func bigSum() string {
	h := sha256.New()
	buf := bytes.Repeat([]byte("airlock!"), 4096)
	for sent := 0; sent < bigSize; sent += len(buf) {
		h.Write(buf)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func TestRealClients(t *testing.T) {
	pki := newTestPKI(t)
	cert := pki.leaf(t, "pypi.org", "files.pythonhosted.org")
	tlsUp := newUpstream(t, http.HandlerFunc(bigHandler), &cert)
	plainUp := newUpstream(t, http.HandlerFunc(bigHandler), nil)
	h := newHarness(t, policytest.Allow("pypi.org", "files.pythonhosted.org").Intercept("files.pythonhosted.org"), names("pypi.org", "files.pythonhosted.org", "evil.example"), pki)
	h.allowUpstreams(tlsUp, plainUp)
	// Clients trust the fake internet CA and the interception CA.
	bundle := filepath.Join(t.TempDir(), "bundle.pem")
	up, _ := os.ReadFile(pki.upCAFile)
	mitm, _ := os.ReadFile(pki.mitmCert)
	os.WriteFile(bundle, append(up, mitm...), 0o644)
	roots := pki.upPool.Clone()
	for _, c := range decodeCerts(mitm) {
		roots.AddCert(c)
	}
	proxy := "http://" + h.explicit
	env := append(os.Environ(), "HTTP_PROXY="+proxy, "HTTPS_PROXY="+proxy, "http_proxy="+proxy, "https_proxy="+proxy,
		"NO_PROXY=", "no_proxy=", "SSL_CERT_FILE="+bundle, "CURL_CA_BUNDLE="+bundle, "REQUESTS_CA_BUNDLE="+bundle)
	tlsURL := fmt.Sprintf("https://pypi.org:%d", tlsUp.port)
	mitmURL := fmt.Sprintf("https://files.pythonhosted.org:%d", tlsUp.port)
	plainURL := fmt.Sprintf("http://pypi.org:%d", plainUp.port)

	t.Run("curl", func(t *testing.T) {
		if _, err := exec.LookPath("curl"); err != nil {
			t.Fatal("curl not installed")
		}
		for _, u := range []string{plainURL + "/x", tlsURL + "/x", mitmURL + "/x"} {
			out, err := exec.Command("curl", "-sS", "--max-time", "10", "--proxy", proxy, "--cacert", bundle, u).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "hello") {
				t.Fatalf("curl %s: %v %s", u, err, out)
			}
		}
		out, _ := exec.Command("curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "--proxy", proxy, fmt.Sprintf("http://evil.example:%d/", plainUp.port)).CombinedOutput()
		if string(out) != "403" {
			t.Fatalf("curl denied: got %q, want 403", out)
		}
		out, err := exec.Command("curl", "-sS", "--max-time", "60", "--proxy", proxy, "--cacert", bundle, tlsURL+"/big").Output()
		if err != nil || fmt.Sprintf("%x", sha256.Sum256(out)) != bigSum() {
			t.Fatalf("curl large download through CONNECT: %v, %d bytes", err, len(out))
		}
	})
	t.Run("python urllib", func(t *testing.T) {
		if _, err := exec.LookPath("python3"); err != nil {
			t.Fatal("python3 not installed")
		}
		script := `import sys, urllib.request, hashlib
for u in sys.argv[1:3]:
    print(urllib.request.urlopen(u, timeout=10).read().decode())
h = hashlib.sha256()
r = urllib.request.urlopen(sys.argv[3], timeout=60)
while True:
    b = r.read(1 << 20)
    if not b: break
    h.update(b)
print(h.hexdigest())`
		cmd := exec.Command("python3", "-c", script, tlsURL+"/py", mitmURL+"/py-mitm", mitmURL+"/big")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "hello pypi.org") || !strings.Contains(string(out), "hello files.pythonhosted.org") || !strings.Contains(string(out), bigSum()) {
			t.Fatalf("python: %v\n%s", err, out)
		}
	})
	t.Run("go client streamed plain", func(t *testing.T) {
		c := h.proxyClient(roots)
		c.Timeout = 60 * time.Second
		resp, err := c.Get(plainURL + "/big")
		if err != nil {
			t.Fatal(err)
		}
		hsum := sha256.New()
		n, err := io.Copy(hsum, resp.Body)
		resp.Body.Close()
		if err != nil || n != bigSize || fmt.Sprintf("%x", hsum.Sum(nil)) != bigSum() {
			t.Fatalf("streamed %d bytes, err %v", n, err)
		}
		h.log.Wait(t, "big http", func(r audit.Record) bool {
			return r.Kind == audit.KindHTTP && r.Path == "/big" && r.BytesDown == bigSize
		})
	})
	t.Run("websocket through CONNECT", func(t *testing.T) {
		ws := newUpstream(t, websocket.Handler(func(c *websocket.Conn) { io.Copy(c, c) }), nil)
		h.allowUpstreams(ws)
		c, err := net.Dial("tcp", h.explicit)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT pypi.org:%d HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", ws.port, ws.port)
		br := bufio.NewReader(c)
		if r, err := http.ReadResponse(br, nil); err != nil || r.StatusCode != 200 {
			t.Fatalf("connect: %v %v", r, err)
		}
		cfg, _ := websocket.NewConfig("ws://pypi.org:"+strconv.Itoa(ws.port)+"/ws", "http://pypi.org/")
		conn, err := websocket.NewClient(cfg, &bufConn{Conn: c, r: br})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			msg := fmt.Sprintf("frame %d", i)
			if err := websocket.Message.Send(conn, msg); err != nil {
				t.Fatal(err)
			}
			var got string
			if err := websocket.Message.Receive(conn, &got); err != nil || got != msg {
				t.Fatalf("echo: got %q %v, want %q", got, err, msg)
			}
		}
	})
	t.Run("websocket upgrade over plain proxy", func(t *testing.T) {
		ws := newUpstream(t, websocket.Handler(func(c *websocket.Conn) { io.Copy(c, c) }), nil)
		h.allowUpstreams(ws)
		c, err := net.Dial("tcp", h.explicit)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cfg, _ := websocket.NewConfig("ws://pypi.org:"+strconv.Itoa(ws.port)+"/ws", "http://pypi.org/")
		// An explicit-proxy websocket: the client sends the absolute URL.
		conn, err := websocket.NewClient(cfg, &absConn{Conn: c, host: "pypi.org:" + strconv.Itoa(ws.port)})
		if err != nil {
			t.Fatal(err)
		}
		websocket.Message.Send(conn, "hi")
		var got string
		if err := websocket.Message.Receive(conn, &got); err != nil || got != "hi" {
			t.Fatalf("echo: %q %v", got, err)
		}
	})
}

// absConn rewrites the first request line to absolute form, as a client of an
// explicit proxy sends it.
type absConn struct {
	net.Conn
	host string
	done bool
}

func (c *absConn) Write(p []byte) (int, error) {
	if !c.done && bytes.HasPrefix(p, []byte("GET /")) {
		c.done = true
		q := bytes.Replace(p, []byte("GET /"), []byte("GET http://"+c.host+"/"), 1)
		_, err := c.Conn.Write(q)
		return len(p), err
	}
	return c.Conn.Write(p)
}

func decodeCerts(b []byte) (out []*x509Cert) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out
		}
		if c, err := parseCert(blk.Bytes); err == nil {
			out = append(out, c)
		}
	}
}
