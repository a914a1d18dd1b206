package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy/policytest"
)

// TestRedTeamTransparentPlainHTTP: plain HTTP captured by the transparent
// listener is filtered as strictly as CONNECT and the explicit proxy. Each
// attack: the status the sandbox sees, exactly the audit records written, and
// the upstream (the original destination, reachable by the test dialer) saw
// zero requests and zero connections.
func TestRedTeamTransparentPlainHTTP(t *testing.T) {
	up := newUpstream(t, nil, nil)
	h := newHarness(t, policytest.Allow("pypi.org"), names("pypi.org", "evil.example"), nil)
	h.allowUpstreams(up)
	dst := netip.MustParseAddrPort(up.addr)
	p := dst.Port()
	tests := []struct {
		name    string
		raw     string
		status  []int    // status of each response, in order (0: closed without one)
		records []string // recSummary of each record
	}{
		{"absolute-form naming another host than Host",
			fmt.Sprintf("GET http://evil.example:%d/ HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", p, p),
			[]int{403}, []string{"http deny host_mismatch"}},
		{"absolute-form naming another host, no Host",
			fmt.Sprintf("GET http://evil.example:%d/ HTTP/1.1\r\n\r\n", p),
			[]int{403}, []string{"http deny host_mismatch"}},
		{"Host naming a denied host at an allowed host's address",
			fmt.Sprintf("GET / HTTP/1.1\r\nHost: evil.example:%d\r\n\r\n", p),
			[]int{403}, []string{"http deny not_allowed"}},
		// Malformed requests are not HTTP to the peeker: refused as such
		// and closed (no HTTP answer), or, not recognised as HTTP at all,
		// decided as raw TCP to the address, which only a kind tcp rule allows.
		{"duplicate Host",
			fmt.Sprintf("GET / HTTP/1.1\r\nHost: pypi.org:%d\r\nHost: evil.example:%d\r\n\r\n", p, p),
			[]int{0}, []string{"tcp deny bad_request"}},
		{"Host port differs from the original destination's",
			"GET / HTTP/1.1\r\nHost: pypi.org:81\r\n\r\n",
			[]int{403}, []string{"http deny host_mismatch"}},
		{"HTTP/1.0 without Host (decided as the bare address)",
			"GET / HTTP/1.0\r\n\r\n",
			[]int{403}, []string{"http deny not_allowed"}},
		{"obs-fold continuing Host",
			fmt.Sprintf("GET / HTTP/1.1\r\nHost: pypi.org:%d\r\n evil.example\r\n\r\n", p),
			[]int{0}, []string{"tcp deny bad_request"}},
		{"double space in the request line",
			fmt.Sprintf("GET  / HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", p),
			[]int{0}, []string{"tcp deny not_allowed"}},
		{"space before the header colon",
			fmt.Sprintf("GET / HTTP/1.1\r\nHost : evil.example\r\nHost: pypi.org:%d\r\n\r\n", p),
			[]int{0}, []string{"tcp deny bad_request"}},
		{"pipelined: the second request names another host",
			fmt.Sprintf("GET /a HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\nGET /b HTTP/1.1\r\nHost: evil.example:%d\r\n\r\n", p, p),
			[]int{200, 403}, []string{"http allow", "http deny host_mismatch"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h.origDst.Store(dst)
			n := len(h.log.Records())
			reqs, conns := up.reqs.Load(), up.conns.Load()
			c, err := net.Dial("tcp", h.transp)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, tc.raw)
			br := bufio.NewReader(c)
			var got []int
			for range tc.status {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					got = append(got, 0)
					break
				}
				io.Copy(io.Discard, resp.Body)
				got = append(got, resp.StatusCode)
			}
			c.Close()
			if fmt.Sprint(got) != fmt.Sprint(tc.status) {
				t.Fatalf("statuses: got %v, want %v", got, tc.status)
			}
			recs := settledRecords(t, h.log, n, len(tc.records))
			var sums []string
			for _, r := range recs {
				sums = append(sums, recSummary(r))
			}
			if fmt.Sprint(sums) != fmt.Sprint(tc.records) {
				t.Fatalf("audit records: got %q, want %q", sums, tc.records)
			}
			allowed := 0
			for _, r := range recs {
				if r.Decision == audit.DecisionAllow {
					allowed++
				}
			}
			if got := up.reqs.Load() - reqs; got != int64(allowed) {
				t.Fatalf("upstream requests: got %d, want %d", got, allowed)
			}
			if allowed == 0 {
				if got := up.conns.Load() - conns; got != 0 {
					t.Fatalf("upstream connections: got %d, want 0", got)
				}
			}
		})
	}
}
