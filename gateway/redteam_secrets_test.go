package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
	"github.com/airlock-dev/airlock/secrets"
	"github.com/airlock-dev/airlock/secrets/secretstest"
	"github.com/airlock-dev/airlock/test/tcptest"
)

// Red-team battery for placeholders: a sandbox that holds a placeholder tries
// to get it out through every path the gateway relays. Each attack asserts the
// refusal, its flagged audit record, and that the target never received the
// placeholder.

// phRecorder is a loopback target that keeps every byte it was sent.
type phRecorder struct {
	mu  sync.Mutex
	got bytes.Buffer
}

func (r *phRecorder) add(b []byte) {
	r.mu.Lock()
	r.got.Write(b)
	r.mu.Unlock()
}

func (r *phRecorder) saw(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Contains(bytes.ToLower(r.got.Bytes()), []byte(strings.ToLower(s)))
}

// phSetup: sandbox sb-test holds a placeholder bound to bound.example (mode
// placeholder, header X-Api-Key); sb-clean holds none. Policy allows
// other.example, ws.example and raw TCP to the echo address, and intercepts
// nothing.
type phSetup struct {
	h       *harness
	pki     *testPKI
	inj     *secrets.Injector
	ph      string
	other   *secretstest.Upstream // TLS, other.example: allowed, not bound, not intercepted by policy
	ws      *upstream             // plain HTTP websocket echo, ws.example
	wsSeen  *phRecorder
	tcp     string // raw TCP echo address
	tcpSeen *phRecorder
	clean   string // sb-clean's explicit listener
	roots   *x509.CertPool
}

func newPHSetup(t *testing.T) *phSetup {
	t.Helper()
	st := &phSetup{pki: newTestPKI(t), wsSeen: &phRecorder{}, tcpSeen: &phRecorder{}}
	cert := st.pki.leaf(t, "other.example", "bound.example")
	st.other = newEchoUpstream(t, &cert)
	st.ws = newUpstream(t, websocket.Handler(func(c *websocket.Conn) {
		for {
			var msg string
			if err := websocket.Message.Receive(c, &msg); err != nil {
				return
			}
			st.wsSeen.add([]byte(msg))
			websocket.Message.Send(c, msg)
		}
	}), nil)
	st.tcp = tcptest.Listen(t, func(c net.Conn) {
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			st.tcpSeen.add(buf[:n])
			c.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}).Addr().String()

	dir := t.TempDir()
	vf := filepath.Join(dir, "v")
	os.WriteFile(vf, []byte(secretCanary), 0o600)
	cfg, err := secrets.Parse([]byte(fmt.Sprintf(`secrets:
  - id: api
    file: %s
bindings:
  - secret: api
    sandboxes: {ids: [sb-test]}
    host: bound.example
    port: %d
    header: X-Api-Key
    template: "{{value}}"
    mode: placeholder
    placeholder_env: API_KEY
`, vf, st.other.Port)))
	if err != nil {
		t.Fatal(err)
	}
	st.inj, err = secrets.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	env, _ := st.inj.Placeholders(secrets.Sandbox{ID: "sb-test"})
	st.ph = env["API_KEY"]
	tcpIP := netip.MustParseAddrPort(st.tcp).Addr().String()
	dec := policytest.Allow("other.example", "bound.example", "ws.example", tcpIP)
	st.h = newHarness(t, dec, names("other.example", "bound.example", "ws.example"), st.pki, func(c *Config) { c.Injector = st.inj })
	st.h.dialer.allow(st.other.Addr)
	st.h.dialer.allow(st.tcp)
	st.h.allowUpstreams(st.ws)
	cl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.h.g.ServeSandbox(policy.Sandbox{ID: "sb-clean"}, cl, nil); err != nil {
		t.Fatal(err)
	}
	st.clean = cl.Addr().String()
	st.roots = x509.NewCertPool()
	st.roots.AddCert(st.pki.upCA)
	return st
}

// flaggedDeny waits for a record of kind (http or close) that is flagged as a
// placeholder leak.
func flaggedDeny(t *testing.T, h *harness, kind string) audit.Record {
	t.Helper()
	return h.log.Wait(t, kind+" flagged placeholder", func(r audit.Record) bool {
		return r.Kind == kind && audittest.HasReason(r, secrets.CodePlaceholderMisuse) && slices.Contains(r.Flags, secrets.FlagPlaceholderLeak)
	})
}

