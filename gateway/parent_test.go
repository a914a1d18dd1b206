package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
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
	"github.com/airlock-dev/airlock/policy/policytest"
	"github.com/airlock-dev/airlock/test/poll"
	"github.com/airlock-dev/airlock/test/proxytest"
)

// testParent is a counting CONNECT proxy on loopback (test/proxytest) that
// forwards a target only to the loopback address routes names for it
// (anything else is answered 502, never dialed).
type testParent struct {
	*proxytest.Parent
	ln   net.Listener // closed to kill the parent
	addr string
	port int
}

func newTestParent(t *testing.T, routes map[string]string) *testParent {
	t.Helper()
	// 127.0.0.2: not the test origins' address, so that refusing the
	// parent's address as an origin does not refuse them.
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &testParent{ln: ln, addr: ln.Addr().String()}
	p.port = int(netip.MustParseAddrPort(p.addr).Port())
	p.Parent = proxytest.Serve(t, ln, func(target string) (net.Conn, error) {
		to, ok := routes[target]
		if !ok {
			return nil, fmt.Errorf("no route for %s", target)
		}
		return net.DialTimeout("tcp", to, 5*time.Second)
	})
	return p
}

// The parent's credential in these tests: a sentinel that must appear in
// no record and no log line, in either form.
const (
	parentSecret = "s3cret-parent-pw"
	parentCred   = "Basic YWxpY2U6czNjcmV0LXBhcmVudC1wdw==" // alice:s3cret-parent-pw
)

// parentHarness is a gateway whose upstream is p. Its guard allows only the
// fake internet's 198.18.0.0/15, not loopback: the parent (on loopback) is
// reachable only as the parent.
func parentHarness(t *testing.T, p *testParent, dec *policytest.Decider, names map[string][]netip.Addr, logs *lockedBuffer, pki *testPKI, opts ...harnessOpt) *harness {
	t.Helper()
	var logger *slog.Logger
	if logs != nil {
		logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	all := append([]harnessOpt{func(c *Config) {
		c.AllowCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}
		c.ParentProxy = "http://" + p.addr
		c.ParentAuth = func(context.Context) (string, error) { return parentCred, nil }
	}}, opts...)
	h := newHarnessLogger(t, dec, names, pki, logger, all...)
	h.dialer.allow(p.addr)
	return h
}

// lockedBuffer collects the gateway's log lines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(b)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// noCredential fails if the parent's credential appears in any audit record
// or log line.
func noCredential(t *testing.T, h *harness, logs *lockedBuffer) {
	t.Helper()
	for _, r := range h.log.Records() {
		b, _ := json.Marshal(r)
		if bytes.Contains(b, []byte(parentSecret)) || bytes.Contains(b, []byte("YWxpY2U6")) {
			t.Fatalf("audit record carries the parent's credential: %s", b)
		}
	}
	if logs == nil {
		return
	}
	if out := logs.String(); out == "" || strings.Contains(out, parentSecret) || strings.Contains(out, "YWxpY2U6") {
		t.Fatalf("log is empty or carries the parent's credential: %s", out)
	}
}

