package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
)

// socksRequest is a SOCKS5 CONNECT-family request: cmd to a domain name (or
// an address, atyp 1 or 4, given as raw bytes) and port.
func socksRequest(cmd, atyp byte, addr []byte, port int) []byte {
	b := []byte{socksVersion, cmd, 0, atyp}
	if atyp == socksAtypDomain {
		b = append(b, byte(len(addr)))
	}
	b = append(b, addr...)
	return binary.BigEndian.AppendUint16(b, uint16(port))
}

// socksGreeting offers "no authentication" only.
var socksGreeting = []byte{socksVersion, 1, socksNoAuth}

// socksDial sends raw to the explicit listener and returns everything the
// gateway sent back until it closed (or 5 s passed), and the connection's
// reader positioned after it when it stayed open.
func (h *harness) socksRaw(t *testing.T, raw []byte, closeWrite bool) []byte {
	t.Helper()
	c, err := net.DialTimeout("tcp", h.explicit, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write(raw)
	if closeWrite {
		c.(*net.TCPConn).CloseWrite()
	}
	b, _ := io.ReadAll(c)
	return b
}

// socksConnect performs a CONNECT to host:port (a domain name) and returns the
// connection after a successful reply, or the reply code.
func (h *harness) socksConnect(t *testing.T, host string, port int) (net.Conn, *bufio.Reader, byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", h.explicit, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write(socksGreeting)
	br := bufio.NewReader(c)
	sel := make([]byte, 2)
	if _, err := io.ReadFull(br, sel); err != nil || sel[0] != socksVersion || sel[1] != socksNoAuth {
		t.Fatalf("method selection: got %x %v, want 05 00", sel, err)
	}
	c.Write(socksRequest(socksCmdConnect, socksAtypDomain, []byte(host), port))
	rep := make([]byte, 10)
	if _, err := io.ReadFull(br, rep); err != nil {
		t.Fatalf("reply: %v", err)
	}
	if !bytes.Equal(rep[2:], []byte{0, socksAtypIPv4, 0, 0, 0, 0, 0, 0}) {
		t.Errorf("reply: got %x, want bound address 0.0.0.0:0", rep)
	}
	return c, br, rep[1]
}

// TestSOCKS5Allowed: a SOCKS5 CONNECT by name is an HTTP CONNECT to
// name:port: kind connect in policy and audit (extra.proxy_protocol socks5),
// what the tunnel carries decided as for CONNECT, interception when policy
// asks for it. Real clients: Go's net/http with a socks5:// proxy.
func TestSOCKS5Allowed(t *testing.T) {
	pki := newTestPKI(t)
	cert := pki.leaf(t, "tls.example")
	plain := newUpstream(t, nil, nil)
	tlsUp := newUpstream(t, nil, &cert)
	echo := newRawUpstream(t, "")
	dec := policytest.Allow("pypi.org", "tls.example").Intercept("tls.example")
	dec.Amend(func(in *policy.Input, d *policy.Decision) {
		if in.Destination.Host == "raw.example" {
			*d = policytest.Allowed() // connect and what it carries (kind tcp)
		}
	})
	h := newHarness(t, dec, names("pypi.org", "tls.example", "raw.example"), pki)
	h.allowUpstreams(plain, tlsUp)
	h.dialer.allow(echo.addr)
	pu, _ := url.Parse("socks5://" + h.explicit)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pki.mitmCAPool},
	}}

	t.Run("plain HTTP inside", func(t *testing.T) {
		n := len(h.log.Records())
		resp, err := client.Get("http://pypi.org:" + strconv.Itoa(plain.port) + "/simple/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), "/simple/") {
			t.Fatalf("got %d %q", resp.StatusCode, body)
		}
		client.CloseIdleConnections()
		recs := settledRecords(t, h.log, n, 3) // connect, http, close
		c := recs[0]
		if c.Kind != audit.KindConnect || c.Decision != audit.DecisionAllow || c.Host != "pypi.org" || c.Port != plain.port ||
			c.Method != http.MethodConnect || string(c.Extra["proxy_protocol"]) != `"socks5"` || string(c.Extra["carries"]) != `"http"` {
			t.Errorf("connect record: got %+v", c)
		}
		if r := recs[1]; r.Kind != audit.KindHTTP || r.Decision != audit.DecisionAllow || r.Path != "/simple/" {
			t.Errorf("http record: got %s %s %s", r.Kind, r.Decision, r.Path)
		}
	})

	t.Run("TLS intercepted", func(t *testing.T) {
		n := len(h.log.Records())
		resp, err := client.Get("https://tls.example:" + strconv.Itoa(tlsUp.port) + "/in")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName == "fake internet CA" {
			t.Fatalf("got %d, want 200 through the interception CA", resp.StatusCode)
		}
		client.CloseIdleConnections()
		recs := settledRecords(t, h.log, n, 3)
		if r := recs[1]; r.Kind != audit.KindHTTP || r.Path != "/in" || r.Decision != audit.DecisionAllow {
			t.Errorf("inner record: got %s %s %s", r.Kind, r.Decision, r.Path)
		}
	})

	t.Run("raw TCP inside", func(t *testing.T) {
		n := len(h.log.Records())
		c, br, rep := h.socksConnect(t, "raw.example", echo.port)
		if rep != socksSucceeded {
			t.Fatalf("reply: got %d, want 0", rep)
		}
		io.WriteString(c, "ping\n")
		if line, _ := br.ReadString('\n'); line != "ping\n" {
			t.Errorf("echo: got %q", line)
		}
		c.Close()
		recs := settledRecords(t, h.log, n, 2)
		if r := recs[0]; r.Kind != audit.KindConnect || r.Decision != audit.DecisionAllow || string(r.Extra["carries"]) != `"tcp"` {
			t.Errorf("record: got %s", recSummary(r))
		}
	})

	t.Run("an HTTP proxy client on the same listener", func(t *testing.T) {
		resp, err := h.proxyClient(nil).Get("http://pypi.org:" + strconv.Itoa(plain.port) + "/p")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("got %d, want 200", resp.StatusCode)
		}
	})
}

