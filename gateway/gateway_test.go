package gateway

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
	"github.com/airlock-dev/airlock/test/tcptest"
)

var lo = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

func names(hosts ...string) map[string][]netip.Addr {
	m := map[string][]netip.Addr{}
	for _, h := range hosts {
		m[h] = lo
	}
	return m
}

func TestExplicitHTTP(t *testing.T) {
	up := newUpstream(t, nil, nil)
	h := newHarness(t, policytest.Allow("pypi.org").DenyPaths("/secret"), names("pypi.org", "evil.example"), nil)
	h.allowUpstreams(up)
	p := strconv.Itoa(up.port)
	tests := []struct {
		name       string
		raw        string
		wantStatus int
		wantReason string
		wantReqs   int64
	}{
		{"allow", "GET http://pypi.org:" + p + "/simple/ HTTP/1.1\r\nHost: pypi.org:" + p + "\r\n\r\n", 200, "", 1},
		{"deny host", "GET http://evil.example:" + p + "/ HTTP/1.1\r\nHost: evil.example:" + p + "\r\n\r\n", 403, policytest.ReasonNotAllowed, 0},
		{"deny path", "GET http://pypi.org:" + p + "/secret HTTP/1.1\r\nHost: pypi.org:" + p + "\r\n\r\n", 403, policytest.ReasonPathDenied, 0},
		{"fronting Host header", "GET http://pypi.org:" + p + "/ HTTP/1.1\r\nHost: evil.example:" + p + "\r\n\r\n", 403, ReasonHostMismatch, 0},
		{"origin form", "GET / HTTP/1.1\r\nHost: pypi.org:" + p + "\r\n\r\n", 403, ReasonBadRequest, 0},
		{"bad host", "GET http://pypi..org:" + p + "/ HTTP/1.1\r\nHost: pypi..org:" + p + "\r\n\r\n", 403, ReasonBadDestination, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := up.reqs.Load()
			resp, body := rawRequest(t, h.explicit, tc.raw)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status: got %d, want %d (%s)", resp.StatusCode, tc.wantStatus, body)
			}
			id := resp.Header.Get("X-Airlock-Decision")
			if got := up.reqs.Load() - before; got != tc.wantReqs {
				t.Fatalf("upstream requests: got %d, want %d", got, tc.wantReqs)
			}
			if tc.wantReason == "" {
				if !strings.Contains(body, "hello pypi.org") {
					t.Fatalf("body: got %q", body)
				}
				h.log.Wait(t, "allow", func(r audit.Record) bool {
					return r.Kind == audit.KindHTTP && r.Decision == audit.DecisionAllow && r.Status == 200 && r.Path == "/simple/" && r.BytesDown > 0
				})
				return
			}
			if id == "" || !strings.Contains(body, tc.wantReason) || !strings.Contains(body, id) {
				t.Fatalf("deny body %q / decision header %q: want reason %s and the id", body, id, tc.wantReason)
			}
			r := h.log.Wait(t, "deny "+tc.wantReason, func(r audit.Record) bool { return r.ID == id })
			if r.Decision != audit.DecisionDeny || !audittest.HasReason(r, tc.wantReason) {
				t.Fatalf("audit: got %+v, want deny %s", r, tc.wantReason)
			}
		})
	}
	if got := h.dialer.refusedAddrs(); len(got) != 0 {
		t.Fatalf("dialer refused %v: the gateway tried to leave loopback", got)
	}
}

