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
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy/policytest"
)

// reserveHarness is newHarness whose log holds room for records, as the audit
// writer does with overflow "deny"; refuse makes every Reserve fail (queue
// full).
func reserveHarness(t *testing.T, refuse bool, pki *testPKI) (*harness, *audittest.Log) {
	t.Helper()
	h := newHarness(t, policytest.Allow("pypi.org", "mitm.example").Intercept("mitm.example").DenyPaths("/denied"), names("pypi.org", "mitm.example"), pki)
	rl := &audittest.Log{}
	if refuse {
		rl.RefuseRoom(errors.New("audit: queue full (overflow deny)"))
	}
	g, err := New(h.g.cfg, h.dec, rl, &fakeResolver{names: names("pypi.org", "mitm.example")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	el, _ := net.Listen("tcp", "127.0.0.1:0")
	tl, _ := net.Listen("tcp", "127.0.0.1:0")
	if err := g.ServeSandbox(h.g.sandboxes["sb-test"].info, el, tl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.StopSandbox("sb-test") })
	h.g, h.explicit, h.transp, h.log = g, el.Addr().String(), tl.Addr().String(), rl
	return h, rl
}

// TestAuditReservedBeforeRequestLeaves: with a log that
// holds room for records (audit.overflow deny), a plain HTTP request leaves
// only once room for its record is reserved, and a tunnel's bytes flow only
// once room for its close record is: when the log refuses, the sandbox is
// answered with a refusal and the upstream sees nothing.
func TestAuditReservedBeforeRequestLeaves(t *testing.T) {
	pki := newTestPKI(t)
	cert := pki.leaf(t, "pypi.org")
	up := newUpstream(t, nil, nil)
	tlsUp := newUpstream(t, nil, &cert)
	h, rl := reserveHarness(t, true, pki)
	h.allowUpstreams(up, tlsUp)
	hp := "pypi.org:" + strconv.Itoa(up.port)
	get := "GET http://" + hp + "/simple/ HTTP/1.1\r\nHost: " + hp + "\r\n\r\n"
	t.Run("explicit HTTP", func(t *testing.T) {
		resp, body := rawRequest(t, h.explicit, get)
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Airlock-Reason") != ReasonAuditUnavailable {
			t.Fatalf("got %d %q, want 403 %s", resp.StatusCode, body, ReasonAuditUnavailable)
		}
	})
	t.Run("transparent HTTP", func(t *testing.T) {
		h.origDst.Store(netip.MustParseAddrPort(up.addr))
		resp, body := rawRequest(t, h.transp, "GET /simple/ HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Airlock-Reason") != ReasonAuditUnavailable {
			t.Fatalf("got %d %q, want 403 %s", resp.StatusCode, body, ReasonAuditUnavailable)
		}
	})
	t.Run("CONNECT tunnel", func(t *testing.T) {
		c, err := net.Dial("tcp", h.explicit)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "CONNECT pypi.org:%d HTTP/1.1\r\n\r\n", tlsUp.port)
		br := bufio.NewReader(c)
		if r, err := http.ReadResponse(br, nil); err != nil || r.StatusCode != 200 {
			t.Fatalf("connect: %v %v", r, err)
		}
		tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: "pypi.org", RootCAs: pki.upPool})
		if err := tc.Handshake(); err == nil {
			t.Fatal("TLS through a tunnel whose close record has no room: handshake succeeded")
		}
		h.log.Wait(t, "tunnel refused", func(r audit.Record) bool {
			return r.Kind == audit.KindConnect && r.Decision == audit.DecisionDeny && audittest.HasReason(r, ReasonAuditUnavailable)
		})
	})
	if got := up.reqs.Load(); got != 0 {
		t.Fatalf("upstream requests: got %d, want 0", got)
	}
	if got := tlsUp.bytesIn.Load(); got != 0 {
		t.Fatalf("tunnel upstream received %d bytes, want 0", got)
	}
	if res := rl.Reservations(); res.Refused < 3 || res.Taken != 0 {
		t.Fatalf("Reserve calls: %d refused, %d granted; want every one refused", res.Refused, res.Taken)
	}
}

// TestAuditReservationsWrittenOnce: with a log that grants room, every
// request, tunnel and inner request still gets exactly its records, the
// record of an allowed plain request and a tunnel's close record go through
// their reservations, and every reservation is used exactly once.
func TestAuditReservationsWrittenOnce(t *testing.T) {
	pki := newTestPKI(t)
	cert := pki.leaf(t, "pypi.org", "mitm.example")
	up := newUpstream(t, nil, nil)
	tlsUp := newUpstream(t, nil, &cert)
	h, rl := reserveHarness(t, false, pki)
	h.allowUpstreams(up, tlsUp)
	hp := "pypi.org:" + strconv.Itoa(up.port)
	for _, path := range []string{"/simple/", "/denied"} {
		rawRequest(t, h.explicit, "GET http://"+hp+path+" HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
	}
	h.origDst.Store(netip.MustParseAddrPort(up.addr))
	rawRequest(t, h.transp, "GET /simple/ HTTP/1.1\r\nHost: "+hp+"\r\nConnection: close\r\n\r\n")
	// A TLS tunnel, then an intercepted one carrying two requests.
	client := h.proxyClient(pki.upPool)
	resp, err := client.Get(fmt.Sprintf("https://pypi.org:%d/", tlsUp.port))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	client.CloseIdleConnections()
	tc, br := mitmConn(t, h, pki, "mitm.example", tlsUp.port)
	for i := 0; i < 2; i++ {
		fmt.Fprintf(tc, "GET /%d HTTP/1.1\r\nHost: mitm.example:%d\r\n\r\n", i, tlsUp.port)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("intercepted request %d: %v %v", i, resp, err)
		}
		io.Copy(io.Discard, resp.Body)
	}
	tc.Close()
	// 2 explicit + 1 transparent + connect and close + connect, 2 inner, close.
	recs := settledRecords(t, rl, 0, 9)
	seen := map[string]int{}
	for _, r := range recs {
		seen[r.ID+" "+r.Kind]++
	}
	if len(recs) != 9 {
		t.Fatalf("records: got %d, want 9: %+v", len(recs), recs)
	}
	for _, r := range recs {
		k := r.ID + " " + r.Kind
		if seen[k] != 1 {
			t.Fatalf("record %s written %d times", k, seen[k])
		}
		wantRes := r.Kind == audit.KindClose || r.Kind == audit.KindHTTP && r.Decision == audit.DecisionAllow
		if got := rl.Reserved(r.ID, r.Kind); got != wantRes {
			t.Fatalf("record %s (%s): through a reservation %v, want %v", k, r.Decision, got, wantRes)
		}
	}
	if res := rl.Reservations(); res.Reused != 0 || res.Logged+res.Cancelled != res.Taken {
		t.Fatalf("reservations: %d taken, %d logged, %d cancelled, %d used twice; want each used once", res.Taken, res.Logged, res.Cancelled, res.Reused)
	}
}