// TestParentProxyCarriesEveryKind: with a parent configured, plain HTTP
// (explicit and transparent), a CONNECT tunnel, an intercepted HTTPS request,
// transparent TLS and transparent raw TCP reach their origin only through
// the parent, as CONNECT by name with the credential; the gateway dials the
// parent and nothing else; the audit names the parent, never the credential.
func TestParentProxyCarriesEveryKind(t *testing.T) {
	pki := newTestPKI(t)
	plain := newUpstream(t, nil, nil)
	cert := pki.leaf(t, "tun.example", "api.example")
	secure := newUpstream(t, nil, &cert)
	raw := tcpEcho(t)
	p := newTestParent(t, map[string]string{
		"plain.example:80": plain.addr, "plain2.example:80": plain.addr, "tun.example:443": secure.addr,
		"api.example:443": secure.addr, "198.18.0.10:7000": raw,
	})
	var logs lockedBuffer
	dec := policytest.Allow("plain.example", "plain2.example", "tun.example", "api.example", "198.18.0.10").Intercept("api.example")
	h := parentHarness(t, p, dec, nil, &logs, pki)

	// Explicit plain HTTP.
	resp, body := rawRequest(t, h.explicit, "GET http://plain.example/x HTTP/1.1\r\nHost: plain.example\r\nProxy-Authorization: Basic c2FuZGJveA==\r\n\r\n")
	if resp.StatusCode != 200 || body != "hello plain.example /x" {
		t.Fatalf("explicit http: got %d %q", resp.StatusCode, body)
	}
	// CONNECT tunnel (TLS passthrough, verified against the origin's CA).
	c := h.proxyClient(pki.upPool)
	if got := getBody(t, c, "https://tun.example/t"); got != "hello tun.example /t" {
		t.Fatalf("tunnel: got %q", got)
	}
	// Intercepted HTTPS.
	c = h.proxyClient(pki.mitmCAPool)
	if got := getBody(t, c, "https://api.example/i"); got != "hello api.example /i" {
		t.Fatalf("intercepted: got %q", got)
	}
	// Transparent plain HTTP, TLS and raw TCP.
	h.origDst.Store(netip.MustParseAddrPort("198.18.0.11:80"))
	resp, body = rawRequest(t, h.transp, "GET /p HTTP/1.1\r\nHost: plain2.example\r\n\r\n")
	if resp.StatusCode != 200 || body != "hello plain2.example /p" {
		t.Fatalf("transparent http: got %d %q", resp.StatusCode, body)
	}
	h.origDst.Store(netip.MustParseAddrPort("198.18.0.12:443"))
	tc, err := tls.Dial("tcp", h.transp, &tls.Config{ServerName: "tun.example", RootCAs: pki.upPool})
	if err != nil {
		t.Fatalf("transparent tls: %v", err)
	}
	io.WriteString(tc, "GET /s HTTP/1.1\r\nHost: tun.example\r\nConnection: close\r\n\r\n")
	r2, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil || r2.StatusCode != 200 {
		t.Fatalf("transparent tls: got %v %v", r2, err)
	}
	tc.Close()
	h.origDst.Store(netip.MustParseAddrPort("198.18.0.10:7000"))
	if got := echoOnce(t, h.transp, "ping"); got != "ping" {
		t.Fatalf("transparent tcp: got %q", got)
	}

	// Every connection's last record is written before the checks below.
	h.log.Wait(t, "tcp close", func(r audit.Record) bool { return r.Kind == audit.KindClose && r.Host == "198.18.0.10" })
	targets, auths := p.Seen()
	want := []string{"CONNECT plain.example:80", "CONNECT tun.example:443", "CONNECT api.example:443",
		"CONNECT plain2.example:80", "CONNECT tun.example:443", "CONNECT 198.18.0.10:7000"}
	if strings.Join(targets, ",") != strings.Join(want, ",") {
		t.Fatalf("parent saw %v, want %v", targets, want)
	}
	for i, a := range auths {
		if a != parentCred {
			t.Fatalf("CONNECT %d carried Proxy-Authorization %q, want the configured credential", i, a)
		}
	}
	for _, d := range h.dialer.dialedAddrs() {
		if d != p.addr {
			t.Fatalf("gateway dialed %s; want only the parent %s", d, p.addr)
		}
	}
	if n := len(h.dialer.refusedAddrs()); n != 0 {
		t.Fatalf("gateway tried %d other addresses: %v", n, h.dialer.refusedAddrs())
	}
	recs := h.log.Match(func(r audit.Record) bool { return r.Kind != audit.KindClose && r.Decision == audit.DecisionAllow })
	if len(recs) == 0 {
		t.Fatal("no allow records")
	}
	for _, r := range recs {
		if r.Kind == "connect" && r.Host == "api.example" {
			continue // the intercepted CONNECT dials nothing itself; its requests do
		}
		if got := string(r.Extra["parent_proxy"]); got != strconv.Quote(p.addr) {
			t.Fatalf("record %s %s: parent_proxy %s, want %q", r.Kind, r.Host, got, p.addr)
		}
	}
	noCredential(t, h, &logs)
}