func TestExplicitKeepAliveAndPool(t *testing.T) {
	up := newUpstream(t, nil, nil)
	h := newHarness(t, policytest.Allow("pypi.org"), names("pypi.org"), nil)
	h.allowUpstreams(up)
	c := h.proxyClient(nil)
	for i := 0; i < 20; i++ {
		resp, err := c.Get(fmt.Sprintf("http://pypi.org:%d/x%d", up.port, i))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if got := up.conns.Load(); got != 1 {
		t.Fatalf("upstream connections for 20 kept-alive requests: got %d, want 1", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(h.log.Records()) < 20 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if got := len(h.log.Records()); got != 20 {
		t.Fatalf("audit records: got %d, want 20 (one per request)", got)
	}
}

func TestConnect(t *testing.T) {
	pki := newTestPKI(t)
	cert := pki.leaf(t, "pypi.org", "evil.example")
	up := newUpstream(t, nil, &cert)
	h := newHarness(t, policytest.Allow("pypi.org"), names("pypi.org", "evil.example"), pki)
	h.allowUpstreams(up)

	t.Run("allow", func(t *testing.T) {
		c := h.proxyClient(pki.upPool)
		resp, err := c.Get(fmt.Sprintf("https://pypi.org:%d/simple/", up.port))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.CloseIdleConnections()
		if !strings.Contains(string(b), "hello pypi.org") {
			t.Fatalf("body %q", b)
		}
		open := h.log.Wait(t, "connect allow", func(r audit.Record) bool { return r.Kind == audit.KindConnect && r.Decision == audit.DecisionAllow })
		cl := h.log.Wait(t, "close", func(r audit.Record) bool { return r.Kind == audit.KindClose && r.ID == open.ID })
		if cl.BytesUp == 0 || cl.BytesDown == 0 || cl.DurationMS <= 0 {
			t.Fatalf("close record: got %+v, want bytes both ways and a duration", cl)
		}
	})
	t.Run("deny", func(t *testing.T) {
		before := up.conns.Load()
		resp, body := rawRequest(t, h.explicit, fmt.Sprintf("CONNECT evil.example:%d HTTP/1.1\r\nHost: evil.example:%d\r\n\r\n", up.port, up.port))
		if resp.StatusCode != 403 || resp.Header.Get("X-Airlock-Decision") == "" || !strings.Contains(body, policytest.ReasonNotAllowed) {
			t.Fatalf("got %d %q", resp.StatusCode, body)
		}
		if got := up.conns.Load() - before; got != 0 {
			t.Fatalf("upstream connections after deny: got %d, want 0", got)
		}
		h.log.Wait(t, "connect deny", func(r audit.Record) bool {
			return r.Kind == audit.KindConnect && r.Decision == audit.DecisionDeny && r.Host == "evil.example"
		})
	})
	t.Run("sni fronting", func(t *testing.T) {
		before := up.reqs.Load()
		c, err := net.Dial("tcp", h.explicit)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT pypi.org:%d HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", up.port, up.port)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("connect: %v %v", resp, err)
		}
		tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: "evil.example", RootCAs: pki.upPool})
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err == nil {
			t.Fatal("handshake with SNI evil.example through CONNECT pypi.org succeeded")
		}
		h.log.Wait(t, "fronting deny", func(r audit.Record) bool {
			return r.Kind == audit.KindConnect && r.Decision == audit.DecisionDeny && audittest.HasReason(r, ReasonHostMismatch)
		})
		if got := up.reqs.Load() - before; got != 0 {
			t.Fatalf("upstream requests: got %d, want 0", got)
		}
	})
	t.Run("tunnel cap", func(t *testing.T) {
		h2 := newHarness(t, policytest.Allow("pypi.org"), names("pypi.org"), pki, func(c *Config) { c.MaxTunnelsPerSandbox = 1 })
		h2.allowUpstreams(up)
		c1, err := net.Dial("tcp", h2.explicit)
		if err != nil {
			t.Fatal(err)
		}
		defer c1.Close()
		fmt.Fprintf(c1, "CONNECT pypi.org:%d HTTP/1.1\r\n\r\n", up.port)
		if r, err := http.ReadResponse(bufio.NewReader(c1), nil); err != nil || r.StatusCode != 200 {
			t.Fatalf("first tunnel: %v %v", r, err)
		}
		resp, body := rawRequest(t, h2.explicit, fmt.Sprintf("CONNECT pypi.org:%d HTTP/1.1\r\n\r\n", up.port))
		if resp.StatusCode != 403 || !strings.Contains(body, ReasonTunnelLimit) {
			t.Fatalf("second tunnel: got %d %q, want 403 %s", resp.StatusCode, body, ReasonTunnelLimit)
		}
	})
}

