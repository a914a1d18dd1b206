package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/ipguard"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
)

// Red-team battery against the gateway: each attack is a request an agent in a
// sandbox could send to reach a denied host or an internal address. Every case
// asserts what the client gets, that exactly one audit record was written for
// it, and what the upstream saw (zero requests for every refusal).

// headerUpstream counts requests and keeps the last request's headers and
// Host.
type headerUpstream struct {
	*upstream
	mu   sync.Mutex
	hdr  http.Header
	host string
}

func newHeaderUpstream(t *testing.T) *headerUpstream {
	hu := &headerUpstream{}
	hu.upstream = newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hu.mu.Lock()
		hu.hdr, hu.host = r.Header.Clone(), r.Host
		hu.mu.Unlock()
		io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "hello %s", r.Host)
	}), nil)
	return hu
}

func (hu *headerUpstream) last() (http.Header, string) {
	hu.mu.Lock()
	defer hu.mu.Unlock()
	return hu.hdr, hu.host
}

// exchangeRaw writes raw on a new connection and returns the status of the
// first response (0 when the gateway closed without one).
func exchangeRaw(t *testing.T, addr, raw string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, raw)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func TestRedTeamExplicitProxy(t *testing.T) {
	up := newHeaderUpstream(t)
	h := newHarness(t, policytest.Allow("pypi.org", "127.0.0.1"), names("pypi.org", "evil.example", "xn--bcher-kva.example"), nil)
	h.allowUpstreams(up.upstream)
	p := strconv.Itoa(up.port)
	ok, evil := "pypi.org:"+p, "evil.example:"+p
	get := func(target, host, extra string) string {
		return "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\n" + extra + "\r\n"
	}
	tests := []struct {
		name  string
		raw   string
		allow bool  // the request is legitimate once normalized
		reqs  int64 // upstream requests; -1: not checked
	}{
		{"CL and TE together", "POST http://" + ok + "/ HTTP/1.1\r\nHost: " + ok + "\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" +
			get("http://"+evil+"/", evil, ""), true, 1},
		{"conflicting Content-Length", "POST http://" + ok + "/ HTTP/1.1\r\nHost: " + ok + "\r\nContent-Length: 0\r\nContent-Length: 44\r\n\r\n" +
			get("http://"+evil+"/", evil, ""), false, 0},
		{"Content-Length list", "POST http://" + ok + "/ HTTP/1.1\r\nHost: " + ok + "\r\nContent-Length: 0, 44\r\n\r\n" +
			get("http://"+evil+"/", evil, ""), false, 0},
		{"TE with obs-fold", "POST http://" + ok + "/ HTTP/1.1\r\nHost: " + ok + "\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n", false, 0},
		{"TE chunked, identity", "POST http://" + ok + "/ HTTP/1.1\r\nHost: " + ok + "\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", false, 0},
		{"two TE headers", "POST http://" + ok + "/ HTTP/1.1\r\nHost: " + ok + "\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false, 0},
		{"bare LF hides a header", "GET http://" + ok + "/ HTTP/1.1\r\nHost: " + ok + "\r\nX-A: 1\nContent-Length: 30\r\n\r\n", false, 0},
		{"bare LF everywhere", "GET http://" + evil + "/ HTTP/1.1\nHost: " + evil + "\n\n", false, 0},
		{"bare CR in a header", "GET http://" + ok + "/ HTTP/1.1\r\nHost: " + ok + "\r\nX-A: 1\rHost: " + evil + "\r\n\r\n", false, 0},
		{"NUL in a header", get("http://"+ok+"/", ok, "X-A: a\x00b\r\n"), false, 0},
		{"NUL in the URL", get("http://"+ok+"/a\x00b", ok, ""), false, 0},
		{"NUL in the Host", get("http://"+ok+"/", "pypi.org\x00.evil.example:"+p, ""), false, 0},
		// Allowed host: the head may have left before the body failed; the
		// upstream sees a truncated body, the client a 502.
		{"long chunk extension", "POST http://" + ok + "/ HTTP/1.1\r\nHost: " + ok + "\r\nTransfer-Encoding: chunked\r\n\r\n1;" + strings.Repeat("x", 70000) + "\r\na\r\n0\r\n\r\n", false, -1},
		{"long chunk extension to a denied host", "POST http://" + evil + "/ HTTP/1.1\r\nHost: " + evil + "\r\nTransfer-Encoding: chunked\r\n\r\n1;" + strings.Repeat("x", 70000) + "\r\na\r\n0\r\n\r\n", false, 0},
		{"userinfo names the allowed host", get("http://pypi.org@"+evil+"/", evil, ""), false, 0},
		{"userinfo, Host allowed", get("http://pypi.org@"+evil+"/", ok, ""), false, 0},
		{"fragment hides the host", get("http://"+evil+"#@pypi.org/", evil, ""), false, 0},
		{"backslash", get("http://"+ok+"\\@"+evil+"/", ok, ""), false, 0},
		{"IPv6 zone", get("http://[fe80::1%25eth0]:"+p+"/", "[fe80::1%25eth0]:"+p, ""), false, 0},
		{"percent-encoded host", get("http://%65vil.example:"+p+"/", "%65vil.example:"+p, ""), false, 0},
		{"percent-encoded host, Host allowed", get("http://%70ypi.org:"+p+"/", ok, ""), false, 0},
		{"trailing dot and upper case", get("http://PyPI.org.:"+p+"/", "PYPI.ORG:"+p, ""), true, 1},
		{"unicode URL, punycode Host (denied host)", get("http://bücher.example:"+p+"/", "xn--bcher-kva.example:"+p, ""), false, 0},
		{"duplicate Host", get("http://"+ok+"/", ok, "Host: "+evil+"\r\n"), false, 0},
		{"Host differs from URL", get("http://"+ok+"/", evil, ""), false, 0},
		{"CONNECT with another Host", "CONNECT " + ok + " HTTP/1.1\r\nHost: " + evil + "\r\n\r\n", false, 0},
		{"CONNECT to a bracketed IPv4", "CONNECT [127.0.0.1]:" + p + " HTTP/1.1\r\n\r\n", false, 0},
		{"CONNECT to a decimal IP (policy allows 127.0.0.1)", "CONNECT 2130706433:" + p + " HTTP/1.1\r\n\r\n", true, 0},
		{"CONNECT without port", "CONNECT pypi.org HTTP/1.1\r\n\r\n", false, 0},
		{"HTTP/1.0 without Host", "GET http://" + ok + "/ HTTP/1.0\r\n\r\n", false, 0},
		{"HTTP/0.9", "GET http://" + ok + "/\r\n\r\n", false, 0},
		{"Expect 100-continue to a denied host", "POST http://" + evil + "/ HTTP/1.1\r\nHost: " + evil + "\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n", false, 0},
		{"unknown Expect", "POST http://" + ok + "/ HTTP/1.1\r\nHost: " + ok + "\r\nExpect: 200-ok\r\nContent-Length: 0\r\n\r\n", false, 0},
		{"websocket to a denied host", get("http://"+evil+"/ws", evil, "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"), false, 0},
		{"https URL through the plain proxy, denied host", get("https://"+evil+"/", evil, ""), false, 0},
		{"https URL through the plain proxy, allowed host", get("https://"+ok+"/", ok, ""), false, 0},
		{"origin form", get("/", ok, ""), false, 0},
		{"asterisk form", "OPTIONS * HTTP/1.1\r\nHost: " + ok + "\r\n\r\n", false, 0},
		{"header name with space", get("http://"+ok+"/", ok, "Bad Name: x\r\n"), false, 0},
		{"oversized header", get("http://"+ok+"/", ok, "X-Big: "+strings.Repeat("a", 70<<10)+"\r\n"), false, 0},
		{"loopback by decimal IP", get("http://2130706433:"+p+"/", "2130706433:"+p, ""), true, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := len(h.log.Records())
			before := up.reqs.Load()
			status := exchangeRaw(t, h.explicit, tc.raw)
			recs := settledRecords(t, h.log, n, 1)
			var decisions []audit.Record
			for _, r := range recs {
				if r.Kind != audit.KindClose {
					decisions = append(decisions, r)
				}
			}
			if len(decisions) < 1 {
				t.Fatalf("status %d with no audit record", status)
			}
			first := decisions[0]
			if tc.allow {
				if status != 200 || first.Decision != audit.DecisionAllow {
					t.Fatalf("got status %d, record %+v; want 200 allow", status, first)
				}
			} else {
				failed := first.Decision == audit.DecisionAllow && first.Error != "" && status >= 500
				if status == 200 || first.Decision == audit.DecisionAllow && !failed {
					t.Fatalf("got status %d, record %+v; want a refusal", status, first)
				}
				if len(decisions) != 1 {
					t.Fatalf("got %d decision records, want exactly 1: %+v", len(decisions), decisions)
				}
			}
			if got := up.reqs.Load() - before; tc.reqs >= 0 && got != tc.reqs {
				t.Fatalf("upstream requests: got %d, want %d", got, tc.reqs)
			}
		})
	}
}

