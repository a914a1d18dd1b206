package secrets

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
)

func TestCanaryFormsCoverEncodings(t *testing.T) {
	forms := CanaryForms(canary)
	b := []byte(canary)
	want := []string{
		canary,
		base64.StdEncoding.EncodeToString(b), base64.RawStdEncoding.EncodeToString(b),
		base64.URLEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b),
		hex.EncodeToString(b), strings.ToUpper(hex.EncodeToString(b)),
		url.QueryEscape(canary), url.PathEscape(canary),
	}
	for _, w := range want {
		found := false
		for _, f := range forms {
			if f == w {
				found = true
			}
		}
		if !found {
			t.Errorf("CanaryForms lacks %q", w)
		}
	}
	for i := 1; i < len(forms); i++ {
		if len(forms[i]) > len(forms[i-1]) {
			t.Fatalf("forms not longest first at %d", i)
		}
	}
	if CanaryForms("") != nil {
		t.Error("CanaryForms(\"\"): got forms, want nil")
	}
}

// The value base64-encoded at any offset inside a larger blob (an echoed
// header block, a JSON document) still contains one of its forms.
func TestBase64AtAnyOffsetIsCaught(t *testing.T) {
	s := newScrubber(CanaryForms(canary))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		for off := 0; off < 6; off++ {
			blob := strings.Repeat("x", off) + canary + "tail"
			out, n := s.scrubString(enc.EncodeToString([]byte(blob)))
			if n == 0 {
				t.Errorf("offset %d: base64 of blob not scrubbed: %q", off, out)
			}
		}
	}
}

// chunker returns reads of the given sizes in turn.
type chunker struct {
	data  []byte
	sizes []int
	i     int
}

func (c *chunker) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := c.sizes[c.i%len(c.sizes)]
	c.i++
	if n > len(p) {
		n = len(p)
	}
	if n > len(c.data) {
		n = len(c.data)
	}
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func TestScrubReaderSplitAcrossReads(t *testing.T) {
	s := newScrubber(CanaryForms(canary))
	hexv := hex.EncodeToString([]byte(canary))
	body := "start " + canary + " mid " + base64.StdEncoding.EncodeToString([]byte(canary)) +
		" " + hexv + " " + url.QueryEscape(canary) + " end" + canary
	for _, sizes := range [][]int{{1}, {2}, {3}, {7}, {1, 5, 13}, {len(canary) - 1}, {len(canary)}, {4096}} {
		var count atomic.Int64
		r := newScrubReader(s, io.NopCloser(&chunker{data: []byte(body), sizes: sizes}), &count, nil)
		got, err := io.ReadAll(iotest.OneByteReader(r))
		if err != nil {
			t.Fatalf("sizes %v: %v", sizes, err)
		}
		for _, f := range CanaryForms(canary) {
			if bytes.Contains(got, []byte(f)) {
				t.Errorf("sizes %v: output contains form %q", sizes, f)
			}
		}
		if count.Load() != 5 {
			t.Errorf("sizes %v: got %d scrubs, want 5", sizes, count.Load())
		}
		want := "start [REDACTED] mid [REDACTED] [REDACTED] [REDACTED] end[REDACTED]"
		if string(got) != want {
			t.Errorf("sizes %v: got %q, want %q", sizes, got, want)
		}
	}
}

func TestScrubReaderPassesCleanDataUnchanged(t *testing.T) {
	s := newScrubber(CanaryForms(canary))
	data := bytes.Repeat([]byte("harmless data, canary-S3cr3t but not the whole value\n"), 1000)
	var count atomic.Int64
	r := newScrubReader(s, io.NopCloser(&chunker{data: data, sizes: []int{1, 100, 7000}}), &count, nil)
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) || count.Load() != 0 {
		t.Errorf("got %d bytes and %d scrubs, want %d bytes unchanged and 0", len(got), count.Load(), len(data))
	}
}