// bufConn reads first from a bufio.Reader that may hold bytes read past a header.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func TestMITM(t *testing.T) {
	pki := newTestPKI(t)
	good := pki.leaf(t, "pypi.org")
	up := newUpstream(t, nil, &good)
	wrong := pki.leaf(t, "other.example")
	upWrong := newUpstream(t, nil, &wrong)
	self := newUpstreamSelfSigned(t)
	dec := policytest.Allow("pypi.org", "wrongname.example", "selfsigned.example").Intercept("pypi.org", "wrongname.example", "selfsigned.example").DenyPaths("/denied")
	h := newHarness(t, dec, map[string][]netip.Addr{"pypi.org": lo, "wrongname.example": lo, "selfsigned.example": lo}, pki)
	h.allowUpstreams(up, upWrong, self)

	c := h.proxyClient(pki.mitmCAPool)
	get := func(url string) (*http.Response, string) {
		t.Helper()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	t.Run("allow inner", func(t *testing.T) {
		resp, body := get(fmt.Sprintf("https://pypi.org:%d/simple/", up.port))
		if resp.StatusCode != 200 || !strings.Contains(body, "hello pypi.org") {
			t.Fatalf("got %d %q", resp.StatusCode, body)
		}
		if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName == "fake internet CA" {
			t.Fatal("response was not intercepted")
		}
		var inner *policy.Input
		for _, in := range dec.Inputs() {
			if in.Kind == policy.KindHTTP && in.HTTP.Path == "/simple/" {
				inner = &in
			}
		}
		if inner == nil || inner.TLS == nil || !inner.TLS.Intercepted || inner.HTTP.Scheme != "https" {
			t.Fatalf("inner request input: got %+v, want kind http, scheme https, tls.intercepted", inner)
		}
	})
	t.Run("deny inner", func(t *testing.T) {
		before := up.reqs.Load()
		resp, body := get(fmt.Sprintf("https://pypi.org:%d/denied", up.port))
		if resp.StatusCode != 403 || !strings.Contains(body, policytest.ReasonPathDenied) {
			t.Fatalf("got %d %q", resp.StatusCode, body)
		}
		if got := up.reqs.Load() - before; got != 0 {
			t.Fatalf("upstream requests: got %d, want 0", got)
		}
	})
	for _, tc := range []struct {
		name, host string
		port       int
	}{
		{"wrong name upstream", "wrongname.example", upWrong.port},
		{"self-signed upstream", "selfsigned.example", self.port},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := get(fmt.Sprintf("https://%s:%d/", tc.host, tc.port))
			if resp.StatusCode != 502 || !strings.Contains(body, ReasonUpstreamTLS) {
				t.Fatalf("got %d %q, want 502 %s", resp.StatusCode, body, ReasonUpstreamTLS)
			}
			h.log.Wait(t, "tls error", func(r audit.Record) bool {
				return r.Kind == audit.KindHTTP && r.Host == tc.host && r.Status == 502 && strings.Contains(r.Error, "tls")
			})
		})
	}
	if upWrong.reqs.Load() != 0 || self.reqs.Load() != 0 {
		t.Fatalf("unverified upstreams got requests: %d, %d", upWrong.reqs.Load(), self.reqs.Load())
	}
	t.Run("host switch and absolute-form smuggling", func(t *testing.T) {
		before := up.reqs.Load()
		conn, br := mitmConn(t, h, pki, "pypi.org", up.port)
		defer conn.Close()
		for i, raw := range []string{
			fmt.Sprintf("GET /ok HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", up.port),
			fmt.Sprintf("GET http://evil.example:%d/ HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", up.port, up.port),
		} {
			io.WriteString(conn, raw)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			want := []int{200, 403}[i]
			if resp.StatusCode != want {
				t.Fatalf("request %d: got %d, want %d", i, resp.StatusCode, want)
			}
		}
		conn2, br2 := mitmConn(t, h, pki, "pypi.org", up.port)
		defer conn2.Close()
		io.WriteString(conn2, "GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n")
		resp, err := http.ReadResponse(br2, nil)
		if err != nil || resp.StatusCode != 403 {
			t.Fatalf("Host switch inside tunnel: %v %v", resp, err)
		}
		if got := up.reqs.Load() - before; got != 1 {
			t.Fatalf("upstream requests: got %d, want 1", got)
		}
	})
	t.Run("no CA configured", func(t *testing.T) {
		h2 := newHarness(t, dec, names("pypi.org"), nil)
		h2.allowUpstreams(up)
		resp, body := rawRequest(t, h2.explicit, fmt.Sprintf("CONNECT pypi.org:%d HTTP/1.1\r\n\r\n", up.port))
		if resp.StatusCode != 403 || !strings.Contains(body, ReasonMITMUnavailable) {
			t.Fatalf("got %d %q", resp.StatusCode, body)
		}
		h2.log.Wait(t, "mitm unavailable", func(r audit.Record) bool { return audittest.HasReason(r, ReasonMITMUnavailable) })
	})
}

