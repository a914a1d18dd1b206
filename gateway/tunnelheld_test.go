package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// connectRaw opens a CONNECT tunnel to host:port through the explicit
// listener and returns the connection and its reader.
func connectRaw(t *testing.T, h *harness, host string, port int) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", h.explicit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n", host, port, host, port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s:%d: %v %v", host, port, resp, err)
	}
	return c, br
}

// TestIdleTunnelHoldsNoPipe: an open tunnel whose bytes stopped moving holds
// its two sockets and nothing else (io.Copy between two *net.TCPConn keeps a
// splice pipe, two more descriptors, per direction for as long as it waits:
// 10,000 idle tunnels were 60,000 descriptors). Every tunnel still echoes
// after the wait, and its close record counts the bytes.
func TestIdleTunnelHoldsNoPipe(t *testing.T) {
	const n = 32
	raw := newRawUpstream(t, "")
	h := newHarness(t, tunnelPolicy(), names("raw.example"), nil)
	h.dialer.allow(raw.addr)
	type tun struct {
		c  net.Conn
		br *bufio.Reader
	}
	echo := func(tn tun, msg string) {
		t.Helper()
		tn.c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(tn.c, msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(tn.br, got); err != nil || string(got) != msg {
			t.Fatalf("echo: got %q (%v), want %q", got, err, msg)
		}
	}
	before := openFDs(t)
	tuns := make([]tun, n)
	for i := range tuns {
		c, br := connectRaw(t, h, "raw.example", raw.port)
		tuns[i] = tun{c, br}
		echo(tuns[i], "first")
	}
	// Every tunnel answered: both directions are back waiting.
	held := openFDs(t) - before
	// Per tunnel: the test's client socket, the gateway's accepted one, its
	// upstream one and the echo server's accepted one; the slack is for what
	// the rest of the process opens meanwhile (the splice pipe pool, other
	// tests' leftovers). A pipe held per idle direction is 8 a tunnel.
	if want := 5*n + 8; held > want {
		t.Fatalf("%d idle tunnels hold %d descriptors in this process, want at most %d (4 sockets each): a pipe is held per idle direction", n, held, want)
	}
	for _, tn := range tuns {
		echo(tn, "second")
	}
	for _, tn := range tuns {
		tn.c.Close()
	}
	closes := 0
	h.log.Wait(t, "close records", func(r audit.Record) bool {
		if r.Kind == audit.KindClose && r.Host == "raw.example" {
			if r.BytesUp != int64(len("firstsecond")) || r.BytesDown != int64(len("firstsecond")) {
				t.Errorf("close record bytes: got up %d down %d, want %d each", r.BytesUp, r.BytesDown, len("firstsecond"))
			}
			closes++
		}
		return closes == n
	})
}

// TestConnectFirstBytesLate: a client that sends its first bytes a while
// after the CONNECT's 200 (the gateway waits on the socket with no buffer)
// is sniffed as one that sends at once: plain HTTP is decided per request,
// a TLS hello to the wrong name is refused, opaque bytes go where kind tcp
// is allowed.
func TestConnectFirstBytesLate(t *testing.T) {
	up := newUpstream(t, nil, nil)
	raw := newRawUpstream(t, "")
	h := newHarness(t, tunnelPolicy(), names("pypi.org", "raw.example"), nil)
	h.allowUpstreams(up)
	h.dialer.allow(raw.addr)
	late := func(c net.Conn, b []byte) {
		time.Sleep(150 * time.Millisecond) // the gateway is waiting on the socket by then
		c.Write(b)
	}
	t.Run("http", func(t *testing.T) {
		c, br := connectRaw(t, h, "pypi.org", up.port)
		late(c, fmt.Appendf(nil, "GET /late HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", up.port))
		c.SetDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !bytes.Contains(b, []byte("hello pypi.org /late")) {
			t.Fatalf("got %d %q", resp.StatusCode, b)
		}
		h.log.Wait(t, "http record", func(r audit.Record) bool {
			return r.Kind == audit.KindHTTP && r.Path == "/late" && r.Decision == audit.DecisionAllow
		})
	})
	t.Run("tls to another name", func(t *testing.T) {
		before := up.conns.Load()
		c, br := connectRaw(t, h, "pypi.org", up.port)
		late(c, helloBytes(t, "evil.example"))
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if n, err := br.Read(make([]byte, 1)); err == nil {
			t.Fatalf("read %d bytes after a hello to another name, want the tunnel closed", n)
		}
		h.log.Wait(t, "fronting deny", func(r audit.Record) bool {
			return r.Kind == audit.KindConnect && r.Decision == audit.DecisionDeny && r.Host == "pypi.org"
		})
		if got := up.conns.Load() - before; got != 0 {
			t.Fatalf("upstream connections: got %d, want 0", got)
		}
	})
	t.Run("opaque", func(t *testing.T) {
		c, br := connectRaw(t, h, "raw.example", raw.port)
		late(c, []byte("ping\n"))
		c.SetDeadline(time.Now().Add(10 * time.Second))
		got := make([]byte, 5)
		if _, err := io.ReadFull(br, got); err != nil || string(got) != "ping\n" {
			t.Fatalf("echo: got %q %v", got, err)
		}
	})
}

// TestConnectHTTPSplicedBody: plaintext HTTP inside a CONNECT with sized
// bodies large enough to be spliced: each byte arrives as sent, the
// upstream connection is reused for the next request (the splice took the
// body and not a byte more), each request's record counts its body, and each
// body went by splice.
func TestConnectHTTPSplicedBody(t *testing.T) {
	const size = 3<<20 + 7
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(i*7 + i>>11)
	}
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(body)
	}), nil)
	h := newHarness(t, tunnelPolicy(), names("pypi.org"), nil)
	h.allowUpstreams(up)
	c, br := connectRaw(t, h, "pypi.org", up.port)
	before, spliced := up.conns.Load(), h.g.splicedBodies.Load()
	for i := range 3 {
		c.SetDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprintf(c, "GET /big/%d HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", i, up.port)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("request %d: read %d bytes (%v), want the %d sent", i, len(got), err, size)
		}
		path := fmt.Sprintf("/big/%d", i)
		rec := h.log.Wait(t, "http record", func(r audit.Record) bool { return r.Kind == audit.KindHTTP && r.Path == path })
		if rec.BytesDown != size {
			t.Fatalf("record bytes_down: got %d, want %d", rec.BytesDown, size)
		}
	}
	if got := up.conns.Load() - before; got != 1 {
		t.Fatalf("upstream connections for 3 requests: got %d, want 1 (kept alive)", got)
	}
	if got := h.g.splicedBodies.Load() - spliced; got != 3 {
		t.Fatalf("bodies spliced: got %d, want 3 (every sized body this long goes by splice)", got)
	}
}

