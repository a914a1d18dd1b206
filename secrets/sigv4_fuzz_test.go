package secrets

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// FuzzParseSigv4: whatever the sandbox writes in Authorization, X-Amz-Date
// and the query, parsing never panics, and what it accepts is well formed:
// a scope date equal to the date's, a 64-hex signature, host signed.
func FuzzParseSigv4(f *testing.F) {
	f.Add("AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature="+strings.Repeat("a", 64),
		"20260101T000000Z", "")
	f.Add("", "", "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F20260101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20260101T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host&X-Amz-Signature="+strings.Repeat("0", 64))
	f.Add("AWS4-HMAC-SHA256 Credential=a/b/c/d/e,,", "x", "a=%zz")
	f.Fuzz(func(t *testing.T, auth, date, query string) {
		req := &http.Request{Header: http.Header{}, URL: &url.URL{RawQuery: query}}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if date != "" {
			req.Header.Set("X-Amz-Date", date)
		}
		p, err := parseSigv4(req)
		if err != nil {
			return
		}
		if p.scope.date != p.amzDate[:8] || len(p.signature) != 64 {
			t.Fatalf("accepted a malformed signature: %+v", p)
		}
		host := false
		for _, h := range p.signedHeaders {
			host = host || h == "host"
		}
		if !host {
			t.Fatalf("accepted a signature that does not sign host: %+v", p)
		}
	})
}

// FuzzChunkResigner: a body the placeholder key did not sign never comes
// out, however it is framed: the resigner either fails or yields exactly the
// re-signed framing of the chunks it verified.
func FuzzChunkResigner(f *testing.F) {
	s := sigv4Scope{"20260101", "us-east-1", "s3"}
	date := "20260101T000000Z"
	phKey, realKey := sigv4Key("placeholder", s), sigv4Key("real-secret", s)
	good, _ := awsChunked(phKey, date, s, "seed", []byte("hello"), []byte("world"))
	f.Add(good)
	f.Add(good[:len(good)-3])
	f.Add([]byte("5;chunk-signature=" + strings.Repeat("0", 64) + "\r\nhello\r\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		r := newChunkResigner(io.NopCloser(bytes.NewReader(body)), date, s, phKey, realKey, "seed", "realseed", nil)
		out, err := io.ReadAll(io.LimitReader(r, 1<<22))
		if err != nil {
			return
		}
		// Only the signed chunks verify (the chain makes a forged chunk
		// unverifiable); the size's spelling is not signed, the data is.
		if got := unchunkForTest(out); got != "helloworld" {
			t.Fatalf("accepted a body the placeholder key did not sign: %q -> %q", body, out)
		}
	})
}

// unchunkForTest returns the data of an aws-chunked body ("" if malformed).
func unchunkForTest(b []byte) string {
	var out []byte
	for len(b) > 0 {
		line, rest, ok := bytes.Cut(b, []byte("\r\n"))
		if !ok {
			return ""
		}
		size, _, _ := bytes.Cut(line, []byte(";"))
		var n int
		for _, c := range bytes.ToLower(size) {
			d := bytes.IndexByte([]byte("0123456789abcdef"), c)
			if d < 0 {
				return ""
			}
			n = n*16 + d
		}
		if len(rest) < n+2 {
			return ""
		}
		out = append(out, rest[:n]...)
		b = rest[n+2:]
	}
	return string(out)
}
