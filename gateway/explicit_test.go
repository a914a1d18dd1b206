package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy/policytest"
)

// TestExplicitFrontConnection covers what the explicit proxy must keep per
// connection: pipelined requests each get their own Host check and audit
// record, bytes sent right behind a CONNECT reach the tunnel, a chunked
// request body is read to its end and the connection carries the next
// request, and a client that stops sending its body is dropped.
func TestExplicitFrontConnection(t *testing.T) {
	pki := newTestPKI(t)
	cert := pki.leaf(t, "pypi.org")
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "hello %s %s %d", r.Host, r.URL.Path, len(b))
	}), nil)
	tlsUp := newUpstream(t, nil, &cert)
	h := newHarness(t, policytest.Allow("pypi.org"), names("pypi.org", "evil.example"), pki,
		func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
	h.allowUpstreams(up, tlsUp)
	p := up.port

	t.Run("pipelined requests", func(t *testing.T) {
		before, recsBefore := up.reqs.Load(), len(h.log.Records())
		c, err := net.Dial("tcp", h.explicit)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET http://pypi.org:%d/one HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n"+
			"POST http://pypi.org:%d/two HTTP/1.1\r\nHost: pypi.org:%d\r\nContent-Length: 5\r\n\r\nabcde"+
			"GET http://pypi.org:%d/three HTTP/1.1\r\nHost: evil.example:%d\r\n\r\n", p, p, p, p, p, p)
		br := bufio.NewReader(c)
		for i, want := range []int{200, 200, 403} {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("response %d: %v", i, err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != want {
				t.Fatalf("response %d: got %d %q, want %d", i, resp.StatusCode, b, want)
			}
			if i == 1 && !strings.Contains(string(b), "/two 5") {
				t.Fatalf("pipelined POST: got %q, want its 5-byte body upstream", b)
			}
		}
		if got := up.reqs.Load() - before; got != 2 {
			t.Fatalf("upstream requests: got %d, want 2", got)
		}
		h.log.Wait(t, "fronting deny", func(r audit.Record) bool { return r.Path == "/three" && audittest.HasReason(r, ReasonHostMismatch) })
		if got := len(h.log.Records()) - recsBefore; got != 3 {
			t.Fatalf("audit records: got %d, want 3 (one per request)", got)
		}
	})

	t.Run("bytes right behind CONNECT", func(t *testing.T) {
		c, err := net.Dial("tcp", h.explicit)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		// The CONNECT and the whole ClientHello leave in one write, before the 200.
		rec := &recordConn{Conn: c}
		tc := tls.Client(&bufConn{Conn: rec, r: bufio.NewReader(rec)}, &tls.Config{ServerName: "pypi.org", RootCAs: pki.upPool})
		rec.prefix = fmt.Sprintf("CONNECT pypi.org:%d HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", tlsUp.port, tlsUp.port)
		if err := tc.Handshake(); err != nil {
			t.Fatalf("handshake through CONNECT with early ClientHello: %v", err)
		}
		io.WriteString(tc, "GET /early HTTP/1.1\r\nHost: pypi.org\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("inner request: %v %v", resp, err)
		}
	})

	t.Run("chunked request body, then the next request", func(t *testing.T) {
		c, err := net.Dial("tcp", h.explicit)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "POST http://pypi.org:%d/chunked HTTP/1.1\r\nHost: pypi.org:%d\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", p, p)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(b), "/chunked 3") || resp.Close {
			t.Fatalf("got %d %q close=%v, want 200 with the 3-byte body, kept alive", resp.StatusCode, b, resp.Close)
		}
		fmt.Fprintf(c, "GET http://pypi.org:%d/next HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", p, p)
		resp, err = http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ = io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(b), "/next 0") {
			t.Fatalf("second request: got %d %q, want 200 from /next", resp.StatusCode, b)
		}
	})

	t.Run("stalled request body is dropped", func(t *testing.T) {
		before := up.reqs.Load()
		c, err := net.Dial("tcp", h.explicit)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "POST http://pypi.org:%d/stall HTTP/1.1\r\nHost: pypi.org:%d\r\nContent-Length: 100\r\n\r\nonly-some", p, p)
		b, _ := io.ReadAll(c) // returns when the gateway gives up on the body
		if strings.Contains(string(b), "200 OK") {
			t.Fatalf("a request with a stalled body was answered 200: %q", b)
		}
		h.log.Wait(t, "stalled body", func(r audit.Record) bool { return r.Path == "/stall" && r.Error != "" })
		if got := up.reqs.Load() - before; got > 1 {
			t.Fatalf("upstream requests: got %d", got)
		}
	})
}

// recordConn sends prefix together with the first write (a client that does
// not wait for the CONNECT answer) and then skips the proxy's 200 response.
type recordConn struct {
	net.Conn
	prefix  string
	skipped bool
	br      *bufio.Reader
}

func (c *recordConn) Write(p []byte) (int, error) {
	if c.prefix != "" {
		buf := append([]byte(c.prefix), p...)
		c.prefix = ""
		if _, err := c.Conn.Write(buf); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *recordConn) Read(p []byte) (int, error) {
	if c.br == nil {
		c.br = bufio.NewReader(c.Conn)
	}
	if !c.skipped {
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil {
			return 0, err
		}
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("connect answered %d", resp.StatusCode)
		}
		c.skipped = true
	}
	return c.br.Read(p)
}

// TestExplicitUnhandledRequestRefused: goproxy dispatches every request of the
// explicit proxy; one it answers by itself, no handler of the gateway's having
// taken it (here a goproxy front without them, whose own transport refuses to
// dial), is refused 502 and audited once: goproxy's own answer never reaches
// the client, and nothing reaches the upstream. The front fails closed.
func TestExplicitUnhandledRequestRefused(t *testing.T) {
	up := newUpstream(t, nil, nil)
	h := newHarness(t, policytest.Allow("pypi.org"), names("pypi.org"), nil)
	h.allowUpstreams(up)
	h.g.mu.Lock()
	s := h.g.sandboxes["sb-test"]
	h.g.mu.Unlock()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	bare := goproxy.NewProxyHttpServer()
	bare.Logger = log.New(io.Discard, "", 0)
	bare.Tr = &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
		return nil, errNoGoproxyTransport
	}}
	el := &explicitListener{Listener: l, g: h.g, s: s, proxy: bare}
	go func() {
		c, err := el.Accept()
		if err == nil {
			h.g.explicitHandler(c)
		}
	}()
	resp, body := rawRequest(t, l.Addr().String(), fmt.Sprintf("GET http://pypi.org:%d/x HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", up.port, up.port))
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("X-Airlock-Reason") != ReasonUpstream {
		t.Fatalf("got %d %s %q, want 502 %s", resp.StatusCode, resp.Header.Get("X-Airlock-Reason"), body, ReasonUpstream)
	}
	if !strings.Contains(body, "decision "+resp.Header.Get("X-Airlock-Decision")) {
		t.Fatalf("got body %q, want the gateway's refusal", body)
	}
	recs := h.log.Records()
	if len(recs) != 1 || recs[0].Decision != audit.DecisionDeny || len(recs[0].Reasons) == 0 || recs[0].Reasons[0].ID != ReasonUpstream ||
		!strings.Contains(recs[0].Reasons[0].Msg, "not handled by the explicit proxy") {
		t.Fatalf("got records %+v, want one %s: not handled by the explicit proxy", recs, ReasonUpstream)
	}
	if n, c := up.reqs.Load(), up.conns.Load(); n != 0 || c != 0 {
		t.Fatalf("upstream saw %d requests, %d connections; want 0", n, c)
	}
}