// mitmConn opens an intercepted tunnel and returns the inner TLS connection,
// speaking HTTP/1.1 (HTTP/2 inside interception: h2_test.go).
func mitmConn(t *testing.T, h *harness, pki *testPKI, host string, port int) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", h.explicit)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s:%d HTTP/1.1\r\n\r\n", host, port)
	br := bufio.NewReader(c)
	if r, err := http.ReadResponse(br, nil); err != nil || r.StatusCode != 200 {
		t.Fatalf("connect: %v %v", r, err)
	}
	tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: host, RootCAs: pki.mitmCAPool, NextProtos: []string{"http/1.1"}})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
		t.Fatalf("ALPN inside interception: got %q, want http/1.1", p)
	}
	return tc, bufio.NewReader(tc)
}

func newUpstreamSelfSigned(t *testing.T) *upstream {
	u := &upstream{}
	u.srv = newSelfSignedServer(t, &u.reqs)
	u.addr = u.srv.Listener.Addr().String()
	u.port = int(netip.MustParseAddrPort(u.addr).Port())
	return u
}

func TestPolicyError(t *testing.T) {
	up := newUpstream(t, nil, nil)
	dec := policytest.Failing("eval failed")
	h := newHarness(t, dec, names("pypi.org"), nil)
	h.allowUpstreams(up)
	resp, body := rawRequest(t, h.explicit, fmt.Sprintf("GET http://pypi.org:%d/ HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", up.port, up.port))
	if resp.StatusCode != 403 || !strings.Contains(body, policy.ReasonPolicyError) {
		t.Fatalf("got %d %q: a policy error must deny even in report mode", resp.StatusCode, body)
	}
	if up.reqs.Load() != 0 {
		t.Fatal("upstream reached after a policy error")
	}
	h.log.Wait(t, "policy error", func(r audit.Record) bool {
		return r.Decision == audit.DecisionError && audittest.HasReason(r, policy.ReasonPolicyError)
	})
}

