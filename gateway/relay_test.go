package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/policy/policytest"
)

// TestRelayStreamsResponse: the gateway's own HTTP/1.1 loop (intercepted TLS,
// transparent HTTP) relays what the upstream sent so far while the upstream
// is still sending, chunked or with a Content-Length: the client reads the
// first part while the upstream holds the second back until the client has
// it (a relay that held bytes until its buffer filled, or until the body
// ended, would hang here), and the whole body arrives intact.
func TestRelayStreamsResponse(t *testing.T) {
	const part1, part2 = "first part of the stream\n", "second part, after the client saw the first\n"
	pki := newTestPKI(t)
	cert := pki.leaf(t, "pypi.org")
	dec := policytest.Allow("pypi.org").Intercept("pypi.org")
	h := newHarness(t, dec, map[string][]netip.Addr{"pypi.org": lo}, pki)
	for _, tc := range []struct {
		name    string
		tls     bool
		lengthd bool
	}{
		{"intercepted chunked", true, false},
		{"intercepted content-length", true, true},
		{"transparent chunked", false, false},
		{"transparent content-length", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.lengthd {
					w.Header().Set("Content-Length", strconv.Itoa(len(part1)+len(part2)))
				}
				io.WriteString(w, part1)
				w.(http.Flusher).Flush()
				select {
				case <-release:
				case <-time.After(10 * time.Second):
					return
				}
				io.WriteString(w, part2)
			})
			var up *upstream
			if tc.tls {
				up = newUpstream(t, handler, &cert)
			} else {
				up = newUpstream(t, handler, nil)
			}
			h.allowUpstreams(up)
			var body io.ReadCloser
			if tc.tls {
				resp, err := h.proxyClient(pki.mitmCAPool).Get(fmt.Sprintf("https://pypi.org:%d/stream", up.port))
				if err != nil {
					t.Fatal(err)
				}
				if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName == "fake internet CA" {
					t.Fatal("response was not intercepted")
				}
				body = resp.Body
			} else {
				h.origDst.Store(netip.MustParseAddrPort(up.addr))
				conn, err := net.Dial("tcp", h.transp)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				fmt.Fprintf(conn, "GET /stream HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", up.port)
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					t.Fatal(err)
				}
				body = resp.Body
			}
			defer body.Close()
			got := make([]byte, len(part1))
			done := make(chan error, 1)
			go func() { _, err := io.ReadFull(body, got); done <- err }()
			select {
			case err := <-done:
				if err != nil || string(got) != part1 {
					t.Fatalf("first part: got %q (%v), want %q", got, err, part1)
				}
			case <-time.After(10 * time.Second):
				close(release)
				t.Fatal("the first part did not reach the client while the upstream held the second")
			}
			close(release)
			rest, err := io.ReadAll(body)
			if err != nil || string(rest) != part2 {
				t.Fatalf("second part: got %q (%v), want %q", rest, err, part2)
			}
		})
	}
}