// seqResolver answers lookups from a list, one answer per call, and counts.
type seqResolver struct {
	mu      sync.Mutex
	answers [][]netip.Addr
	calls   int
}

func (r *seqResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.answers[min(r.calls, len(r.answers)-1)]
	r.calls++
	return a, nil
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, x := range s {
		out = append(out, netip.MustParseAddr(x))
	}
	return out
}

// The guarded dialer against hostile DNS answers. The recording dialer is
// allowed nothing: every dial attempt is recorded and refused, so the test
// sees which addresses the guard let through without a packet being sent.
func TestRedTeamGuardedDialer(t *testing.T) {
	many := make([]string, 0, 1001)
	for i := 0; i < 1000; i++ {
		many = append(many, fmt.Sprintf("10.%d.%d.1", i/250, i%250))
	}
	many = append(many, "198.18.0.9")
	tests := []struct {
		name    string
		answers [][]netip.Addr
		want    []string // dial attempts, in order
	}{
		{"public and private mixed: never the private one", [][]netip.Addr{addrs("10.0.0.5", "198.18.0.7", "127.0.0.1", "169.254.169.254")}, []string{"198.18.0.7:443"}},
		{"only private", [][]netip.Addr{addrs("10.0.0.5", "192.168.1.1", "169.254.169.254", "100.100.100.200")}, nil},
		{"AAAA-only embedding loopback and metadata", [][]netip.Addr{addrs("::ffff:127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::1", "2001:0:4136:e378:8000:63bf:80ff:fffe", "fd00:ec2::254", "::1", "fe80::1")}, nil},
		{"zero addresses", [][]netip.Addr{{}}, nil},
		{"a thousand private, one public", [][]netip.Addr{addrs(many...)}, []string{"198.18.0.9:443"}},
		{"rebinding on a second lookup", [][]netip.Addr{addrs("198.18.0.7"), addrs("127.0.0.1")}, []string{"198.18.0.7:443"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rd := &recordingDialer{allowed: map[string]bool{}}
			res := &seqResolver{answers: tc.answers}
			// The fake internet (198.18.0.0/15, a reserved block) is the allowed CIDR.
			d := &dialer{res: res, guard: ipguard.New([]netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}, nil), dial: rd.DialContext, timeout: time.Second}
			c, _, err := d.dialHost(context.Background(), "sb-test", "rebind.example", 443)
			if c != nil || err == nil {
				t.Fatal("dial succeeded against a dialer that allows nothing")
			}
			got := rd.refusedAddrs()
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("dial attempts: got %v, want %v", got, tc.want)
			}
			if res.calls != 1 {
				t.Fatalf("lookups: got %d, want 1 (the dialed address is the checked one)", res.calls)
			}
			var dn *denial
			if tc.want == nil && len(tc.answers[0]) > 0 && !errors.As(err, &dn) {
				t.Fatalf("error: got %v, want a destination_forbidden denial", err)
			}
		})
	}
}