// TestGuard covers rebinding, metadata and IP spellings with a guard that allows
// nothing private: the recording dialer must see no attempt at all.
func TestGuard(t *testing.T) {
	dec := policytest.Func(func(*policy.Input) policy.Decision { return policytest.Allowed() })
	h := newHarness(t, dec, map[string][]netip.Addr{
		"rebind.example":   {netip.MustParseAddr("127.0.0.1")},
		"metadata.example": {netip.MustParseAddr("169.254.169.254")},
		"mixed.example":    {netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("::ffff:169.254.169.254")},
	}, nil, func(c *Config) { c.AllowCIDRs = nil })
	tests := []struct {
		name, target, wantHost, wantIP string
	}{
		{"rebinding to loopback", "rebind.example:80", "rebind.example", "127.0.0.1"},
		{"rebinding to metadata", "metadata.example:80", "metadata.example", "169.254.169.254"},
		{"private and mapped metadata", "mixed.example:80", "mixed.example", "10.0.0.1"},
		{"decimal loopback", "2130706433:80", "127.0.0.1", "127.0.0.1"},
		{"octal loopback", "0177.0.0.1:80", "127.0.0.1", "127.0.0.1"},
		{"hex metadata", "0xa9fea9fe:80", "169.254.169.254", "169.254.169.254"},
		{"ipv4-mapped metadata", "[::ffff:169.254.169.254]:80", "169.254.169.254", "169.254.169.254"},
		{"ipv6 loopback", "[::1]:80", "::1", "::1"},
	}
	for _, tc := range tests {
		for _, method := range []string{"GET", "CONNECT"} {
			t.Run(method+" "+tc.name, func(t *testing.T) {
				var raw string
				if method == "CONNECT" {
					raw = "CONNECT " + tc.target + " HTTP/1.1\r\n\r\n"
				} else {
					raw = "GET http://" + tc.target + "/latest/meta-data/ HTTP/1.1\r\nHost: " + tc.target + "\r\n\r\n"
				}
				resp, body := rawRequest(t, h.explicit, raw)
				if resp.StatusCode != 403 || !strings.Contains(body, ReasonForbiddenAddress) {
					t.Fatalf("got %d %q, want 403 %s", resp.StatusCode, body, ReasonForbiddenAddress)
				}
				id := resp.Header.Get("X-Airlock-Decision")
				r := h.log.Wait(t, "guard deny", func(r audit.Record) bool { return r.ID == id })
				if r.Decision != audit.DecisionDeny || r.Host != tc.wantHost || r.IP != tc.wantIP || !audittest.HasReason(r, ReasonForbiddenAddress) {
					t.Fatalf("audit: got %+v, want deny host %s ip %s", r, tc.wantHost, tc.wantIP)
				}
			})
		}
	}
	for _, in := range dec.Inputs() {
		if strings.HasPrefix(in.Destination.Host, "0") || strings.Contains(in.Destination.Host, "2130706433") || strings.Contains(in.Destination.Host, "ffff") {
			t.Fatalf("policy saw an unnormalized spelling %q", in.Destination.Host)
		}
	}
	if got := h.dialer.refusedAddrs(); len(got) != 0 {
		t.Fatalf("guard let these through to the dialer: %v", got)
	}
}

