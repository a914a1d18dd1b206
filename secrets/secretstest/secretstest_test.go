package secretstest

import (
	"bufio"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestUpstreamLeaks: every path gives the credential back in the form it
// claims, so a test that finds no form of it in what a sandbox saw proves
// the scrubbing, not a quiet upstream.
func TestUpstreamLeaks(t *testing.T) {
	const value = "leak-me-0123456789"
	u := New(t, nil)
	u.Watch(value)
	tests := []struct {
		path string
		want string
	}{
		{"/echo", "X-B64: " + base64.StdEncoding.EncodeToString([]byte(value))},
		{"/echo", "Set-Cookie: session=" + value},
		{"/echo", "X-" + value + ": in a header name"},
		{"/encoded", "hex=6c65616b2d6d652d30313233343536373839"},
		{"/chunked", "Bearer " + value},
		{"/sse", `"token":"` + value + `"`},
		{"/redirect?to=https://elsewhere.example/x", "Location: https://elsewhere.example/x?token=" + value},
		{"/trailer", "X-Token: " + value},
		{"/reason", "401 invalid key " + value},
		{"/partial", "leak"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			got := rawGet(t, u.Addr, tt.path, "Bearer "+value)
			if !strings.Contains(strings.ToLower(got), strings.ToLower(tt.want)) { // header names are canonicalized
				t.Fatalf("response lacks %q:\n%s", tt.want, got)
			}
		})
	}
	if got, want := u.Received.Load(), int64(len(tests)); got != want || u.Carrying.Load() != want {
		t.Errorf("counts: got %d received, %d carrying; want %d each", got, u.Carrying.Load(), want)
	}
	if last := u.Last(); last.Path != "/partial" || last.Header.Get("Authorization") != "Bearer "+value {
		t.Errorf("last request: got %+v", last)
	}
}

func TestUpstreamSlowWaitsForRelease(t *testing.T) {
	u := New(t, nil)
	done := make(chan string, 1)
	go func() { done <- rawGet(t, u.Addr, "/slow", "Bearer v") }()
	u.WaitArrived(t)
	select {
	case <-done:
		t.Fatal("/slow answered before Release")
	default:
	}
	u.Release()
	if got := <-done; !strings.Contains(got, "Set-Cookie: session=v") {
		t.Fatalf("released /slow: got %q, want the echo", got)
	}
}

// rawGet sends a GET with an Authorization header and returns the response
// as a client sees it: status line, headers, the decoded body and trailers.
func rawGet(t *testing.T, addr, path, auth string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Error(err)
		return ""
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: "+auth+"\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Error(err)
		return ""
	}
	body, _ := io.ReadAll(resp.Body)
	var b strings.Builder
	b.WriteString(resp.Status + "\n")
	resp.Header.Write(&b)
	b.Write(body)
	resp.Trailer.Write(&b)
	return b.String()
}
