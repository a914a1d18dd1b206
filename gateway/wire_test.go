package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/policy/policytest"
)

// TestWireHeadsMatchNetHTTP: what writeRequestHead and writeResponseHead
// write is what net/http's Request.Write and Response.Write write (header
// order aside, and without the User-Agent net/http adds to a request that has
// none), and a head they must not write themselves falls back untouched.
func TestWireHeadsMatchNetHTTP(t *testing.T) {
	reqs := []struct {
		name, raw string
		fast      bool
	}{
		{"get", "GET http://pypi.org/simple/x/?a=1&b=%20 HTTP/1.1\r\nHost: pypi.org\r\nUser-Agent: pip\r\nAccept: */*\r\nX-Two: 1\r\nX-Two: 2\r\n\r\n", true},
		{"get, port, no user agent", "GET http://pypi.org:8080/ HTTP/1.1\r\nHost: pypi.org:8080\r\n\r\n", true},
		{"head", "HEAD http://pypi.org/x HTTP/1.1\r\nHost: pypi.org\r\nUser-Agent: curl\r\n\r\n", true},
		{"websocket upgrade", "GET http://pypi.org/ws HTTP/1.1\r\nHost: pypi.org\r\nUser-Agent: ws\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", true},
		{"a body", "POST http://pypi.org/ HTTP/1.1\r\nHost: pypi.org\r\nUser-Agent: pip\r\nContent-Length: 3\r\n\r\nabc", false},
		{"chunked", "POST http://pypi.org/ HTTP/1.1\r\nHost: pypi.org\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false},
		{"value with outer space", "GET http://pypi.org/ HTTP/1.1\r\nHost: pypi.org\r\nX-A: \"a \"\r\n\r\n", true},
	}
	for _, tc := range reqs {
		t.Run("request/"+tc.name, func(t *testing.T) {
			req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(tc.raw)))
			if err != nil {
				t.Fatal(err)
			}
			req.URL.Scheme, req.URL.Host, req.RequestURI = "", "", ""
			var fast bytes.Buffer
			bw := bufio.NewWriter(&fast)
			ok := writeRequestHead(bw, req)
			bw.Flush()
			if ok != tc.fast {
				t.Fatalf("fast path: got %v, want %v", ok, tc.fast)
			}
			if !ok {
				if fast.Len() != 0 {
					t.Fatalf("fell back after writing %q", fast.String())
				}
				return
			}
			var std bytes.Buffer
			if req.Header.Get("User-Agent") == "" {
				req.Header.Set("User-Agent", "") // net/http then sends none
			}
			if err := req.Write(&std); err != nil {
				t.Fatal(err)
			}
			if got, want := headLines(t, fast.String()), headLines(t, std.String()); got != want {
				t.Fatalf("got head\n%s\nwant\n%s", got, want)
			}
		})
	}

	resps := []struct {
		name, method, raw string
		fast              bool
	}{
		{"200 with body", "GET", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Two: 1\r\nX-Two: 2\r\nContent-Length: 2\r\n\r\nok", true},
		{"own reason phrase", "GET", "HTTP/1.1 404 Gone Fishing\r\nContent-Length: 0\r\n\r\n", true},
		{"empty 200 to a GET", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true},
		{"no reason phrase", "GET", "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", true},
		{"reason phrase starting with another code", "GET", "HTTP/1.1 201 200 Created\r\nContent-Length: 0\r\n\r\n", true},
		{"three-digit length", "GET", "HTTP/1.1 201 Created\r\nContent-Length: 100\r\n\r\n" + strings.Repeat("x", 100), true},
		{"to HEAD", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", false},
		{"204", "GET", "HTTP/1.1 204 No Content\r\n\r\n", false},
		{"304", "GET", "HTTP/1.1 304 Not Modified\r\nETag: x\r\n\r\n", false},
		{"chunked", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", false},
	}
	for _, tc := range resps {
		for _, closeAfter := range []bool{false, true} {
			name := "response/" + tc.name
			if closeAfter {
				name += ", close"
			}
			t.Run(name, func(t *testing.T) {
				req := &http.Request{Method: tc.method}
				read := func() *http.Response {
					resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(tc.raw)), req)
					if err != nil {
						t.Fatal(err)
					}
					removeHop(resp.Header)
					resp.Close = closeAfter
					return resp
				}
				resp := read()
				var fast bytes.Buffer
				bw := bufio.NewWriter(&fast)
				ok := writeResponseHead(bw, resp)
				if ok && resp.ContentLength > 0 {
					io.CopyN(bw, resp.Body, resp.ContentLength)
				}
				bw.Flush()
				if ok != tc.fast {
					t.Fatalf("fast path: got %v, want %v", ok, tc.fast)
				}
				if !ok {
					if fast.Len() != 0 {
						t.Fatalf("fell back after writing %q", fast.String())
					}
					return
				}
				var std bytes.Buffer
				if err := read().Write(&std); err != nil {
					t.Fatal(err)
				}
				if got, want := headLines(t, fast.String()), headLines(t, std.String()); got != want {
					t.Fatalf("got\n%s\nwant\n%s", got, want)
				}
			})
		}
	}
}

// headLines is a message with its header lines sorted (the first line and
// the body stay where they are).
func headLines(t *testing.T, msg string) string {
	t.Helper()
	head, body, ok := strings.Cut(msg, "\r\n\r\n")
	if !ok {
		t.Fatalf("no end of header in %q", msg)
	}
	lines := strings.Split(head, "\r\n")
	sort.Strings(lines[1:])
	return strings.Join(lines, "\n") + "\n\n" + body
}

// TestH2TransportNeverDials pins the HTTP/2 upstream transport: it only takes
// the connection dialUpstream made (guarded dialer, parent proxy) and dials
// nothing itself, with or without a proxy in the environment.
func TestH2TransportNeverDials(t *testing.T) {
	t.Setenv("HTTPS_PROXY", "http://127.0.0.1:1")
	tr := newHarness(t, policytest.Allow(), nil, nil).g.h2Transport()
	if tr.Proxy != nil {
		t.Fatal("the HTTP/2 transport honours a proxy")
	}
	if _, err := tr.DialContext(context.Background(), "tcp", "127.0.0.1:1"); !errors.Is(err, errNoH2Dial) {
		t.Fatalf("DialContext: got %v, want %v", err, errNoH2Dial)
	}
	if _, err := tr.DialTLSContext(context.Background(), "tcp", "127.0.0.1:1"); !errors.Is(err, errNoH2Dial) {
		t.Fatalf("DialTLSContext without a connection: got %v, want %v", err, errNoH2Dial)
	}
	if _, err := tr.NewClientConn(context.Background(), "https", "127.0.0.1:1"); !errors.Is(err, errNoH2Dial) {
		t.Fatalf("NewClientConn without a connection: got %v, want %v", err, errNoH2Dial)
	}
	if tr.TLSClientConfig != nil && tr.TLSClientConfig.InsecureSkipVerify {
		t.Fatal("the HTTP/2 transport skips certificate checks")
	}
}
