package gateway

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
)

// TestPassthroughNotInterceptedWithPlaceholders: a host the policy marks
// passthrough is tunneled end to end even for a sandbox that holds secret
// placeholders (which otherwise has every TLS tunnel intercepted): the client
// completes its handshake with the origin's own certificate, and a
// placeholder it sends arrives as the worthless placeholder, never the
// secret. A host that is not passthrough is still intercepted for the same
// sandbox, and a passthrough decision for a denied host opens nothing.
func TestPassthroughNotInterceptedWithPlaceholders(t *testing.T) {
	st := newPHSetup(t)
	h := st.h
	dec := h.dec.(*policytest.Decider)
	dec.Amend(func(in *policy.Input, d *policy.Decision) {
		if (in.Kind == policy.KindConnect || in.Kind == policy.KindTLS) && in.Destination.Host == "bound.example" {
			d.Passthrough = true
		}
	})
	port := st.other.Port
	// originConn opens a TLS connection to host through CONNECT on sb-test's
	// explicit listener, trusting only the origin's CA.
	originConn := func(t *testing.T, host string) (*tls.Conn, error) {
		c, err := net.Dial("tcp", h.explicit)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "CONNECT %s:%d HTTP/1.1\r\n\r\n", host, port)
		br := bufio.NewReader(c)
		if r, err := http.ReadResponse(br, nil); err != nil || r.StatusCode != 200 {
			t.Fatalf("connect %s: %v %v", host, r, err)
		}
		tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: host, RootCAs: st.roots})
		return tc, tc.Handshake()
	}

	t.Run("passthrough host: the origin's certificate, the placeholder leaves as is", func(t *testing.T) {
		before, carrying := st.other.Received.Load(), st.other.Carrying.Load()
		tc, err := originConn(t, "bound.example")
		if err != nil {
			t.Fatalf("handshake with the origin's CA only: %v (intercepted?)", err)
		}
		if iss := tc.ConnectionState().PeerCertificates[0].Issuer.CommonName; iss != st.pki.upCA.Subject.CommonName {
			t.Fatalf("got a certificate issued by %q, want the origin's (%q)", iss, st.pki.upCA.Subject.CommonName)
		}
		io.WriteString(tc, "GET /echo HTTP/1.1\r\nHost: bound.example\r\nX-Api-Key: "+st.ph+"\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("got %v %v, want 200 from the origin", resp, err)
		}
		io.ReadAll(resp.Body)
		if got := st.other.Received.Load() - before; got != 1 {
			t.Fatalf("origin requests: got %d, want 1", got)
		}
		if got := st.other.Carrying.Load() - carrying; got != 0 {
			t.Fatalf("the secret reached a passthrough host %d times, want 0", got)
		}
		if got := st.other.Last().Header.Get("X-Api-Key"); got != st.ph {
			t.Fatalf("origin got X-Api-Key %q, want the placeholder %q", got, st.ph)
		}
		rec := h.log.Wait(t, "connect bound.example", func(r audit.Record) bool {
			return r.Kind == audit.KindConnect && r.Host == "bound.example"
		})
		if rec.Decision != audit.DecisionAllow {
			t.Fatalf("audit: got %+v, want an allowed connect", rec)
		}
		if n := len(h.log.Match(func(r audit.Record) bool { return r.Kind == audit.KindHTTP && r.Host == "bound.example" })); n != 0 {
			t.Fatalf("got %d http records for bound.example, want 0 (nothing inside the tunnel is seen)", n)
		}
	})

	t.Run("transparent TLS to the passthrough host: the origin's certificate", func(t *testing.T) {
		h.origDst.Store(netip.MustParseAddrPort(st.other.Addr))
		c, err := tls.Dial("tcp", h.transp, &tls.Config{ServerName: "bound.example", RootCAs: st.roots})
		if err != nil {
			t.Fatalf("transparent handshake with the origin's CA only: %v (intercepted?)", err)
		}
		defer c.Close()
		if iss := c.ConnectionState().PeerCertificates[0].Issuer.CommonName; iss != st.pki.upCA.Subject.CommonName {
			t.Fatalf("got a certificate issued by %q, want the origin's", iss)
		}
	})

	t.Run("a host that is not passthrough is still intercepted", func(t *testing.T) {
		_, err := originConn(t, "other.example")
		if err == nil {
			t.Fatal("handshake with the origin's CA succeeded: other.example was not intercepted for a placeholder sandbox")
		}
		conn, _ := mitmConn(t, h, st.pki, "other.example", port) // airlock's CA: intercepted
		conn.Close()
	})

	t.Run("passthrough does not open a denied host", func(t *testing.T) {
		dec.Amend(func(in *policy.Input, d *policy.Decision) { d.Passthrough = true })
		before := st.other.Received.Load()
		dialed := len(h.dialer.dialedAddrs())
		resp, _ := rawRequest(t, h.explicit, "CONNECT evil.example:"+strconv.Itoa(port)+" HTTP/1.1\r\n\r\n")
		if resp.StatusCode != 403 {
			t.Fatalf("got %d, want 403", resp.StatusCode)
		}
		if got := len(h.dialer.dialedAddrs()) - dialed; got != 0 || st.other.Received.Load() != before {
			t.Fatalf("a denied passthrough host was dialed %d times", got)
		}
	})
}