// TestSpliceOnlyUntouchedBodies: a body a scrubber or content inspection
// wrapped is never spliced past them, nor one under the limit or chunked.
func TestSpliceOnlyUntouchedBodies(t *testing.T) {
	h := newHarness(t, tunnelPolicy(), names("pypi.org"), nil)
	a, b := tcpPair(t)
	u := newUpstreamConn(upstreamKey{}, a, lo[0])
	s := h.g.newSession(nil, b, nil)
	raw := io.NopCloser(bytes.NewReader(nil))
	u.body = raw
	var n int64
	wrapped := io.NopCloser(io.LimitReader(raw, 1))
	for _, tc := range []struct {
		name   string
		body   io.ReadCloser
		length int64
		te     []string
		want   bool
	}{
		{"untouched", countReadCloser{countReader{raw, &n}, raw}, spliceMinBody, nil, true},
		{"wrapped by a reader", countReadCloser{countReader{wrapped, &n}, wrapped}, spliceMinBody, nil, false},
		{"small", countReadCloser{countReader{raw, &n}, raw}, spliceMinBody - 1, nil, false},
		{"chunked", countReadCloser{countReader{raw, &n}, raw}, -1, []string{"chunked"}, false},
		{"not counted", raw, spliceMinBody, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &http.Response{Body: tc.body, ContentLength: tc.length, TransferEncoding: tc.te}
			if got := s.spliceFor(resp, u) != nil; got != tc.want {
				t.Fatalf("spliced: got %v, want %v", got, tc.want)
			}
		})
	}
}

// tcpPair is two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a.(*net.TCPConn), b.(*net.TCPConn)
}