// TestRedTeamSOCKS5: every SOCKS5 request that must not pass, malformed or
// denied: the right reply (or none, in the greeting phase), exactly one deny
// record with the reason, and zero connections at a target the recording
// dialer would have reached.
func TestRedTeamSOCKS5(t *testing.T) {
	up := newRawUpstream(t, "")
	h := newHarness(t, policytest.Allow("pypi.org"), names("pypi.org", "evil.example"), nil)
	h.dialer.allow(up.addr)
	p := up.port
	req := func(cmd, atyp byte, addr []byte) []byte {
		return append(append([]byte{}, socksGreeting...), socksRequest(cmd, atyp, addr, p)...)
	}
	ok := []byte{socksVersion, socksNoAuth}
	reply := func(rep byte) []byte {
		return append(append([]byte{}, ok...), socksVersion, rep, 0, socksAtypIPv4, 0, 0, 0, 0, 0, 0)
	}
	tests := []struct {
		name      string
		send      []byte
		want      []byte // all the gateway sends back
		reason    string
		host      string // the record's host, when known
		closeSend bool   // half-close after sending (truncated input)
	}{
		{"denied name", req(socksCmdConnect, socksAtypDomain, []byte("evil.example")), reply(socksNotAllowed), policytest.ReasonNotAllowed, "evil.example", false},
		{"IPv4 literal of an allowed host", req(socksCmdConnect, socksAtypIPv4, []byte{127, 0, 0, 1}), reply(socksNotAllowed), policytest.ReasonNotAllowed, "127.0.0.1", false},
		{"IPv6 literal", req(socksCmdConnect, socksAtypIPv6, net.ParseIP("::1").To16()), reply(socksNotAllowed), policytest.ReasonNotAllowed, "::1", false},
		{"BIND", req(0x02, socksAtypDomain, []byte("pypi.org")), reply(socksCmdNotSupported), ReasonSOCKSCommand, "pypi.org", false},
		{"UDP ASSOCIATE", req(0x03, socksAtypDomain, []byte("pypi.org")), reply(socksCmdNotSupported), ReasonSOCKSCommand, "pypi.org", false},
		{"unknown command", req(0x09, socksAtypDomain, []byte("pypi.org")), reply(socksCmdNotSupported), ReasonSOCKSCommand, "pypi.org", false},
		{"unknown address type", append(append([]byte{}, socksGreeting...), socksVersion, socksCmdConnect, 0, 0x05, 1, 2, 3, 4, 0, 80), reply(socksAddrTypeNotSupport), ReasonSOCKSAddrType, "", false},
		{"request version 4", append(append([]byte{}, socksGreeting...), 0x04, socksCmdConnect, 0, socksAtypDomain, 8, 'p', 'y', 'p', 'i', '.', 'o', 'r', 'g', 0, 80), reply(socksGeneralFailure), ReasonBadRequest, "", false},
		{"reserved byte set", append(append([]byte{}, socksGreeting...), socksVersion, socksCmdConnect, 7, socksAtypDomain, 8, 'p', 'y', 'p', 'i', '.', 'o', 'r', 'g', 0, 80), reply(socksGeneralFailure), ReasonBadRequest, "", false},
		{"empty domain", req(socksCmdConnect, socksAtypDomain, nil), reply(socksGeneralFailure), ReasonBadRequest, "", false},
		{"oversized domain", req(socksCmdConnect, socksAtypDomain, []byte(strings.Repeat("a.", 127)+"p")), reply(socksGeneralFailure), ReasonBadDestination, "", false},
		{"domain with a slash", req(socksCmdConnect, socksAtypDomain, []byte("pypi.org/x")), reply(socksGeneralFailure), ReasonBadRequest, "", false},
		{"port zero", append(append([]byte{}, socksGreeting...), socksRequest(socksCmdConnect, socksAtypDomain, []byte("pypi.org"), 0)...), reply(socksGeneralFailure), ReasonBadDestination, "", false},
		{"no acceptable method", []byte{socksVersion, 1, 0x02}, []byte{socksVersion, socksNoAcceptable}, ReasonSOCKSMethod, "", false},
		{"no methods", []byte{socksVersion, 0}, []byte{socksVersion, socksNoAcceptable}, ReasonBadRequest, "", false},
		{"truncated greeting", []byte{socksVersion, 3, 0}, nil, ReasonBadRequest, "", true},
		{"truncated request", append(append([]byte{}, socksGreeting...), socksVersion, socksCmdConnect, 0, socksAtypDomain, 20, 'p', 'y'), reply(socksGeneralFailure), ReasonBadRequest, "", true},
		{"truncated port", append(append([]byte{}, socksGreeting...), socksVersion, socksCmdConnect, 0, socksAtypIPv4, 127, 0, 0, 1, 0), reply(socksGeneralFailure), ReasonBadRequest, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := len(h.log.Records())
			before := up.conns.Load()
			got := h.socksRaw(t, tt.send, tt.closeSend)
			if !bytes.Equal(got, tt.want) {
				t.Errorf("gateway sent %x, want %x", got, tt.want)
			}
			recs := settledRecords(t, h.log, n, 1)
			if len(recs) != 1 {
				t.Fatalf("records: got %d, want 1:\n%v", len(recs), recs)
			}
			r := recs[0]
			if r.Kind != audit.KindConnect || r.Decision != audit.DecisionDeny || !audittest.HasReason(r, tt.reason) ||
				string(r.Extra["proxy_protocol"]) != `"socks5"` {
				t.Errorf("record: got %s %+v, want connect deny %s proxy_protocol socks5", recSummary(r), r.Extra, tt.reason)
			}
			if tt.host != "" && (r.Host != tt.host || r.Port != p) {
				t.Errorf("record destination: got %s:%d, want %s:%d", r.Host, r.Port, tt.host, p)
			}
			if d := up.conns.Load() - before; d != 0 {
				t.Errorf("target connections: got %d, want 0", d)
			}
		})
	}
	if r := h.dialer.refusedAddrs(); len(r) != 0 {
		t.Errorf("the gateway tried to dial %v", r)
	}
}