// TestParentProxyDenied: what policy or the guard refuses never reaches the
// parent (zero connections, zero CONNECTs), and the parent itself, by its
// address or its name, is refused as an origin even where policy and
// allow_cidrs would let it through.
func TestParentProxyDenied(t *testing.T) {
	up := newUpstream(t, nil, nil)
	p := newTestParent(t, map[string]string{})
	pp := strconv.Itoa(p.port)
	dec := policytest.Allow("proxy.corp", "127.0.0.2", "10.1.2.3", "nothere.example")
	parentIP := []netip.Addr{netip.MustParseAddr("127.0.0.2")}
	h := parentHarness(t, p, dec, map[string][]netip.Addr{"proxy.corp": parentIP, "nothere.example": parentIP}, nil, nil, func(c *Config) {
		c.ParentProxy = "http://proxy.corp:" + pp
		c.AllowCIDRs = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		c.ParentNoProxy = []string{"nothere.example"}
	})
	// proxy.corp is the parent's name (the fake resolver answers it), and
	// nothere.example, dialed directly, resolves to the parent's address.
	h.allowUpstreams(up)
	tests := []struct {
		name string
		raw  string
		want int
	}{
		{"denied by policy, plain", "GET http://evil.example/ HTTP/1.1\r\nHost: evil.example\r\n\r\n", 403},
		{"denied by policy, connect", "CONNECT evil.example:443 HTTP/1.1\r\n\r\n", 403},
		{"private literal refused by the guard", "CONNECT 10.1.2.3:443 HTTP/1.1\r\n\r\n", 403},
		{"the parent's address as origin", "CONNECT 127.0.0.2:" + pp + " HTTP/1.1\r\n\r\n", 403},
		{"the parent's address as origin, plain", "GET http://127.0.0.2:" + pp + "/ HTTP/1.1\r\nHost: 127.0.0.2:" + pp + "\r\n\r\n", 403},
		{"the parent's name as origin", "CONNECT proxy.corp:" + pp + " HTTP/1.1\r\n\r\n", 403},
		{"a no_proxy name resolving to the parent", "GET http://nothere.example:" + pp + "/ HTTP/1.1\r\nHost: nothere.example:" + pp + "\r\n\r\n", 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := rawRequest(t, h.explicit, tt.raw)
			if resp.StatusCode != tt.want {
				t.Fatalf("got %d %q, want %d", resp.StatusCode, body, tt.want)
			}
			id := resp.Header.Get("X-Airlock-Decision")
			if r := h.log.Wait(t, tt.name, func(r audit.Record) bool { return r.ID == id }); r.Decision != audit.DecisionDeny {
				t.Fatalf("record: got %+v, want a deny", r)
			}
		})
	}
	h.origDst.Store(netip.MustParseAddrPort("127.0.0.2:" + pp))
	c, err := net.Dial("tcp", h.transp)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "raw bytes to the parent\n")
	if n, _ := c.Read(make([]byte, 1)); n != 0 {
		t.Fatal("transparent tcp to the parent's address: got bytes back")
	}
	c.Close()
	h.log.Wait(t, "transparent deny", func(r audit.Record) bool { return r.Kind == "tcp" && r.Decision == audit.DecisionDeny })
	if n := p.Conns.Load(); n != 0 {
		t.Fatalf("parent saw %d connections, want 0", n)
	}
	if got, _ := p.Seen(); len(got) != 0 {
		t.Fatalf("parent saw %v, want nothing", got)
	}
	if got := h.dialer.dialedAddrs(); len(got) != 0 {
		t.Fatalf("gateway dialed %v, want nothing", got)
	}
	if up.conns.Load() != 0 {
		t.Fatalf("upstream saw %d connections", up.conns.Load())
	}
}

// TestParentProxyNoProxyDirect: a no_proxy origin is dialed directly with
// the usual resolve and guard; the parent sees nothing.
func TestParentProxyNoProxyDirect(t *testing.T) {
	up := newUpstream(t, nil, nil)
	p := newTestParent(t, map[string]string{})
	h := parentHarness(t, p, policytest.Allow("direct.corp"), names("direct.corp"), nil, nil, func(c *Config) {
		c.AllowCIDRs = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		c.ParentNoProxy = []string{"*.corp"}
	})
	h.allowUpstreams(up)
	port := strconv.Itoa(up.port)
	resp, body := rawRequest(t, h.explicit, "GET http://direct.corp:"+port+"/ HTTP/1.1\r\nHost: direct.corp:"+port+"\r\n\r\n")
	if resp.StatusCode != 200 || up.reqs.Load() != 1 {
		t.Fatalf("got %d %q, upstream requests %d", resp.StatusCode, body, up.reqs.Load())
	}
	if p.Conns.Load() != 0 {
		t.Fatalf("parent saw %d connections, want 0", p.Conns.Load())
	}
	if got := h.dialer.dialedAddrs(); len(got) != 1 || got[0] != up.addr {
		t.Fatalf("dialed %v, want only %s", got, up.addr)
	}
}