// Regression (e2e report): a placeholder sent over HTTPS to an --allow'ed host
// that neither policy nor a binding intercepts went through the CONNECT
// tunnel unseen. A sandbox holding placeholders now has every TLS tunnel
// intercepted, so each inner request is checked.
func TestPlaceholderThroughAllowedTunnelIsIntercepted(t *testing.T) {
	st := newPHSetup(t)
	h := st.h
	hostPort := "other.example:" + strconv.Itoa(st.other.Port)
	chunked := func(parts ...string) string {
		var b strings.Builder
		for _, p := range parts {
			fmt.Fprintf(&b, "%x\r\n%s\r\n", len(p), p)
		}
		return b.String() + "0\r\n\r\n"
	}
	ph := st.ph
	mp := "--XB\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a.txt\"\r\n\r\nkey=" + ph + "\r\n--XB--\r\n"
	tests := []struct{ name, raw string }{
		{"header", "GET /echo HTTP/1.1\r\nHost: " + hostPort + "\r\nX-Token: " + ph + "\r\n\r\n"},
		{"bearer", "GET /echo HTTP/1.1\r\nHost: " + hostPort + "\r\nAuthorization: Bearer " + ph + "\r\n\r\n"},
		{"cookie", "GET /echo HTTP/1.1\r\nHost: " + hostPort + "\r\nCookie: a=b; session=" + ph + "\r\n\r\n"},
		{"proxy-authorization inside the tunnel", "GET /echo HTTP/1.1\r\nHost: " + hostPort + "\r\nProxy-Authorization: Basic " +
			base64.StdEncoding.EncodeToString([]byte("u:"+ph)) + "\r\n\r\n"},
		{"upper case", "GET /echo HTTP/1.1\r\nHost: " + hostPort + "\r\nX-Token: " + strings.ToUpper(ph) + "\r\n\r\n"},
		{"query", "GET /echo?k=" + ph + " HTTP/1.1\r\nHost: " + hostPort + "\r\n\r\n"},
		{"bound header, wrong host", "GET /echo HTTP/1.1\r\nHost: " + hostPort + "\r\nX-Api-Key: " + ph + "\r\n\r\n"},
		{"body", "POST /echo HTTP/1.1\r\nHost: " + hostPort + "\r\nContent-Length: " + strconv.Itoa(len(ph)+2) + "\r\n\r\nk=" + ph},
		{"multipart body", "POST /echo HTTP/1.1\r\nHost: " + hostPort + "\r\nContent-Type: multipart/form-data; boundary=XB\r\nContent-Length: " +
			strconv.Itoa(len(mp)) + "\r\n\r\n" + mp},
		{"chunked body straddling chunks", "POST /echo HTTP/1.1\r\nHost: " + hostPort + "\r\nTransfer-Encoding: chunked\r\n\r\n" +
			chunked("k=airlo", "ck-p", "h-"+ph[len("airlock-ph-"):])},
		{"trailer", "POST /echo HTTP/1.1\r\nHost: " + hostPort + "\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n1\r\na\r\n0\r\nX-T: " + ph + "\r\n\r\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := st.other.Received.Load()
			conn, br := mitmConn(t, h, st.pki, "other.example", st.other.Port) // the handshake proves interception
			defer conn.Close()
			io.WriteString(conn, tc.raw)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 403 || !strings.Contains(string(b), secrets.CodePlaceholderMisuse) {
				t.Fatalf("got %d %q, want 403 %s", resp.StatusCode, b, secrets.CodePlaceholderMisuse)
			}
			rec := auditOf(t, h, resp)
			if rec.Decision != audit.DecisionDeny || !slices.Contains(rec.Flags, secrets.FlagPlaceholderLeak) {
				t.Fatalf("audit: got %+v, want a flagged deny", rec)
			}
			if got := st.other.Received.Load() - before; got != 0 {
				t.Fatalf("other.example requests: got %d, want 0", got)
			}
		})
	}

	t.Run("transparent TLS to an allowed host is intercepted too", func(t *testing.T) {
		before := st.other.Received.Load()
		h.origDst.Store(netip.MustParseAddrPort(st.other.Addr))
		c, err := tls.Dial("tcp", h.transp, &tls.Config{ServerName: "other.example", RootCAs: st.pki.mitmCAPool})
		if err != nil {
			t.Fatalf("transparent TLS from a placeholder sandbox must be intercepted: %v", err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET /echo HTTP/1.1\r\nHost: other.example\r\nX-Token: "+ph+"\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 403 {
			t.Fatalf("got %v %v, want 403", resp, err)
		}
		flaggedDeny(t, h, audit.KindHTTP)
		if got := st.other.Received.Load() - before; got != 0 {
			t.Fatalf("other.example requests: got %d, want 0", got)
		}
	})

	t.Run("a sandbox without placeholders keeps its passthrough tunnel", func(t *testing.T) {
		c := clientVia(st.clean, st.roots)
		resp, err := c.Get("https://" + hostPort + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.TLS.PeerCertificates[0].Issuer.CommonName != "fake internet CA" {
			t.Fatalf("got %d from %v, want 200 from the upstream's own certificate", resp.StatusCode, resp.TLS.PeerCertificates[0].Issuer)
		}
	})

	t.Run("base64 of the placeholder is not recognized (documented) and carries nothing", func(t *testing.T) {
		before := st.other.Carrying.Load()
		conn, br := mitmConn(t, h, st.pki, "other.example", st.other.Port)
		defer conn.Close()
		enc := base64.StdEncoding.EncodeToString([]byte(ph))
		io.WriteString(conn, "POST /echo HTTP/1.1\r\nHost: "+hostPort+"\r\nContent-Length: "+strconv.Itoa(len(enc))+"\r\n\r\n"+enc)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("got %v %v, want 200", resp, err)
		}
		io.ReadAll(resp.Body)
		if got := st.other.Carrying.Load() - before; got != 0 {
			t.Fatalf("other.example got the secret %d times", got)
		}
	})
}

// The placeholder on the CONNECT line: in the authority's userinfo (which
// does not normalize), in Proxy-Authorization, in a Host header.
func TestPlaceholderOnConnectLine(t *testing.T) {
	st := newPHSetup(t)
	h := st.h
	target := "other.example:" + strconv.Itoa(st.other.Port)
	for name, raw := range map[string]string{
		"userinfo":            "CONNECT " + st.ph + "@" + target + " HTTP/1.1\r\n\r\n",
		"proxy-authorization": "CONNECT " + target + " HTTP/1.1\r\nProxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("u:"+st.ph)) + "\r\n\r\n",
		"bad host header":     "CONNECT " + target + " HTTP/1.1\r\nHost: " + st.ph + ".example:1\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			before := st.other.Received.Load()
			n := len(h.log.Records())
			if status := exchangeRaw(t, h.explicit, raw); status < 400 {
				t.Fatalf("status %d, want a refusal", status)
			}
			recs := settledRecords(t, h.log, n, 1)
			if len(recs) != 1 || !slices.Contains(recs[0].Flags, secrets.FlagPlaceholderLeak) {
				t.Fatalf("records: got %+v, want one flagged deny", recs)
			}
			if got := st.other.Received.Load() - before; got != 0 {
				t.Fatalf("other.example requests: got %d, want 0", got)
			}
		})
	}
}

