package gateway

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
	"github.com/airlock-dev/airlock/test/poll"
	"github.com/airlock-dev/airlock/test/tcptest"
)

// Red-team battery against what a CONNECT tunnel carries. An allowed CONNECT
// to H is not an allowance of whatever bytes follow it: on a shared CDN, a
// tunnel to H that relays unchecked bytes reaches every site behind H's
// address. Each attack asserts what the client sees, exactly the audit
// records written, and that the upstream received zero bytes.

// rawUpstream is a loopback TCP server that counts connections and the bytes
// it received. With a banner it speaks first (a server-first protocol); then
// it echoes.
type rawUpstream struct {
	addr    string
	port    int
	conns   atomic.Int64
	bytesIn atomic.Int64
}

func newRawUpstream(t *testing.T, banner string) *rawUpstream {
	t.Helper()
	u := &rawUpstream{}
	l := tcptest.Listen(t, func(c net.Conn) {
		u.conns.Add(1)
		if banner != "" {
			io.WriteString(c, banner)
		}
		io.Copy(c, &countingConn{Conn: c, n: &u.bytesIn})
	})
	u.addr, u.port = l.Addr().String(), l.Addr().(*net.TCPAddr).Port
	return u
}

// tunnelPolicy allows CONNECT to pypi.org, raw.example and nosni.example;
// plain HTTP only to pypi.org; raw TCP only to raw.example; TLS without a
// server name only to nosni.example.
func tunnelPolicy() *policytest.Decider {
	return policytest.Func(func(in *policy.Input) policy.Decision {
		h := in.Destination.Host
		switch in.Kind {
		case policy.KindConnect:
			if h == "pypi.org" || h == "raw.example" || h == "nosni.example" {
				return policytest.Allowed()
			}
		case policy.KindHTTP:
			if h == "pypi.org" {
				return policytest.Allowed()
			}
		case policy.KindTCP:
			if h == "raw.example" && in.Destination.Protocol == "tcp" {
				return policytest.Allowed()
			}
		case policy.KindTLS:
			if h == "nosni.example" && in.TLS != nil && in.TLS.SNI == "" {
				return policytest.Allowed()
			}
		}
		return policytest.Denied(policytest.ReasonNotAllowed)
	})
}

// helloBytes is the ClientHello a crypto/tls client sends for sni (none when
// empty), kept small (one key share) so a byte-by-byte send stays short.
func helloBytes(t *testing.T, sni string) []byte {
	t.Helper()
	a, b := net.Pipe()
	go func() {
		c := tls.Client(a, &tls.Config{ServerName: sni, InsecureSkipVerify: true, CurvePreferences: []tls.CurveID{tls.X25519}})
		c.SetDeadline(time.Now().Add(2 * time.Second))
		c.Handshake()
		a.Close()
	}()
	buf := make([]byte, 16<<10)
	b.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, _ := b.Read(buf)
	b.Close()
	if n < 100 || buf[0] != 0x16 {
		t.Fatalf("captured %d bytes, not a ClientHello", n)
	}
	return buf[:n]
}

// recSummary is a record as the tables below spell it: kind, decision, reason
// ids and what a CONNECT carried.
func recSummary(r audit.Record) string {
	s := r.Kind
	if r.Decision != "" {
		s += " " + r.Decision
	}
	for _, x := range r.Reasons {
		s += " " + x.ID
	}
	if c, ok := r.Extra["carries"]; ok {
		s += " carries=" + strings.Trim(string(c), `"`)
	}
	if string(r.Extra["carried_decided"]) == "true" {
		s += " (decided)"
	}
	return s
}

// settledRecords waits until the log holds at least n+want records (or 5 s
// pass), lets a late one arrive, and returns the records after the first n.
func settledRecords(t *testing.T, l *audittest.Log, n, want int) []audit.Record {
	t.Helper()
	poll.Within(audittest.WaitLimit, func() bool { return len(l.Records()) >= n+want })
	time.Sleep(150 * time.Millisecond) // a record too many would have come by now
	return l.Records()[n:]
}