func TestTransparent(t *testing.T) {
	pki := newTestPKI(t)
	cert := pki.leaf(t, "pypi.org", "evil.example")
	tlsUp := newUpstream(t, nil, &cert)
	plainUp := newUpstream(t, nil, nil)
	tcpUp := newTCPEcho(t)
	dec := policytest.Allow("pypi.org", tcpUp.Addr().(*net.TCPAddr).IP.String())
	h := newHarness(t, dec, names("pypi.org", "evil.example"), pki)
	h.allowUpstreams(tlsUp, plainUp)
	h.dialer.allow(tcpUp.Addr().String())
	fakeDst := func(port int) { h.origDst.Store(netip.AddrPortFrom(netip.MustParseAddr("198.18.0.10"), uint16(port))) }

	tlsGet := func(sni string, port int) error {
		fakeDst(port)
		c, err := tls.Dial("tcp", h.transp, &tls.Config{ServerName: sni, RootCAs: pki.upPool})
		if err != nil {
			return err
		}
		defer c.Close()
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", sni)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	t.Run("tls allow", func(t *testing.T) {
		if err := tlsGet("pypi.org", tlsUp.port); err != nil {
			t.Fatal(err)
		}
		h.log.Wait(t, "tls allow", func(r audit.Record) bool {
			return r.Kind == audit.KindTLS && r.Decision == audit.DecisionAllow && r.Host == "pypi.org"
		})
	})
	t.Run("tls deny", func(t *testing.T) {
		before := tlsUp.conns.Load()
		if err := tlsGet("evil.example", tlsUp.port); err == nil {
			t.Fatal("denied TLS connection completed")
		}
		if tlsUp.conns.Load() != before {
			t.Fatal("upstream saw a connection after deny")
		}
		h.log.Wait(t, "tls deny", func(r audit.Record) bool {
			return r.Kind == audit.KindTLS && r.Decision == audit.DecisionDeny && r.Host == "evil.example"
		})
	})
	t.Run("http allow then host switch", func(t *testing.T) {
		fakeDst(plainUp.port)
		c, err := net.Dial("tcp", h.transp)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for i, host := range []string{"pypi.org", "evil.example"} {
			fmt.Fprintf(c, "GET /p HTTP/1.1\r\nHost: %s:%d\r\n\r\n", host, plainUp.port)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			if want := []int{200, 403}[i]; resp.StatusCode != want {
				t.Fatalf("request %d (Host %s): got %d, want %d", i, host, resp.StatusCode, want)
			}
		}
		if plainUp.reqs.Load() != 1 {
			t.Fatalf("upstream requests: got %d, want 1", plainUp.reqs.Load())
		}
		h.log.Wait(t, "host switch", func(r audit.Record) bool {
			return r.Kind == audit.KindHTTP && audittest.HasReason(r, ReasonHostMismatch)
		})
	})
	t.Run("http deny", func(t *testing.T) {
		fakeDst(plainUp.port)
		before := plainUp.reqs.Load()
		resp, _ := rawRequest(t, h.transp, fmt.Sprintf("GET / HTTP/1.1\r\nHost: evil.example:%d\r\n\r\n", plainUp.port))
		if resp.StatusCode != 403 || plainUp.reqs.Load() != before {
			t.Fatalf("got %d, upstream %d", resp.StatusCode, plainUp.reqs.Load()-before)
		}
	})
	t.Run("tcp allow by ip", func(t *testing.T) {
		ap := netip.MustParseAddrPort(tcpUp.Addr().String())
		h.origDst.Store(ap)
		c, err := net.Dial("tcp", h.transp)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		// Server-first wait: send nothing until the peek gives up, then talk.
		time.Sleep(400 * time.Millisecond)
		io.WriteString(c, "\x00\x01ping")
		buf := make([]byte, 6)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "\x00\x01ping" {
			t.Fatalf("echo: %q %v", buf, err)
		}
		h.log.Wait(t, "tcp allow", func(r audit.Record) bool {
			return r.Kind == audit.KindTCP && r.Decision == audit.DecisionAllow && r.IP == "127.0.0.1"
		})
	})
	t.Run("tcp deny", func(t *testing.T) {
		h.origDst.Store(netip.MustParseAddrPort("127.0.0.2:22"))
		c, err := net.Dial("tcp", h.transp)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "\x00\x01binary")
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if n, _ := c.Read(make([]byte, 1)); n != 0 {
			t.Fatal("denied tcp connection got data")
		}
		h.log.Wait(t, "tcp deny", func(r audit.Record) bool {
			return r.Kind == audit.KindTCP && r.Decision == audit.DecisionDeny && r.Host == "127.0.0.2"
		})
	})
	t.Run("no original destination", func(t *testing.T) {
		h.origDst.Store(netip.AddrPort{})
		c, err := net.Dial("tcp", h.transp)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if n, _ := c.Read(make([]byte, 1)); n != 0 {
			t.Fatal("connection without original destination served")
		}
		h.log.Wait(t, "no orig dst", func(r audit.Record) bool { return audittest.HasReason(r, ReasonOriginalDst) })
	})
	if got := h.dialer.refusedAddrs(); len(got) != 0 {
		t.Fatalf("dialer refused %v", got)
	}
}

// newTCPEcho is a raw TCP echo server on loopback.
func newTCPEcho(t *testing.T) net.Listener {
	return tcptest.Listen(t, func(c net.Conn) { io.Copy(c, c) })
}