// Transparent listener: the name in the SNI decides, never the address the
// sandbox connected to; a stalled or oversized ClientHello is refused and
// audited; a ClientHello in 1-byte segments still works.
func TestRedTeamTransparentTLS(t *testing.T) {
	pki := newTestPKI(t)
	cert := pki.leaf(t, "pypi.org")
	up := newUpstream(t, nil, &cert)
	denied := newUpstream(t, nil, &cert)
	h := newHarness(t, policytest.Allow("pypi.org"), names("pypi.org", "evil.example"), pki, func(c *Config) {
		c.HandshakeTimeout = 500 * time.Millisecond
	})
	h.allowUpstreams(up)
	h.dialer.allow(denied.addr)
	upAP := netip.MustParseAddrPort(up.addr)
	// pypi.org resolves to 127.0.0.1 on up's port through the original
	// destination's port; the denied upstream listens elsewhere.
	hello := func(t *testing.T, sni string, dst netip.AddrPort, roots bool) error {
		t.Helper()
		h.origDst.Store(dst)
		c, err := net.Dial("tcp", h.transp)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cfg := &tls.Config{ServerName: sni, RootCAs: pki.upPool}
		if sni == "" {
			cfg.InsecureSkipVerify = true // the client's own choice; the gateway passes through
		}
		tc := tls.Client(c, cfg)
		tc.SetDeadline(time.Now().Add(3 * time.Second))
		if err := tc.Handshake(); err != nil {
			return err
		}
		io.WriteString(tc, "GET / HTTP/1.1\r\nHost: pypi.org\r\nConnection: close\r\n\r\n")
		_, err = io.ReadAll(tc)
		return err
	}
	t.Run("allowed address, denied SNI", func(t *testing.T) {
		before := up.conns.Load()
		if err := hello(t, "evil.example", upAP, true); err == nil {
			t.Fatal("handshake for a denied SNI succeeded")
		}
		h.log.Wait(t, "tls deny evil.example", func(r audit.Record) bool {
			return r.Kind == audit.KindTLS && r.Host == "evil.example" && r.Decision == audit.DecisionDeny
		})
		if got := up.conns.Load() - before; got != 0 {
			t.Fatalf("upstream connections: got %d, want 0", got)
		}
	})
	t.Run("denied address, allowed SNI: the gateway dials what it resolved", func(t *testing.T) {
		// The sandbox connected to the denied server's address; the name
		// pypi.org resolves (gateway resolver) to 127.0.0.1 and the port is
		// the original destination's, i.e. the denied server's port.
		dst := netip.MustParseAddrPort(denied.addr)
		hello(t, "PyPI.org.", dst, true)
		rec := h.log.Wait(t, "tls allow pypi.org", func(r audit.Record) bool {
			return r.Kind == audit.KindTLS && r.Host == "pypi.org" && r.Port == int(dst.Port())
		})
		if rec.IP != "127.0.0.1" {
			t.Fatalf("dialed IP: got %q, want the resolver's 127.0.0.1", rec.IP)
		}
		// The tunnel's close record can come after the client saw EOF; wait for
		// it so it is not counted in the next case (a flake under -race).
		h.log.Wait(t, "close pypi.org", func(r audit.Record) bool {
			return r.Kind == audit.KindClose && r.Host == "pypi.org" && r.Port == int(dst.Port())
		})
	})
	t.Run("partial ClientHello then stall", func(t *testing.T) {
		h.origDst.Store(upAP)
		before := up.conns.Load()
		c, err := net.Dial("tcp", h.transp)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		n := len(h.log.Records())
		c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01})
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadAll(c); err != nil {
			t.Fatalf("the gateway did not close a stalled handshake: %v", err)
		}
		recs := settledRecords(t, h.log, n, 1)
		if len(recs) != 1 || recs[0].Decision != audit.DecisionDeny || !audittest.HasReason(recs[0], ReasonBadRequest) {
			t.Fatalf("records: got %+v, want one bad_request deny", recs)
		}
		if got := up.conns.Load() - before; got != 0 {
			t.Fatalf("upstream connections: got %d, want 0", got)
		}
	})
	t.Run("oversized ClientHello", func(t *testing.T) {
		h.origDst.Store(upAP)
		c, err := net.Dial("tcp", h.transp)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		n := len(h.log.Records())
		// A handshake message announcing 64 KiB, sent in full records.
		msg := []byte{0x01, 0x01, 0x00, 0x00}
		rec := append([]byte{0x16, 0x03, 0x01, 0x40, 0x00}, msg...)
		rec = append(rec, make([]byte, 0x4000-len(msg))...)
		for i := 0; i < 4; i++ {
			c.Write(rec)
			rec = append([]byte{0x16, 0x03, 0x01, 0x40, 0x00}, make([]byte, 0x4000)...)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		io.ReadAll(c)
		recs := settledRecords(t, h.log, n, 1)
		if len(recs) != 1 || recs[0].Decision != audit.DecisionDeny {
			t.Fatalf("records: got %+v, want one deny", recs)
		}
	})
	t.Run("ClientHello in 1-byte segments", func(t *testing.T) {
		h.origDst.Store(upAP)
		c, err := net.Dial("tcp", h.transp)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		tc := tls.Client(&oneByteConn{Conn: c}, &tls.Config{ServerName: "pypi.org", RootCAs: pki.upPool})
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			t.Fatalf("handshake through 1-byte segments: %v", err)
		}
	})
}