// readRest reads what the gateway sends until it closes (or 8 s pass).
func readRest(c net.Conn, br *bufio.Reader) string {
	c.SetReadDeadline(time.Now().Add(8 * time.Second))
	b, _ := io.ReadAll(br)
	return string(b)
}

// TestRedTeamConnectTunnelContent: domain fronting through CONNECT. A tunnel carries TLS whose complete ClientHello names the CONNECT
// host, plaintext HTTP whose every request names it, or opaque bytes only
// where policy allows raw TCP to that host and port.
func TestRedTeamConnectTunnelContent(t *testing.T) {
	pki := newTestPKI(t)
	cert := pki.leaf(t, "pypi.org", "evil.example", "nosni.example")
	tlsUp := newUpstream(t, nil, &cert)
	plainUp := newUpstream(t, nil, nil)
	echo := newRawUpstream(t, "")
	banner := newRawUpstream(t, "220 alk-banner\r\n")
	h := newHarness(t, tunnelPolicy(), names("pypi.org", "evil.example", "raw.example", "nosni.example"), pki, func(c *Config) {
		c.HandshakeTimeout = 3 * time.Second // PeekTimeout is 300 ms
	})
	h.allowUpstreams(tlsUp, plainUp)
	h.dialer.allow(echo.addr)
	h.dialer.allow(banner.addr)

	evilHello := helloBytes(t, "evil.example")
	type target struct {
		port    int
		bytesIn *atomic.Int64
		reqs    *atomic.Int64 // nil for raw servers
		conns   *atomic.Int64 // connections the upstream accepted
	}
	tlsT := target{tlsUp.port, &tlsUp.bytesIn, &tlsUp.reqs, &tlsUp.conns}
	plainT := target{plainUp.port, &plainUp.bytesIn, &plainUp.reqs, &plainUp.conns}
	echoT := target{echo.port, &echo.bytesIn, nil, &echo.conns}
	bannerT := target{banner.port, &banner.bytesIn, nil, &banner.conns}

	// Client actions: what the sandbox does after the 200; each returns what
	// it saw.
	plainGet := func(host string) func(*testing.T, net.Conn, *bufio.Reader) string {
		return func(t *testing.T, c net.Conn, br *bufio.Reader) string {
			fmt.Fprintf(c, "GET /p HTTP/1.1\r\nHost: %s\r\n\r\n", host)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				return "no response: " + err.Error()
			}
			io.Copy(io.Discard, resp.Body)
			return fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get("X-Airlock-Reason"))
		}
	}
	send := func(chunks ...any) func(*testing.T, net.Conn, *bufio.Reader) string {
		return func(t *testing.T, c net.Conn, br *bufio.Reader) string {
			c.(*net.TCPConn).SetNoDelay(true)
			for _, x := range chunks {
				switch v := x.(type) {
				case []byte:
					c.Write(v)
				case time.Duration:
					time.Sleep(v)
				}
			}
			got := readRest(c, br)
			if got == "" {
				return "closed"
			}
			return "got " + fmt.Sprintf("%q", got[:min(len(got), 40)])
		}
	}
	byteByByte := func(b []byte, pause time.Duration) []any {
		var out []any
		for i := range b {
			out = append(out, b[i:i+1], pause)
		}
		return out
	}
	tlsGet := func(sni string) func(*testing.T, net.Conn, *bufio.Reader) string {
		return func(t *testing.T, c net.Conn, br *bufio.Reader) string {
			cfg := &tls.Config{ServerName: sni, RootCAs: pki.upPool}
			if sni == "" {
				cfg.InsecureSkipVerify = true
			}
			tc := tls.Client(&bufConn{Conn: c, r: br}, cfg)
			tc.SetDeadline(time.Now().Add(5 * time.Second))
			if err := tc.Handshake(); err != nil {
				return "handshake failed"
			}
			io.WriteString(tc, "GET / HTTP/1.1\r\nHost: pypi.org\r\nConnection: close\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
			if err != nil {
				return "no response"
			}
			resp.Body.Close()
			return fmt.Sprint(resp.StatusCode)
		}
	}
	echoOK := func(t *testing.T, c net.Conn, br *bufio.Reader) string {
		io.WriteString(c, "\x00\x01ping")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 6)
		if _, err := io.ReadFull(br, buf); err != nil {
			return "no echo"
		}
		return fmt.Sprintf("echo %q", buf)
	}
	silent := func(t *testing.T, c net.Conn, br *bufio.Reader) string {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := br.ReadString('\n')
		if err != nil {
			if line == "" {
				return "closed"
			}
			return "partial " + line
		}
		return "got " + strings.TrimSpace(line)
	}

	tests := []struct {
		name    string
		host    string
		to      target
		client  func(*testing.T, net.Conn, *bufio.Reader) string
		want    string
		records []string
		upBytes bool  // the upstream must receive bytes (allowed cases)
		upReqs  int64 // requests the upstream must see (HTTP upstreams)
	}{
		// Fronting attacks.
		{"plaintext HTTP naming another host inside CONNECT to an HTTP port", "pypi.org", plainT,
			plainGet("evil.example"), "403 host_mismatch",
			[]string{"connect allow carries=http", "http deny host_mismatch", "close"}, false, 0},
		{"plaintext HTTP naming another host inside CONNECT to a TLS port", "pypi.org", tlsT,
			plainGet("evil.example"), "403 host_mismatch",
			[]string{"connect allow carries=http", "http deny host_mismatch", "close"}, false, 0},
		{"absolute URL naming another host inside CONNECT", "pypi.org", plainT,
			func(t *testing.T, c net.Conn, br *bufio.Reader) string {
				return plainGet("pypi.org")(t, &absConn{Conn: c, host: "evil.example"}, br)
			}, "403 host_mismatch",
			[]string{"connect allow carries=http", "http deny host_mismatch", "close"}, false, 0},
		{"ClientHello for another name split past the peek window", "pypi.org", tlsT,
			send(evilHello[:7], 600*time.Millisecond, evilHello[7:]), "closed",
			[]string{"connect deny host_mismatch carries=tls"}, false, 0},
		{"ClientHello for another name byte by byte", "pypi.org", tlsT,
			send(byteByByte(evilHello, 2*time.Millisecond)...), "closed",
			[]string{"connect deny host_mismatch carries=tls"}, false, 0},
		{"partial ClientHello, then silence", "pypi.org", tlsT,
			send(evilHello[:40]), "closed",
			[]string{"connect deny bad_request carries=tls"}, false, 0},
		{"ClientHello without a server name, not allowed", "pypi.org", tlsT,
			send(helloBytes(t, "")), "closed",
			[]string{"connect deny not_allowed carries=tls (decided)"}, false, 0},
		{"opaque bytes where raw TCP is not allowed", "pypi.org", echoT,
			send([]byte("\x00\x01binary")), "closed",
			[]string{"connect deny not_allowed carries=tcp (decided)"}, false, 0},
		{"server-first protocol where raw TCP is not allowed", "pypi.org", bannerT,
			silent, "closed",
			[]string{"connect deny not_allowed carries=tcp (decided)"}, false, 0},
		// What must keep working.
		{"TLS naming the CONNECT host (curl)", "pypi.org", tlsT,
			tlsGet("pypi.org"), "200",
			[]string{"connect allow carries=tls", "close"}, true, 1},
		{"plaintext HTTP naming the CONNECT host", "pypi.org", plainT,
			plainGet(fmt.Sprintf("pypi.org:%d", plainUp.port)), "200 ",
			[]string{"connect allow carries=http", "http allow", "close"}, true, 1},
		{"raw TCP where policy allows kind tcp", "raw.example", echoT,
			echoOK, `echo "\x00\x01ping"`,
			[]string{"connect allow carries=tcp (decided)", "close"}, true, 0},
		{"server-first protocol where policy allows kind tcp", "raw.example", bannerT,
			silent, "got 220 alk-banner",
			[]string{"connect allow carries=tcp (decided)", "close"}, false, 0},
		{"ClientHello without a server name where policy allows it", "nosni.example", tlsT,
			tlsGet(""), "200",
			[]string{"connect allow carries=tls (decided)", "close"}, true, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := len(h.log.Records())
			bytesBefore := tc.to.bytesIn.Load()
			connsBefore := tc.to.conns.Load()
			var reqsBefore int64
			if tc.to.reqs != nil {
				reqsBefore = tc.to.reqs.Load()
			}
			c, err := net.Dial("tcp", h.explicit)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n", tc.host, tc.to.port, tc.host, tc.to.port)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("CONNECT: %v %v, want 200", resp, err)
			}
			if got := tc.client(t, c, br); got != tc.want {
				t.Fatalf("client saw %q, want %q", got, tc.want)
			}
			c.Close()
			recs := settledRecords(t, h.log, n, len(tc.records))
			var got []string
			for _, r := range recs {
				got = append(got, recSummary(r))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.records) {
				t.Fatalf("audit records: got %q, want %q", got, tc.records)
			}
			gotBytes := tc.to.bytesIn.Load() - bytesBefore
			if !tc.upBytes && gotBytes != 0 {
				t.Fatalf("upstream received %d bytes, want 0", gotBytes)
			}
			if tc.upBytes && gotBytes == 0 {
				t.Fatal("upstream received nothing (the allowed case proves nothing)")
			}
			// Decide before dialing: a tunnel refused on what it carries
			// never opened a connection upstream (it used to be dialed when
			// the CONNECT was allowed, before its content was seen).
			gotConns := tc.to.conns.Load() - connsBefore
			if refused := !strings.HasPrefix(tc.want, "200") && !strings.HasPrefix(tc.want, "echo") && !strings.HasPrefix(tc.want, "got 220"); refused && gotConns != 0 {
				t.Fatalf("upstream accepted %d connections, want 0", gotConns)
			}
			if tc.upBytes && gotConns == 0 {
				t.Fatal("upstream accepted no connection (the allowed case proves nothing)")
			}
			if tc.to.reqs != nil {
				if got := tc.to.reqs.Load() - reqsBefore; got != tc.upReqs {
					t.Fatalf("upstream requests: got %d, want %d", got, tc.upReqs)
				}
			}
		})
	}
	if got := h.dialer.refusedAddrs(); len(got) != 0 {
		t.Fatalf("dialer refused %v", got)
	}
}