// TestScrubResponseStatusLine (regression: a credential reflected in the
// status line's reason phrase, "401 bad key sk-...", reached the sandbox):
// every form the scrubber knows is replaced in resp.Status, the code stays,
// and the status line Response.Write sends (what the gateway relays) is clean.
func TestScrubResponseStatusLine(t *testing.T) {
	in, u, _ := setup(t, nil)
	req := mustReq(t, "GET", u.URL("api.example.com", "/echo"), nil)
	b := []byte(canary)
	jsonForm, _ := json.Marshal(canary)
	tests := []struct {
		name, form string
	}{
		{"value", canary},
		{"base64 std", base64.StdEncoding.EncodeToString(b)},
		{"base64 url", base64.URLEncoding.EncodeToString(b)},
		{"base64 raw std", base64.RawStdEncoding.EncodeToString(b)},
		{"base64 raw url", base64.RawURLEncoding.EncodeToString(b)},
		{"hex", hex.EncodeToString(b)},
		{"HEX", strings.ToUpper(hex.EncodeToString(b))},
		{"percent query", url.QueryEscape(canary)},
		{"percent path", url.PathEscape(canary)},
		{"percent every byte", percentAll(b, "0123456789ABCDEF")},
		{"json", string(jsonForm[1 : len(jsonForm)-1])},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := in.Inject(context.Background(), sb1, req.Clone(context.Background()))
			if err != nil || a == nil {
				t.Fatalf("Inject: %v %v", a, err)
			}
			raw := "HTTP/1.1 401 bad key " + tt.form + " (rejected)\r\nContent-Length: 2\r\n\r\nno"
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), req)
			if err != nil {
				t.Fatal(err)
			}
			if err := in.ScrubResponse(a, resp); err != nil {
				t.Fatalf("ScrubResponse: %v", err)
			}
			if resp.StatusCode != 401 || resp.Status != "401 bad key [REDACTED] (rejected)" {
				t.Errorf("got %d %q, want 401 %q", resp.StatusCode, resp.Status, "401 bad key [REDACTED] (rejected)")
			}
			var out bytes.Buffer
			if err := resp.Write(&out); err != nil {
				t.Fatal(err)
			}
			if line, _, _ := strings.Cut(out.String(), "\r\n"); line != "HTTP/1.1 401 bad key [REDACTED] (rejected)" {
				t.Errorf("status line: got %q, want %q", line, "HTTP/1.1 401 bad key [REDACTED] (rejected)")
			}
			assertNoForms(t, "written response", out.String(), canary)
			if n := a.Audit()[0].Scrubbed; n < 1 {
				t.Errorf("scrubs: got %d, want at least 1", n)
			}
		})
	}
	t.Run("status without its code", func(t *testing.T) {
		a, err := in.Inject(context.Background(), sb1, req.Clone(context.Background()))
		if err != nil {
			t.Fatal(err)
		}
		resp := &http.Response{StatusCode: 403, Status: "denied " + canary, ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{}, Body: http.NoBody}
		if err := in.ScrubResponse(a, resp); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := resp.Write(&out); err != nil {
			t.Fatal(err)
		}
		if line, _, _ := strings.Cut(out.String(), "\r\n"); line != "HTTP/1.1 403 denied [REDACTED]" {
			t.Errorf("status line: got %q, want %q", line, "HTTP/1.1 403 denied [REDACTED]")
		}
	})
}

// TestStatusLineScrubbedThroughUpstream: a real upstream answers 401 with the
// injected value in its reason phrase (and a header); the response the
// gateway would write for the sandbox carries neither.
func TestStatusLineScrubbedThroughUpstream(t *testing.T) {
	in, u, _ := setup(t, nil)
	tr := transport(t, u, true)
	req := mustReq(t, "GET", u.URL("api.example.com", "/reason"), nil)
	a, err := in.Inject(context.Background(), sb1, req)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(resp.Status, canary) {
		t.Fatalf("upstream status %q does not reflect the value: the test proves nothing", resp.Status)
	}
	if err := in.ScrubResponse(a, resp); err != nil {
		t.Fatal(err)
	}
	resp.TransferEncoding = []string{"chunked"} // as the gateway relays a scrubbed body
	var out bytes.Buffer
	if err := resp.Write(&out); err != nil {
		t.Fatal(err)
	}
	if line, _, _ := strings.Cut(out.String(), "\r\n"); line != "HTTP/1.1 401 invalid key [REDACTED]" {
		t.Errorf("status line: got %q, want %q", line, "HTTP/1.1 401 invalid key [REDACTED]")
	}
	assertNoForms(t, "written response", out.String(), canary)
}

// TestHeaderNameScrubbedInAnyCase (regression: the scrubber matched header
// names exactly, but a name arrives canonicalized, "X-Sk-Live0123abcdef", or
// lower-cased over HTTP/2, so a value reflected in a name reached the sandbox
// with only its case changed): a token-shaped secret reflected in a header
// name by a real upstream, and in a lower-cased name, is scrubbed.
func TestHeaderNameScrubbedInAnyCase(t *testing.T) {
	const tokenValue = "sk-Live0123456789AbCdEfGhIjKlMn"
	in, u, sink := setup(t, nil)
	t.Setenv(canaryEnv, tokenValue)
	sink.Watch(tokenValue)
	tr := transport(t, u, true)
	_, seen, err := roundTrip(t, in, tr, sb1, mustReq(t, "GET", u.URL("api.example.com", "/reason"), nil))
	if err != nil {
		t.Fatal(err)
	}
	low := strings.ToLower(seen)
	if strings.Contains(low, strings.ToLower(tokenValue)) {
		t.Errorf("sandbox view holds the value in some case:\n%s", seen)
	}
	if !strings.Contains(seen, "X-Redacted") && !strings.Contains(seen, "REDACTED: reflected") {
		t.Errorf("sandbox view: want the reflected header's name redacted:\n%s", seen)
	}

	a, err := in.Inject(context.Background(), sb1, mustReq(t, "GET", u.URL("api.example.com", "/echo"), nil))
	if err != nil {
		t.Fatal(err)
	}
	resp := &http.Response{StatusCode: 200, Status: "200 OK", ProtoMajor: 2, Body: http.NoBody,
		Header: http.Header{"x-" + strings.ToLower(tokenValue): {"1"}}}
	if err := in.ScrubResponse(a, resp); err != nil {
		t.Fatal(err)
	}
	for name := range resp.Header {
		if strings.Contains(strings.ToLower(name), strings.ToLower(tokenValue)) {
			t.Errorf("lower-cased header name %q kept the value", name)
		}
	}
}