// oneByteConn writes one byte per TCP segment.
type oneByteConn struct{ net.Conn }

func (c *oneByteConn) Write(p []byte) (int, error) {
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	for i := range p {
		if _, err := c.Conn.Write(p[i : i+1]); err != nil {
			return i, err
		}
	}
	return len(p), nil
}

// perSandbox allows pypi.org (intercepted) for sb-test only.
func perSandbox() *policytest.Decider {
	return policytest.Func(func(in *policy.Input) policy.Decision {
		if in.Sandbox.ID == "sb-test" && in.Destination.Host == "pypi.org" {
			d := policytest.Allowed()
			d.MITM = true
			return d
		}
		return policytest.Denied(policytest.ReasonNotAllowed)
	})
}

// Interception: ALPN, missing SNI, client certificates, an upgrade to h2c,
// and a leaf minted for one sandbox that must not open the host to another.
func TestRedTeamMITM(t *testing.T) {
	pki := newTestPKI(t)
	cert := pki.leaf(t, "pypi.org")
	up := newHeaderUpstream(t)
	tlsUp := newUpstream(t, nil, &cert)
	h := newHarness(t, perSandbox(), names("pypi.org"), pki)
	h.allowUpstreams(up.upstream, tlsUp)
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.g.ServeSandbox(policy.Sandbox{ID: "sb-other"}, other, nil); err != nil {
		t.Fatal(err)
	}
	connect := func(t *testing.T, proxy string) (net.Conn, *bufio.Reader, int) {
		t.Helper()
		c, err := net.Dial("tcp", proxy)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "CONNECT pypi.org:%d HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", tlsUp.port, tlsUp.port)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c, br, resp.StatusCode
	}

	t.Run("ALPN h2: every stream goes through the pipeline", func(t *testing.T) {
		c, br, st := connect(t, h.explicit)
		defer c.Close()
		if st != 200 {
			t.Fatalf("connect: %d", st)
		}
		tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: "pypi.org", RootCAs: pki.mitmCAPool, NextProtos: []string{"h2"}})
		if err := tc.Handshake(); err != nil || tc.ConnectionState().NegotiatedProtocol != "h2" {
			t.Fatalf("handshake: %v, ALPN %q, want h2", err, tc.ConnectionState().NegotiatedProtocol)
		}
		var h2only http.Protocols
		h2only.SetHTTP2(true)
		tr := &http.Transport{Protocols: &h2only, DialTLSContext: func(context.Context, string, string) (net.Conn, error) { return tc, nil }}
		cc, err := tr.NewClientConn(context.Background(), "https", fmt.Sprintf("pypi.org:%d", tlsUp.port))
		if err != nil {
			t.Fatal(err)
		}
		before := tlsUp.reqs.Load()
		req, _ := http.NewRequest("GET", fmt.Sprintf("https://evil.example:%d/", tlsUp.port), nil)
		resp, err := cc.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Airlock-Reason") != ReasonHostMismatch || tlsUp.reqs.Load() != before {
			t.Fatalf("stream naming another host: got %d %q, upstream +%d; want 403 %s, 0", resp.StatusCode, resp.Header.Get("X-Airlock-Reason"), tlsUp.reqs.Load()-before, ReasonHostMismatch)
		}
	})
	t.Run("no SNI, client certificate: pinned to the CONNECT host", func(t *testing.T) {
		before := tlsUp.reqs.Load()
		c, br, st := connect(t, h.explicit)
		defer c.Close()
		if st != 200 {
			t.Fatalf("connect: %d", st)
		}
		cc := pki.leaf(t, "client.example")
		tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{cc}})
		if err := tc.Handshake(); err != nil {
			t.Fatalf("handshake without SNI: %v", err)
		}
		if got := tc.ConnectionState().PeerCertificates[0].DNSNames; fmt.Sprint(got) != "[pypi.org]" {
			t.Fatalf("leaf names: got %v, want [pypi.org]", got)
		}
		tbr := bufio.NewReader(tc)
		io.WriteString(tc, "GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n")
		resp, err := http.ReadResponse(tbr, nil)
		if err != nil || resp.StatusCode != 403 {
			t.Fatalf("inner request for another host: %v %v, want 403", resp, err)
		}
		if got := tlsUp.reqs.Load() - before; got != 0 {
			t.Fatalf("upstream requests: got %d, want 0", got)
		}
	})
	t.Run("leaf cached for sb-test does not open pypi.org to sb-other", func(t *testing.T) {
		c, _, st := connect(t, h.explicit) // mints and caches the leaf
		c.Close()
		if st != 200 {
			t.Fatalf("sb-test connect: %d", st)
		}
		beforeConns := tlsUp.conns.Load()
		c, _, st = connect(t, other.Addr().String())
		c.Close()
		if st != 403 {
			t.Fatalf("sb-other connect: got %d, want 403", st)
		}
		h.log.Wait(t, "sb-other deny", func(r audit.Record) bool {
			return r.Sandbox == "sb-other" && r.Kind == audit.KindConnect && r.Decision == audit.DecisionDeny
		})
		if got := tlsUp.conns.Load() - beforeConns; got != 0 {
			t.Fatalf("upstream connections from sb-other: got %d, want 0", got)
		}
	})
	t.Run("Upgrade h2c is never passed on", func(t *testing.T) {
		resp, _ := rawRequest(t, h.explicit, "GET http://pypi.org:"+strconv.Itoa(up.port)+"/ HTTP/1.1\r\nHost: pypi.org:"+strconv.Itoa(up.port)+
			"\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		hdr, _ := up.last()
		for _, k := range []string{"Upgrade", "Http2-Settings", "Connection"} {
			if v := hdr.Get(k); v != "" {
				t.Fatalf("upstream got %s: %q", k, v)
			}
		}
	})
}