// TestParentProxyFailsClosed: a dead parent and a refusing parent (407, 403,
// 502) give the sandbox a 502 naming the reason, an audit record with the
// parent's status, and no direct dial.
func TestParentProxyFailsClosed(t *testing.T) {
	up := newUpstream(t, nil, nil)
	p := newTestParent(t, map[string]string{"plain.example:80": up.addr})
	var logs lockedBuffer
	h := parentHarness(t, p, policytest.Allow("plain.example"), names("plain.example"), &logs, nil)
	h.allowUpstreams(up) // a fallback to direct would reach it
	tests := []struct {
		name   string
		status int
		reason string
	}{
		{"407", 407, ReasonParentRefused},
		{"403", 403, ReasonParentRefused},
		{"502", 502, ReasonParentRefused},
		{"dead", -1, ReasonParentUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.status < 0 {
				p.ln.Close()
			}
			p.Status.Store(int64(tt.status))
			for _, connect := range []bool{false, true} {
				var r audit.Record
				if connect {
					r = parentConnectFailure(t, h, tt.reason)
				} else {
					resp, body := rawRequest(t, h.explicit, "GET http://plain.example/ HTTP/1.1\r\nHost: plain.example\r\n\r\n")
					if resp.StatusCode != 502 || resp.Header.Get("X-Airlock-Reason") != tt.reason {
						t.Fatalf("got %d %s %q, want 502 %s", resp.StatusCode, resp.Header.Get("X-Airlock-Reason"), body, tt.reason)
					}
					id := resp.Header.Get("X-Airlock-Decision")
					r = h.log.Wait(t, tt.name, func(r audit.Record) bool { return r.ID == id })
				}
				if got := string(r.Extra["parent_proxy"]); got != strconv.Quote(p.addr) {
					t.Fatalf("record parent_proxy %s, want %q", got, p.addr)
				}
				if tt.status > 0 {
					if got := string(r.Extra["parent_status"]); got != strconv.Itoa(tt.status) {
						t.Fatalf("record parent_status %s, want %d (%+v)", got, tt.status, r)
					}
				}
			}
		})
	}
	if up.conns.Load() != 0 {
		t.Fatalf("origin saw %d connections: a fallback to direct", up.conns.Load())
	}
	for _, d := range h.dialer.dialedAddrs() {
		if d != p.addr {
			t.Fatalf("gateway dialed %s besides the parent", d)
		}
	}
	noCredential(t, h, &logs)
}

// parentConnectFailure sends a CONNECT and a first request inside it through
// a failing parent. The parent is asked only once what the tunnel carries is
// decided (nothing is dialed before the decision that can refuse it), so the
// CONNECT is answered 200 and the tunnel closes when the parent fails; the
// decision record carries the failure. It returns that record.
func parentConnectFailure(t *testing.T, h *harness, reason string) audit.Record {
	t.Helper()
	n := len(h.log.Records())
	c, err := net.Dial("tcp", h.explicit)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "CONNECT plain.example:80 HTTP/1.1\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v, want 200", resp, err)
	}
	io.WriteString(c, "\x00\x01raw")
	if rest, _ := io.ReadAll(br); len(rest) != 0 {
		t.Fatalf("got %q after the 200, want the tunnel closed", rest)
	}
	var found *audit.Record
	poll.Within(audittest.WaitLimit, func() bool {
		for _, r := range h.log.Records()[n:] {
			if r.Kind == "connect" && strings.Contains(r.Error, "parent") {
				found = &r
				return true
			}
		}
		return false
	})
	if found == nil {
		t.Fatalf("no connect record with the parent's failure (%s): %+v", reason, h.log.Records()[n:])
	}
	return *found
}

// TestParentProxyConfig: bad parent settings are refused by New with an
// error that names the setting.
func TestParentProxyConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"credentials in the URL", Config{ParentProxy: "http://alice:pw@127.0.0.1:3128"}, "secrets file"},
		{"scheme", Config{ParentProxy: "socks5://127.0.0.1:1080"}, "scheme must be http or https"},
		{"path", Config{ParentProxy: "http://127.0.0.1:3128/x"}, "host[:port] only"},
		{"no_proxy entry", Config{ParentProxy: "http://127.0.0.1:3128", ParentNoProxy: []string{"a b"}}, "parent_no_proxy[0]"},
		{"no_proxy without proxy", Config{ParentNoProxy: []string{"x.example"}}, "need parent_proxy"},
		{"unresolvable name", Config{ParentProxy: "http://proxy.nowhere:3128"}, "resolve proxy.nowhere"},
		{"unspecified address", Config{ParentProxy: "http://0.0.0.0:3128"}, "not an address"},
		{"the gateway's own address", Config{ParentProxy: "http://10.9.9.9:3128", OwnAddrs: []netip.Addr{netip.MustParseAddr("10.9.9.9")}}, "gateway_own"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg, policytest.Allow(), &noopLog{}, &fakeResolver{}, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

type noopLog struct{}

func (noopLog) Log(*audit.Record) error { return nil }

func getBody(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: got %d %q", u, resp.StatusCode, b)
	}
	return string(b)
}

// tcpEcho is a loopback TCP server that echoes what it reads.
func tcpEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// echoOnce sends s on a new connection to addr and reads as many bytes back.
func echoOnce(t *testing.T, addr, s string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, s)
	b := make([]byte, len(s))
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("echo: %v", err)
	}
	return string(b)
}