// A sandbox holding placeholders gets the streams the gateway does not parse
// as HTTP checked chunk by chunk: raw TCP and websockets after the upgrade.
func TestPlaceholderInOpaqueStreams(t *testing.T) {
	st := newPHSetup(t)
	h := st.h
	tail := st.ph[len(secrets.PlaceholderPrefix):]

	t.Run("raw TCP, prefix split across writes", func(t *testing.T) {
		h.origDst.Store(netip.MustParseAddrPort(st.tcp))
		c, err := net.Dial("tcp", h.transp)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "hello raw\n")
		buf := make([]byte, 10)
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatalf("echo before the placeholder: %v", err)
		}
		io.WriteString(c, "key=AIRLOCK-p")
		time.Sleep(50 * time.Millisecond)
		io.WriteString(c, "h-"+tail+"\n")
		io.Copy(io.Discard, c) // the gateway ends the connection
		rec := flaggedDeny(t, h, audit.KindClose)
		if rec.Error == "" {
			t.Fatalf("close record: got %+v, want the denial as its error", rec)
		}
		if st.tcpSeen.saw(tail) || st.tcpSeen.saw("ph-") {
			t.Fatal("the raw TCP target received the placeholder")
		}
		if !st.tcpSeen.saw("hello raw") {
			t.Fatal("the raw TCP target never saw the clean bytes (test proves nothing)")
		}
	})

	wsSend := func(t *testing.T, c net.Conn, wsURL string, wrap func(net.Conn) io.ReadWriteCloser) {
		t.Helper()
		cfg, _ := websocket.NewConfig(wsURL, "http://ws.example/")
		cfg.Header = http.Header{"Sec-Websocket-Extensions": {"permessage-deflate"}}
		conn, err := websocket.NewClient(cfg, wrap(c))
		if err != nil {
			t.Fatal(err)
		}
		websocket.Message.Send(conn, "clean")
		var got string
		if err := websocket.Message.Receive(conn, &got); err != nil || got != "clean" {
			t.Fatalf("clean echo: %q %v", got, err)
		}
		websocket.Message.Send(conn, "token="+st.ph)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if err := websocket.Message.Receive(conn, &got); err == nil {
			t.Fatalf("the placeholder frame was echoed: %q", got)
		}
	}

	t.Run("websocket through the explicit proxy", func(t *testing.T) {
		c, err := net.Dial("tcp", h.explicit)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wsSend(t, c, "ws://ws.example:"+strconv.Itoa(st.ws.port)+"/ws", func(c net.Conn) io.ReadWriteCloser {
			return &absConn{Conn: c, host: "ws.example:" + strconv.Itoa(st.ws.port)}
		})
		flaggedDeny(t, h, audit.KindHTTP)
		if st.wsSeen.saw(tail) {
			t.Fatal("the websocket upstream received the placeholder")
		}
	})

	t.Run("websocket through the transparent listener", func(t *testing.T) {
		h.origDst.Store(netip.MustParseAddrPort(st.ws.addr))
		c, err := net.Dial("tcp", h.transp)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wsSend(t, c, "ws://ws.example:"+strconv.Itoa(st.ws.port)+"/ws", func(c net.Conn) io.ReadWriteCloser { return c })
		h.log.Wait(t, "transparent websocket flagged", func(r audit.Record) bool {
			return r.Kind == audit.KindHTTP && r.Host == "ws.example" && slices.Contains(r.Flags, secrets.FlagPlaceholderLeak)
		})
		if st.wsSeen.saw(tail) {
			t.Fatal("the websocket upstream received the placeholder")
		}
	})
}

