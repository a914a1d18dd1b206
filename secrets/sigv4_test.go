package secrets

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Vectors from AWS's published SigV4 documentation and test suite (facts:
// inputs and expected signatures).
const (
	suiteSecret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY" // the suite's example secret
	s3DocSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY" // the S3 guide's example secret
)

func TestSigv4Vectors(t *testing.T) {
	tests := []struct {
		name   string
		req    sigv4Request
		secret string
		scope  sigv4Scope
		date   string
		want   string
	}{
		{
			name: "suite get-vanilla",
			req: sigv4Request{method: "GET", escapedPath: "/", host: "example.amazonaws.com",
				header: http.Header{"X-Amz-Date": {"20150830T123600Z"}}, signedHeaders: []string{"host", "x-amz-date"},
				payloadHash: emptySHA256},
			secret: suiteSecret, scope: sigv4Scope{"20150830", "us-east-1", "service"}, date: "20150830T123600Z",
			want: "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
		},
		{
			name: "suite get-vanilla-query-order-key-case",
			req: sigv4Request{method: "GET", escapedPath: "/", rawQuery: "Param2=value2&Param1=value1", host: "example.amazonaws.com",
				header: http.Header{"X-Amz-Date": {"20150830T123600Z"}}, signedHeaders: []string{"host", "x-amz-date"},
				payloadHash: emptySHA256},
			secret: suiteSecret, scope: sigv4Scope{"20150830", "us-east-1", "service"}, date: "20150830T123600Z",
			want: "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
		},
		{
			name: "s3 guide GET object with range",
			req: sigv4Request{method: "GET", escapedPath: "/test.txt", host: "examplebucket.s3.amazonaws.com", s3: true,
				header: http.Header{"X-Amz-Date": {"20130524T000000Z"}, "Range": {"bytes=0-9"},
					"X-Amz-Content-Sha256": {emptySHA256}},
				signedHeaders: []string{"host", "range", "x-amz-content-sha256", "x-amz-date"}, payloadHash: emptySHA256},
			secret: s3DocSecret, scope: sigv4Scope{"20130524", "us-east-1", "s3"}, date: "20130524T000000Z",
			want: "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
		},
		{
			name: "s3 guide presigned GET",
			req: sigv4Request{method: "GET", escapedPath: "/test.txt", host: "examplebucket.s3.amazonaws.com", s3: true,
				presigned: true,
				rawQuery: "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request" +
					"&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature=x",
				signedHeaders: []string{"host"}, payloadHash: unsignedPayload},
			secret: s3DocSecret, scope: sigv4Scope{"20130524", "us-east-1", "s3"}, date: "20130524T000000Z",
			want: "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
		},
		{
			name: "s3 guide streaming PUT seed",
			req: sigv4Request{method: "PUT", escapedPath: "/examplebucket/chunkObject.txt", host: "s3.amazonaws.com", s3: true,
				contentLength: 66824,
				header: http.Header{"X-Amz-Date": {"20130524T000000Z"}, "X-Amz-Storage-Class": {"REDUCED_REDUNDANCY"},
					"Content-Encoding": {"aws-chunked"}, "X-Amz-Decoded-Content-Length": {"66560"},
					"X-Amz-Content-Sha256": {streamingSigned}},
				signedHeaders: []string{"content-encoding", "content-length", "host", "x-amz-content-sha256",
					"x-amz-date", "x-amz-decoded-content-length", "x-amz-storage-class"},
				payloadHash: streamingSigned},
			secret: s3DocSecret, scope: sigv4Scope{"20130524", "us-east-1", "s3"}, date: "20130524T000000Z",
			want: "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.req.signature(tt.secret, tt.scope, tt.date)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				c, _ := tt.req.canonical()
				t.Errorf("got %s, want %s\ncanonical:\n%s", got, tt.want, c)
			}
		})
	}
}

// awsChunked frames chunks as aws-chunked, signing each with key in a chain
// from seed.
func awsChunked(key []byte, date string, s sigv4Scope, seed string, chunks ...[]byte) ([]byte, []string) {
	var out bytes.Buffer
	var sigs []string
	prev := seed
	for _, c := range append(chunks, nil) {
		sig := sigv4Sign(key, sigv4ChunkStringToSign(date, s, prev, c))
		out.WriteString(hexLen(len(c)))
		out.WriteString(";chunk-signature=" + sig + "\r\n")
		out.Write(c)
		out.WriteString("\r\n")
		sigs = append(sigs, sig)
		prev = sig
	}
	return out.Bytes(), sigs
}

func hexLen(n int) string {
	if n == 0 {
		return "0"
	}
	const d = "0123456789abcdef"
	var b []byte
	for ; n > 0; n /= 16 {
		b = append([]byte{d[n%16]}, b...)
	}
	return string(b)
}

func TestSigv4ChunkVector(t *testing.T) {
	s := sigv4Scope{"20130524", "us-east-1", "s3"}
	key := sigv4Key(s3DocSecret, s)
	body, sigs := awsChunked(key, "20130524T000000Z", s, "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9",
		bytes.Repeat([]byte("a"), 65536), bytes.Repeat([]byte("a"), 1024))
	want := []string{
		"ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
		"0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
		"b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
	}
	for i := range want {
		if sigs[i] != want[i] {
			t.Errorf("chunk %d: got %s, want %s", i, sigs[i], want[i])
		}
	}
	if len(body) != 66824 {
		t.Errorf("got framed length %d, want 66824 (the guide's Content-Length)", len(body))
	}
}

func TestChunkResigner(t *testing.T) {
	s := sigv4Scope{"20130524", "us-east-1", "s3"}
	date := "20130524T000000Z"
	phKey, realKey := sigv4Key("placeholder-secret", s), sigv4Key(s3DocSecret, s)
	chunks := [][]byte{bytes.Repeat([]byte("x"), 70000), []byte("tail")}
	in, _ := awsChunked(phKey, date, s, "seedph", chunks...)
	want, _ := awsChunked(realKey, date, s, "seedreal", chunks...)

	r := newChunkResigner(io.NopCloser(bytes.NewReader(in)), date, s, phKey, realKey, "seedph", "seedreal", nil)
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("re-signed body differs from the body signed with the real key (len %d, want %d)", len(got), len(want))
	}

	bad := []struct {
		name string
		body []byte
	}{
		{"other key", func() []byte { b, _ := awsChunked(sigv4Key("other", s), date, s, "seedph", chunks...); return b }()},
		{"other seed", func() []byte { b, _ := awsChunked(phKey, date, s, "seedother", chunks...); return b }()},
		{"tampered data", bytes.Replace(in, []byte("tail"), []byte("tall"), 1)},
		{"truncated", in[:len(in)-10]},
		{"trailing data", append(append([]byte(nil), in...), "x"...)},
		{"huge chunk", []byte("fffffff;chunk-signature=" + strings.Repeat("0", 64) + "\r\n")},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			var denied *Denial
			r := newChunkResigner(io.NopCloser(bytes.NewReader(tt.body)), date, s, phKey, realKey, "seedph", "seedreal",
				func(d *Denial) { denied = d })
			out, err := io.ReadAll(r)
			if err == nil || denied == nil || denied.Code != CodeAWSSignature {
				t.Fatalf("got err %v, denial %v, want a %s denial", err, denied, CodeAWSSignature)
			}
			if bytes.Contains(out, []byte("tall")) {
				t.Error("the tampered chunk was passed on")
			}
		})
	}
}
