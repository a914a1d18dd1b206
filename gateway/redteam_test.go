package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
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

// newRecords waits until the log holds more than n records and settles, then
// returns the records after the first n.
func newRecords(t *testing.T, l *memLog, n int) []audit.Record {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(l.all()) <= n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // a second record would have come by now
	return l.all()[n:]
}

func TestRedTeamExplicitProxy(t *testing.T) {
	up := newHeaderUpstream(t)
	h := newHarness(t, allowHosts([]string{"pypi.org", "127.0.0.1"}, nil), names("pypi.org", "evil.example", "xn--bcher-kva.example"), nil)
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
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", false, 0},
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
			n := len(h.log.all())
			before := up.reqs.Load()
			status := exchangeRaw(t, h.explicit, tc.raw)
			recs := newRecords(t, h.log, n)
			var decisions []audit.Record
			for _, r := range recs {
				if r.Kind != "close" {
					decisions = append(decisions, r)
				}
			}
			if len(decisions) < 1 {
				t.Fatalf("status %d with no audit record", status)
			}
			first := decisions[0]
			if tc.allow {
				if status != 200 || first.Decision != "allow" {
					t.Fatalf("got status %d, record %+v; want 200 allow", status, first)
				}
			} else {
				failed := first.Decision == "allow" && first.Error != "" && status >= 500
				if status == 200 || first.Decision == "allow" && !failed {
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