// The stream guard itself, without a network.
func TestStreamGuardFindsSplitPrefix(t *testing.T) {
	inj, err := secrets.New(secrets.Config{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	g := inj.NewStreamGuard(secrets.Sandbox{ID: "x"}, false)
	for _, c := range []string{"abc airl", "ock", "-P"} {
		if err := g.Check([]byte(c)); err != nil {
			t.Fatalf("chunk %q: premature denial %v", c, err)
		}
	}
	if err := g.Check([]byte("H-rest")); err == nil {
		t.Fatal("the chunk completing the prefix passed")
	}
}

// Response scrubbing on the answers that have no body or keep the secret
// outside it: HEAD, 304 with headers, trailers, a value split across TLS
// records and chunks.
func TestRedTeamScrubHeadersAndTrailers(t *testing.T) {
	pki := newTestPKI(t)
	cert := pki.leaf(t, "scrub.example")
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		switch r.URL.Path {
		case "/head":
			w.Header().Set("X-Echo", v)
			w.Header().Set("Content-Length", "1000")
		case "/304":
			w.Header().Set("ETag", `"`+v+`"`)
			w.Header().Set("X-"+v, "name")
			w.WriteHeader(http.StatusNotModified)
		case "/trailer":
			w.Header().Set("Trailer", "X-T")
			w.Write([]byte("body "))
			w.(http.Flusher).Flush()
			w.Header().Set("X-T", base64.StdEncoding.EncodeToString([]byte(v)))
		case "/split":
			for i := 0; i < len(v); i += 3 { // one TLS record and one chunk per flush
				w.Write([]byte(v[i:min(i+3, len(v))]))
				w.(http.Flusher).Flush()
			}
		}
	}), &cert)
	dir := t.TempDir()
	vf := filepath.Join(dir, "v")
	os.WriteFile(vf, []byte(secretCanary), 0o600)
	cfg, err := secrets.Parse([]byte(fmt.Sprintf("secrets:\n  - id: api\n    file: %s\nbindings:\n  - secret: api\n    sandboxes: {ids: [sb-test]}\n    host: scrub.example\n    port: %d\n    template: \"Bearer {{value}}\"\n", vf, up.port)))
	if err != nil {
		t.Fatal(err)
	}
	inj, err := secrets.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, policytest.Allow("scrub.example"), names("scrub.example"), pki, func(c *Config) { c.Injector = inj })
	h.allowUpstreams(up)
	roots := x509.NewCertPool()
	mitm, _ := LoadCACert(pki.mitmCert)
	roots.AddCert(mitm)
	c := clientVia(h.explicit, roots)
	for _, tc := range []struct{ method, path string }{{"HEAD", "/head"}, {"GET", "/304"}, {"GET", "/trailer"}, {"GET", "/split"}} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			before := up.reqs.Load()
			resp, _, all := do(t, c, tc.method, fmt.Sprintf("https://scrub.example:%d%s", up.port, tc.path), nil, "")
			if up.reqs.Load()-before != 1 {
				t.Fatal("the request did not reach the bound upstream (test proves nothing)")
			}
			if carriesCanary(all) {
				t.Fatalf("status %d: the sandbox saw a form of the secret:\n%s", resp.StatusCode, all)
			}
			if !strings.Contains(all, audit.Redacted) {
				t.Fatalf("status %d: nothing was scrubbed (the upstream echoed nothing?):\n%s", resp.StatusCode, all)
			}
		})
	}
}