func TestStopSandboxClosesConnections(t *testing.T) {
	tcpUp := newTCPEcho(t)
	dec := policytest.Func(func(*policy.Input) policy.Decision { return policytest.Allowed() })
	h := newHarness(t, dec, names(), nil)
	h.dialer.allow(tcpUp.Addr().String())
	c, err := net.Dial("tcp", h.explicit)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", tcpUp.Addr())
	br := bufio.NewReader(c)
	if r, err := http.ReadResponse(br, nil); err != nil || r.StatusCode != 200 {
		t.Fatalf("connect: %v %v", r, err)
	}
	io.WriteString(c, "x")
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if b, err := br.ReadByte(); err != nil || b != 'x' {
		t.Fatalf("echo through tunnel: %q %v", b, err)
	}
	h.g.StopSandbox("sb-test")
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("tunnel still open after StopSandbox")
	}
	if _, err := net.DialTimeout("tcp", h.explicit, time.Second); err == nil {
		t.Fatal("listener still accepting after StopSandbox")
	}
	h.log.Wait(t, "close", func(r audit.Record) bool { return r.Kind == audit.KindClose })
}

func TestNewRefusesBadConfig(t *testing.T) {
	dec := policytest.Func(func(*policy.Input) policy.Decision { return policytest.Allowed() })
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"half CA", Config{CACertFile: "/x/ca.pem"}, "ca:"},
		{"leaf ttl", Config{LeafTTL: 100 * time.Hour}, "leaf_ttl"},
		{"missing CA", Config{CACertFile: "/nonexistent/ca.pem", CAKeyFile: "/nonexistent/ca.key"}, "ca cert"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg, dec, &audittest.Log{}, &fakeResolver{}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// TestBrokenAuditLogLetsNothingOut: with an audit log that has failed (a full
// disk), no request reaches the upstream, not even the first one and not one per
// second. Regression: a plain request's record is written after its exchange,
// so each first request after a 1 s block went out unaudited.
func TestBrokenAuditLogLetsNothingOut(t *testing.T) {
	up := newUpstream(t, nil, nil)
	h := newHarness(t, policytest.Allow("pypi.org"), names("pypi.org"), nil)
	h.allowUpstreams(up)
	h.log.Break(errors.New("audit: writer failed: no space left on device"))
	p := strconv.Itoa(up.port)
	for i, raw := range []string{
		"GET http://pypi.org:" + p + "/simple/ HTTP/1.1\r\nHost: pypi.org:" + p + "\r\n\r\n",
		"CONNECT pypi.org:" + p + " HTTP/1.1\r\nHost: pypi.org:" + p + "\r\n\r\n",
	} {
		resp, body := rawRequest(t, h.explicit, raw)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, ReasonAuditUnavailable) {
			t.Fatalf("request %d: got %d %q, want 403 %s", i, resp.StatusCode, body, ReasonAuditUnavailable)
		}
	}
	if got := up.reqs.Load(); got != 0 {
		t.Fatalf("upstream saw %d requests with the audit log broken, want 0", got)
	}
	h.dialer.mu.Lock()
	dialed := len(h.dialer.dialed)
	h.dialer.mu.Unlock()
	if dialed != 0 {
		t.Fatalf("gateway dialed %d upstreams with the audit log broken, want 0", dialed)
	}
}

// TestPolicyKindsAreRecordKinds: the gateway writes a decision's policy.Kind
// as its record's Kind (audit does not import policy), so the two packages
// must spell every kind the gateway decides alike.
func TestPolicyKindsAreRecordKinds(t *testing.T) {
	for _, tt := range []struct {
		policy policy.Kind
		audit  string
	}{
		{policy.KindHTTP, audit.KindHTTP},
		{policy.KindConnect, audit.KindConnect},
		{policy.KindTLS, audit.KindTLS},
		{policy.KindTCP, audit.KindTCP},
		{policy.KindDNS, audit.KindDNS},
	} {
		if string(tt.policy) != tt.audit {
			t.Errorf("got policy kind %q, want %q as audit spells it", tt.policy, tt.audit)
		}
	}
}