// TestSOCKS5SlowClient: a client that starts a SOCKS5 handshake and stalls is
// cut off at ReadHeaderTimeout, however it dribbles, with a bad_request
// record; it holds no goroutine past that.
func TestSOCKS5SlowClient(t *testing.T) {
	up := newRawUpstream(t, "")
	h := newHarness(t, policytest.Allow("pypi.org"), names("pypi.org"), nil, func(c *Config) {
		c.ReadHeaderTimeout = 300 * time.Millisecond
	})
	h.dialer.allow(up.addr)
	full := append(append([]byte{}, socksGreeting...), socksRequest(socksCmdConnect, socksAtypDomain, []byte("pypi.org"), up.port)...)
	for _, stall := range []int{1, 3, 8} { // in the greeting, in the request, before the port
		t.Run(fmt.Sprintf("after %d bytes", stall), func(t *testing.T) {
			n := len(h.log.Records())
			c, err := net.DialTimeout("tcp", h.explicit, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write(full[:stall])
			// Keep dribbling one byte of nothing useful every 100 ms: the
			// deadline is absolute.
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := stall; i < len(full)-2; i++ {
					time.Sleep(100 * time.Millisecond)
					if _, err := c.Write(full[i : i+1]); err != nil {
						return
					}
				}
			}()
			c.SetReadDeadline(time.Now().Add(8 * time.Second))
			_, err = io.ReadAll(c)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the gateway kept a stalled handshake open")
			}
			c.Close()
			<-done
			recs := settledRecords(t, h.log, n, 1)
			if r := recs[0]; r.Decision != audit.DecisionDeny || !audittest.HasReason(r, ReasonBadRequest) || !strings.Contains(recs[0].Reasons[0].Msg, "read_header_timeout") {
				t.Errorf("record: got %s %+v", recSummary(r), r.Reasons)
			}
			if c := up.conns.Load(); c != 0 {
				t.Errorf("target connections: got %d, want 0", c)
			}
		})
	}
}