// TestConnectHTTPKeepsHostPinned: several plaintext requests on one tunnel,
// each decided as kind http; the one that names another host is refused and
// ends the tunnel, and the upstream saw only the requests that named the
// CONNECT host.
func TestConnectHTTPKeepsHostPinned(t *testing.T) {
	up := newUpstream(t, nil, nil)
	h := newHarness(t, tunnelPolicy(), names("pypi.org", "evil.example"), nil)
	h.allowUpstreams(up)
	c, err := net.Dial("tcp", h.explicit)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT pypi.org:%d HTTP/1.1\r\n\r\n", up.port)
	br := bufio.NewReader(c)
	if r, err := http.ReadResponse(br, nil); err != nil || r.StatusCode != 200 {
		t.Fatalf("connect: %v %v", r, err)
	}
	for i, host := range []string{"pypi.org", "PyPI.org.", "evil.example"} {
		fmt.Fprintf(c, "GET /%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n", i, host, up.port)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		if want := []int{200, 200, 403}[i]; resp.StatusCode != want {
			t.Fatalf("request %d (Host %s): got %d, want %d", i, host, resp.StatusCode, want)
		}
	}
	if got := up.reqs.Load(); got != 2 {
		t.Fatalf("upstream requests: got %d, want 2", got)
	}
	if got := up.conns.Load(); got != 1 {
		t.Fatalf("upstream connections: got %d, want 1 (the CONNECT's own)", got)
	}
	var kinds []string
	for _, r := range settledRecords(t, h.log, 0, 5) {
		kinds = append(kinds, recSummary(r))
	}
	want := []string{"connect allow carries=http", "http allow", "http allow", "http deny host_mismatch", "close"}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Fatalf("audit records: got %q, want %q", kinds, want)
	}
}