// addrType is the ATYP of a greeting-then-request input, or 0.
func addrType(b []byte) byte {
	if len(b) < 2 || len(b) < 2+int(b[1])+4 {
		return 0
	}
	return b[2+int(b[1])+3]
}

// FuzzSOCKSHandshake: whatever a client sends, the handshake returns a
// target that splits as host:port, or a denial; it never panics, and it
// answers at most the method selection and nothing past it.
func FuzzSOCKSHandshake(f *testing.F) {
	f.Add(append(append([]byte{}, socksGreeting...), socksRequest(socksCmdConnect, socksAtypDomain, []byte("pypi.org"), 443)...))
	f.Add(append(append([]byte{}, socksGreeting...), socksRequest(socksCmdConnect, socksAtypIPv6, net.ParseIP("::1").To16(), 22)...))
	f.Add([]byte{socksVersion, 0})
	f.Add([]byte{socksVersion, 1, 0, socksVersion, 2, 0, socksAtypIPv4, 1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		var out bytes.Buffer
		rc := &reqCtx{}
		target, err := socksHandshake(rc, bufio.NewReader(bytes.NewReader(b)), bufio.NewWriter(&out))
		if err == nil {
			// A target from an address always splits back to it; one from a
			// domain name is left to normalizeConnect to refuse.
			if _, _, serr := hostname.SplitHostPort(target, 0); serr != nil && !strings.HasSuffix(target, ":0") && addrType(b) != socksAtypDomain {
				t.Fatalf("address target %q does not split: %v", target, serr)
			}
		} else if _, ok := err.(*denial); !ok {
			t.Fatalf("error %v is not a denial", err)
		}
		if out.Len() > 2 {
			t.Fatalf("handshake wrote %x, want at most the method selection", out.Bytes())
		}
	})
}

// TestSOCKS5RefusedContentNeverDialed: a SOCKS5 CONNECT allowed by
// destination whose bytes are then refused (plaintext HTTP naming another
// host; opaque bytes where raw TCP is not allowed) never opens a connection
// to the target. Regression: the target used to be dialed when the SOCKS
// request was allowed, before what the tunnel carried was decided, so it saw
// a TCP connection (with zero bytes) for every refused tunnel.
func TestSOCKS5RefusedContentNeverDialed(t *testing.T) {
	plain := newUpstream(t, nil, nil)
	raw := newRawUpstream(t, "")
	h := newHarness(t, tunnelPolicy(), names("pypi.org", "evil.example"), nil)
	h.allowUpstreams(plain)
	h.dialer.allow(raw.addr)
	tests := []struct {
		name  string
		port  int
		send  string
		conns *atomic.Int64
	}{
		{"plaintext HTTP naming another host", plain.port, "GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n", &plain.conns},
		{"opaque bytes where raw TCP is not allowed", raw.port, "\x00\x01binary", &raw.conns},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := len(h.log.Records())
			before := tt.conns.Load()
			c, br, rep := h.socksConnect(t, "pypi.org", tt.port)
			if rep != socksSucceeded {
				t.Fatalf("reply: got %x, want %x", rep, socksSucceeded)
			}
			io.WriteString(c, tt.send)
			io.ReadAll(br) // the refusal, then the close
			recs := settledRecords(t, h.log, n, 1)
			var denied bool
			for _, r := range recs {
				denied = denied || r.Decision == audit.DecisionDeny
			}
			if !denied {
				t.Fatalf("records: got %v, want a denial", recs)
			}
			if d := tt.conns.Load() - before; d != 0 {
				t.Errorf("target connections: got %d, want 0", d)
			}
		})
	}
}