// TestStatusReasonPhraseRelay (gateway side; a guard): every relay (the
// explicit proxy, transparent and intercepted connections) writes resp.Status,
// the field secrets.ScrubResponse rewrites, and builds the status line from
// nothing else.
func TestStatusReasonPhraseRelay(t *testing.T) {
	l := tcptest.Listen(t, func(c net.Conn) {
		http.ReadRequest(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 200 Reflected-alk-token\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
	})
	addr := l.Addr().String()
	port := l.Addr().(*net.TCPAddr).Port
	h := newHarness(t, policytest.Allow("pypi.org"), names("pypi.org"), nil)
	h.dialer.allow(addr)
	h.origDst.Store(netip.MustParseAddrPort(addr))
	statusLine := func(listen, target string) string {
		c, err := net.Dial("tcp", listen)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET %s/ HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", target, port)
		line, _ := bufio.NewReader(c).ReadString('\n')
		return strings.TrimSpace(line)
	}
	if got := statusLine(h.explicit, fmt.Sprintf("http://pypi.org:%d", port)); got != "HTTP/1.1 200 Reflected-alk-token" {
		t.Fatalf("explicit proxy status line: got %q, want resp.Status as read", got)
	}
	if got := statusLine(h.transp, ""); got != "HTTP/1.1 200 Reflected-alk-token" {
		t.Fatalf("transparent status line: got %q, want resp.Status as read", got)
	}
}

// TestReportModeCarriedKeepsConnectDenial: in report mode a CONNECT the
// policy would refuse goes through, and when what it carries is decided a
// second time (opaque bytes, allowed as kind tcp) the record still says deny
// with the CONNECT's reason: the second decision used to replace the first,
// so the log called a would-be-refused tunnel allowed and a policy learned
// from it left the CONNECT closed.
func TestReportModeCarriedKeepsConnectDenial(t *testing.T) {
	echo := newRawUpstream(t, "")
	dec := policytest.Func(func(in *policy.Input) policy.Decision {
		d := policy.Decision{Mode: policy.ModeReport, Rev: policytest.Rev}
		if in.Kind == policy.KindTCP {
			d.Allowed = true
		} else {
			d.Reasons = []policy.Reason{{ID: "default_deny", Msg: "no rule allows " + string(in.Kind)}}
		}
		return d
	})
	h := newHarness(t, dec, names("raw.example"), newTestPKI(t))
	h.dialer.allow(echo.addr)
	n := len(h.log.Records())
	c, err := net.Dial("tcp", h.explicit)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT raw.example:%d HTTP/1.1\r\nHost: raw.example:%d\r\n\r\n", echo.port, echo.port)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v, want 200 (report mode)", resp, err)
	}
	io.WriteString(c, "\x00\x01ping")
	buf := make([]byte, 6)
	if _, err := io.ReadFull(br, buf); err != nil {
		t.Fatalf("no echo through the report-mode tunnel: %v", err)
	}
	c.Close()
	recs := settledRecords(t, h.log, n, 2)
	var got []string
	for _, r := range recs {
		got = append(got, recSummary(r))
	}
	if want := []string{"connect deny default_deny carries=tcp (decided)", "close"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("audit records: got %q, want %q", got, want)
	}
}
