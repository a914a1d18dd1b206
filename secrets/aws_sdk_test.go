package secrets

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/airlock-dev/airlock/test/fakeaws"
)

// The AWS SDK for Go signs with the sandbox's placeholders; the injector
// verifies and re-signs; a fake endpoint checks the result with the SDK's
// signer and the REAL credentials. Neither end uses this package's signer.

const (
	awsRealKeyID  = "AKIAAIRLOCKREALKEY01"
	awsRealSecret = "airlockREALsecret/xyzzy+0123456789abcdefGHIJ"
	awsRegion     = "eu-west-3"
)

type awsRig struct {
	in      *Injector
	sb      Sandbox
	ph      map[string]string
	s3, sts *fakeaws.Server
	client  *http.Client
	logs    *logSink
}

func newAWSRig(t testing.TB) *awsRig { return newAWSRigToken(t, "") }

// newAWSRigToken: with token, the real credentials are temporary ones with
// that session token, which the fakes require.
func newAWSRigToken(t testing.TB, token string) *awsRig {
	t.Helper()
	dir := t.TempDir()
	f := filepath.Join(dir, "aws-secret")
	if err := os.WriteFile(f, []byte(awsRealSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	tokSecret, tokRef := "", ""
	if token != "" {
		tf := filepath.Join(dir, "aws-token")
		if err := os.WriteFile(tf, []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
		tokSecret = "  - id: aws-token\n    file: " + tf + "\n"
		tokRef = ", session_token_secret: aws-token"
	}
	cfg, err := Parse([]byte(fmt.Sprintf(`secrets:
  - id: aws
    file: %s
%sbindings:
  - secret: aws
    sandboxes: {ids: [sb-aws]}
    host: s3.fake.test
    aws_sigv4: {access_key_id: %s, region: %s, service: s3%s}
  - secret: aws
    sandboxes: {ids: [sb-aws]}
    host: sts.fake.test
    aws_sigv4: {access_key_id: %s, region: %s, service: sts%s}
`, f, tokSecret, awsRealKeyID, awsRegion, tokRef, awsRealKeyID, awsRegion, tokRef)))
	if err != nil {
		t.Fatal(err)
	}
	logger, logs := newLogSink(t, awsRealSecret)
	if token != "" {
		logs.Watch(token)
	}
	in, err := New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	r := &awsRig{in: in, sb: Sandbox{ID: "sb-aws"}, logs: logs}
	if r.ph, err = in.Placeholders(r.sb); err != nil {
		t.Fatal(err)
	}
	r.serve(t,
		fakeaws.New(fakeaws.Config{Service: "s3", Region: awsRegion, AccessKeyID: awsRealKeyID, Secret: awsRealSecret, SessionToken: token}),
		fakeaws.New(fakeaws.Config{Service: "sts", Region: awsRegion, AccessKeyID: awsRealKeyID, Secret: awsRealSecret, SessionToken: token}))
	return r
}

// serve starts the fakes on loopback as s3.fake.test and sts.fake.test and
// gives the rig a client that reaches only them.
func (r *awsRig) serve(t testing.TB, s3, sts *fakeaws.Server) {
	t.Helper()
	r.s3, r.sts = s3, sts
	srv := map[string]*httptest.Server{
		"s3.fake.test:443":  httptest.NewTLSServer(s3),
		"sts.fake.test:443": httptest.NewTLSServer(sts),
	}
	for _, s := range srv {
		t.Cleanup(s.Close)
	}
	r.client = &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // loopback fakes only
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			s, ok := srv[addr]
			if !ok {
				return nil, fmt.Errorf("test dialer: %s is not a fake", addr)
			}
			return (&net.Dialer{}).DialContext(ctx, network, s.Listener.Addr().String())
		},
	}}
}

func (r *awsRig) phCreds() aws.Credentials {
	return aws.Credentials{AccessKeyID: r.ph[EnvAWSAccessKeyID], SecretAccessKey: r.ph[EnvAWSSecretAccessKey],
		SessionToken: r.ph[EnvAWSSessionToken]}
}

// sdkSign signs req with the SDK and the sandbox's placeholder credentials.
func (r *awsRig) sdkSign(t *testing.T, req *http.Request, hash, service string, at time.Time) {
	t.Helper()
	if service == "s3" {
		req.Header.Set("X-Amz-Content-Sha256", hash)
	}
	if err := v4.NewSigner().SignHTTP(context.Background(), r.phCreds(), req, hash, service, awsRegion, at,
		func(o *v4.SignerOptions) { o.DisableURIPathEscaping = service == "s3" }); err != nil {
		t.Fatal(err)
	}
}

// send runs the request through Inject and, when it passes, to the fake.
func (r *awsRig) send(t *testing.T, req *http.Request) (*http.Response, string, error) {
	t.Helper()
	a, err := r.in.Inject(context.Background(), r.sb, req)
	if err != nil {
		return nil, "", err
	}
	if a == nil {
		t.Fatal("Inject applied nothing to a request for a bound AWS host")
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	if err := r.in.ScrubResponse(a, resp); err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// chunkedBody frames data as aws-chunked, each chunk signed by the SDK's
// stream signer from seed with creds.
func chunkedBody(t *testing.T, creds aws.Credentials, service string, seed string, at time.Time, data []byte, size int) []byte {
	t.Helper()
	sb, _ := hex.DecodeString(seed)
	ss := v4.NewStreamSigner(creds, service, awsRegion, sb)
	var out bytes.Buffer
	for off := 0; ; off = min(off+size, len(data)) {
		c := data[off:min(off+size, len(data))]
		sig, err := ss.GetSignature(context.Background(), nil, c, at)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&out, "%x;chunk-signature=%s\r\n", len(c), hex.EncodeToString(sig))
		out.Write(c)
		out.WriteString("\r\n")
		if len(c) == 0 {
			return out.Bytes()
		}
	}
}

func authSignature(h string) string {
	_, sig, _ := strings.Cut(h, "Signature=")
	return sig
}

func TestAWSResignAcceptedByRealSecret(t *testing.T) {
	r := newAWSRig(t)
	now := time.Now().UTC()
	payload := bytes.Repeat([]byte("airlock-sigv4 "), 20000) // 280 kB: several chunks

	t.Run("put literal hash", func(t *testing.T) {
		req, _ := http.NewRequest("PUT", "https://s3.fake.test/bucket/literal.txt", bytes.NewReader(payload))
		r.sdkSign(t, req, sha(payload), "s3", now)
		resp, _, err := r.send(t, req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("got %v %v, want 200; fake: %+v", resp, err, r.s3.Requests())
		}
		if got, _ := r.s3.Object("/bucket/literal.txt"); !bytes.Equal(got, payload) {
			t.Error("stored object differs")
		}
	})
	t.Run("put unsigned payload", func(t *testing.T) {
		req, _ := http.NewRequest("PUT", "https://s3.fake.test/bucket/unsigned.txt", bytes.NewReader(payload))
		r.sdkSign(t, req, unsignedPayload, "s3", now.Add(time.Second))
		if resp, _, err := r.send(t, req); err != nil || resp.StatusCode != 200 {
			t.Fatalf("got %v %v, want 200", resp, err)
		}
	})
	t.Run("put streaming signed chunks", func(t *testing.T) {
		at := now.Add(2 * time.Second)
		req, _ := http.NewRequest("PUT", "https://s3.fake.test/bucket/chunked.txt", nil)
		req.Header.Set("Content-Encoding", "aws-chunked")
		req.Header.Set("X-Amz-Decoded-Content-Length", fmt.Sprint(len(payload)))
		// Sign first with a dummy length, then frame the body from the seed.
		framedLen := int64(len(chunkedBody(t, r.phCreds(), "s3", strings.Repeat("0", 64), at, payload, 64<<10)))
		req.ContentLength = framedLen
		r.sdkSign(t, req, streamingSigned, "s3", at)
		body := chunkedBody(t, r.phCreds(), "s3", authSignature(req.Header.Get("Authorization")), at, payload, 64<<10)
		req.Body = io.NopCloser(bytes.NewReader(body))
		resp, _, err := r.send(t, req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("got %v %v, want 200; fake: %+v", resp, err, r.s3.Requests())
		}
		if got, _ := r.s3.Object("/bucket/chunked.txt"); !bytes.Equal(got, payload) {
			t.Error("stored object differs from the decoded chunks")
		}
	})
	// Regression (e2e TestRootAWSCLIStreamingChecksum): the aws CLI signs
	// transfer-encoding on its aws-chunked uploads, and net/http moves that
	// header into Request.TransferEncoding; every such upload was refused
	// ("signed header transfer-encoding is missing").
	t.Run("put unsigned trailer with transfer-encoding signed", func(t *testing.T) {
		var framed bytes.Buffer
		for off := 0; off < len(payload); off += 64 << 10 {
			c := payload[off:min(off+64<<10, len(payload))]
			fmt.Fprintf(&framed, "%x\r\n%s\r\n", len(c), c)
		}
		crc := binary.BigEndian.AppendUint32(nil, crc32.ChecksumIEEE(payload))
		fmt.Fprintf(&framed, "0\r\nx-amz-checksum-crc32:%s\r\n\r\n", base64.StdEncoding.EncodeToString(crc))
		req, _ := http.NewRequest("PUT", "https://s3.fake.test/bucket/trailer.txt", io.NopCloser(bytes.NewReader(framed.Bytes())))
		req.ContentLength, req.TransferEncoding = -1, []string{"chunked"}
		req.Header.Set("Content-Encoding", "aws-chunked")
		req.Header.Set("X-Amz-Trailer", "x-amz-checksum-crc32")
		req.Header.Set("X-Amz-Decoded-Content-Length", fmt.Sprint(len(payload)))
		req.Header["transfer-encoding"] = []string{"chunked"} // lower case: the SDK's signer then signs it, as the CLI does
		r.sdkSign(t, req, streamingTrailer, "s3", now.Add(4*time.Second))
		delete(req.Header, "transfer-encoding") // where net/http leaves it on arrival: TransferEncoding only
		if !strings.Contains(req.Header.Get("Authorization"), "transfer-encoding") {
			t.Fatal("the test request does not sign transfer-encoding")
		}
		resp, _, err := r.send(t, req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("got %v %v, want 200; fake: %+v", resp, err, r.s3.Requests())
		}
		seen := r.s3.Requests()
		if got, _ := r.s3.Object("/bucket/trailer.txt"); !bytes.Equal(got, payload) || seen[len(seen)-1].Checksum != "x-amz-checksum-crc32" {
			t.Errorf("stored object equal %v, trailer checked %q; want the payload and crc32", bytes.Equal(got, payload), seen[len(seen)-1].Checksum)
		}
	})
	t.Run("get", func(t *testing.T) {
		req, _ := http.NewRequest("GET", "https://s3.fake.test/bucket/literal.txt", nil)
		r.sdkSign(t, req, emptySHA256, "s3", now.Add(3*time.Second))
		resp, body, err := r.send(t, req)
		if err != nil || resp.StatusCode != 200 || body != string(payload) {
			t.Fatalf("got %v %v (%d bytes), want 200 and the object", resp, err, len(body))
		}
	})
	t.Run("presigned get", func(t *testing.T) {
		req, _ := http.NewRequest("GET", "https://s3.fake.test/bucket/literal.txt?X-Amz-Expires=300", nil)
		u, _, err := v4.NewSigner().PresignHTTP(context.Background(), r.phCreds(), req, unsignedPayload, "s3", awsRegion, now,
			func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
		if err != nil {
			t.Fatal(err)
		}
		req, _ = http.NewRequest("GET", u, nil)
		resp, body, err := r.send(t, req)
		if err != nil || resp.StatusCode != 200 || body != string(payload) {
			t.Fatalf("got %v %v, want 200 and the object; fake: %+v", resp, err, r.s3.Requests())
		}
	})
	t.Run("sts get-caller-identity", func(t *testing.T) {
		form := []byte("Action=GetCallerIdentity&Version=2011-06-15")
		req, _ := http.NewRequest("POST", "https://sts.fake.test/", bytes.NewReader(form))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
		r.sdkSign(t, req, sha(form), "sts", now)
		resp, body, err := r.send(t, req)
		if err != nil || resp.StatusCode != 200 || !strings.Contains(body, "<Account>123456789012</Account>") {
			t.Fatalf("got %v %v %q, want 200 and the identity; fake: %+v", resp, err, body, r.sts.Requests())
		}
	})
	for _, fake := range []*fakeaws.Server{r.s3, r.sts} {
		for _, seen := range fake.Requests() {
			raw := fmt.Sprint(seen.URL, seen.Header, string(seen.Body))
			for _, v := range r.ph {
				if strings.Contains(raw, v) {
					t.Errorf("the fake saw a placeholder in %s %s", seen.Method, seen.URL)
				}
			}
		}
	}
}

// TestAWSRefusals: each request is signed by the SDK in a way the gateway
// must refuse; nothing reaches the fake.
func TestAWSRefusals(t *testing.T) {
	r := newAWSRig(t)
	now := time.Now().UTC()
	get := func(u string) *http.Request { req, _ := http.NewRequest("GET", u, nil); return req }
	tests := []struct {
		name string
		req  func() *http.Request
		code string
	}{
		{"other region", func() *http.Request {
			req := get("https://s3.fake.test/bucket/x")
			req.Header.Set("X-Amz-Content-Sha256", emptySHA256)
			v4.NewSigner().SignHTTP(context.Background(), r.phCreds(), req, emptySHA256, "s3", "us-east-1", now)
			return req
		}, CodeAWSSignature},
		{"other service", func() *http.Request {
			req := get("https://s3.fake.test/bucket/x")
			r.sdkSign(t, req, emptySHA256, "sts", now)
			return req
		}, CodeAWSSignature},
		{"signed for another host", func() *http.Request {
			req := get("https://evil.example/bucket/x")
			r.sdkSign(t, req, emptySHA256, "s3", now)
			req.URL.Host, req.Host = "s3.fake.test", "s3.fake.test"
			return req
		}, CodeAWSSignature},
		{"signed with another secret", func() *http.Request {
			req := get("https://s3.fake.test/bucket/x")
			c := r.phCreds()
			c.SecretAccessKey = "guessed-secret-key"
			req.Header.Set("X-Amz-Content-Sha256", emptySHA256)
			v4.NewSigner().SignHTTP(context.Background(), c, req, emptySHA256, "s3", awsRegion, now)
			return req
		}, CodeAWSSignature},
		{"own real-looking key", func() *http.Request {
			req := get("https://s3.fake.test/bucket/x")
			req.Header.Set("X-Amz-Content-Sha256", emptySHA256)
			v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: "AKIAOTHERKEY00000000",
				SecretAccessKey: "x"}, req, emptySHA256, "s3", awsRegion, now)
			return req
		}, CodePlaceholderRequired},
		{"stale date", func() *http.Request {
			req := get("https://s3.fake.test/bucket/x")
			r.sdkSign(t, req, emptySHA256, "s3", now.Add(-16*time.Minute))
			return req
		}, CodeAWSStale},
		{"future date", func() *http.Request {
			req := get("https://s3.fake.test/bucket/x")
			r.sdkSign(t, req, emptySHA256, "s3", now.Add(16*time.Minute))
			return req
		}, CodeAWSStale},
		{"tampered after signing", func() *http.Request {
			req := get("https://s3.fake.test/bucket/x")
			r.sdkSign(t, req, emptySHA256, "s3", now)
			req.URL.Path = "/bucket/y"
			return req
		}, CodeAWSSignature},
		{"streaming with trailer signature", func() *http.Request {
			req := get("https://s3.fake.test/bucket/x")
			r.sdkSign(t, req, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", "s3", now)
			return req
		}, CodeAWSUnsupported},
		{"unsigned", func() *http.Request {
			req := get("https://s3.fake.test/bucket/x")
			return req
		}, CodePlaceholderRequired},
		{"access key placeholder in another query parameter", func() *http.Request {
			req := get("https://s3.fake.test/bucket/x?note=" + r.ph[EnvAWSAccessKeyID])
			r.sdkSign(t, req, emptySHA256, "s3", now)
			return req
		}, CodePlaceholderMisuse},
		{"access key placeholder in another header", func() *http.Request {
			req := get("https://s3.fake.test/bucket/x")
			req.Header.Set("X-Amz-Meta-Note", r.ph[EnvAWSAccessKeyID])
			r.sdkSign(t, req, emptySHA256, "s3", now)
			return req
		}, CodePlaceholderMisuse},
		{"secret key placeholder on the wire", func() *http.Request {
			req := get("https://s3.fake.test/bucket/x?leak=" + r.ph[EnvAWSSecretAccessKey])
			r.sdkSign(t, req, emptySHA256, "s3", now)
			return req
		}, CodePlaceholderMisuse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, _, err := r.send(t, tt.req())
			d, ok := err.(*Denial)
			if !ok || d.Code != tt.code {
				t.Fatalf("got %v %v, want denial %s", resp, err, tt.code)
			}
		})
	}
	if n := len(r.s3.Requests()); n != 0 {
		t.Errorf("the fake saw %d requests, want 0", n)
	}
}

func TestAWSReplayRefused(t *testing.T) {
	r := newAWSRig(t)
	req, _ := http.NewRequest("GET", "https://s3.fake.test/bucket/none", nil)
	r.sdkSign(t, req, emptySHA256, "s3", time.Now().UTC())
	again := req.Clone(context.Background())
	if resp, _, err := r.send(t, req); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("first: got %v %v, want the fake's 404", resp, err)
	}
	_, _, err := r.send(t, again)
	if d, ok := err.(*Denial); !ok || d.Code != CodeAWSReplay {
		t.Fatalf("replay: got %v, want %s", err, CodeAWSReplay)
	}
	if n := len(r.s3.Requests()); n != 1 {
		t.Errorf("the fake saw %d requests, want 1", n)
	}
}

func TestAWSReflectedKeyScrubbed(t *testing.T) {
	r := newAWSRig(t)
	// A signature the fake will not accept after re-signing: the payload hash
	// does not match the body, so the fake answers its error naming the key id.
	req, _ := http.NewRequest("PUT", "https://s3.fake.test/bucket/x", strings.NewReader("body"))
	r.sdkSign(t, req, sha([]byte("other body")), "s3", time.Now().UTC())
	resp, body, err := r.send(t, req)
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("got %v %v, want the fake's 403", resp, err)
	}
	if strings.Contains(body, awsRealKeyID) || !strings.Contains(body, "[REDACTED]") {
		t.Errorf("the real access key id was not scrubbed: %s", body)
	}
}

// TestAWSSessionTokenSwapped: with temporary real credentials the sandbox
// holds a placeholder session token too; the SDK sends it (header, or query
// when presigned) and signs it; the gateway puts the real token in its place,
// and the fake accepts only the real one.
func TestAWSSessionTokenSwapped(t *testing.T) {
	const token = "FwoGZXIvYXdzEREALsessiontoken0123456789abcdef"
	r := newAWSRigToken(t, token)
	if r.ph[EnvAWSSessionToken] == "" {
		t.Fatal("no session token placeholder planted")
	}
	now := time.Now().UTC()
	form := []byte("Action=GetCallerIdentity&Version=2011-06-15")
	req, _ := http.NewRequest("POST", "https://sts.fake.test/", bytes.NewReader(form))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	r.sdkSign(t, req, sha(form), "sts", now)
	if got := req.Header.Get("X-Amz-Security-Token"); got != r.ph[EnvAWSSessionToken] {
		t.Fatalf("the SDK sent token %q, want the placeholder", got)
	}
	if resp, _, err := r.send(t, req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("header form: got %v %v, want 200; fake: %+v", resp, err, r.sts.Requests())
	}
	req, _ = http.NewRequest("GET", "https://s3.fake.test/bucket/none?X-Amz-Expires=300", nil)
	u, _, err := v4.NewSigner().PresignHTTP(context.Background(), r.phCreds(), req, unsignedPayload, "s3", awsRegion, now,
		func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	if err != nil {
		t.Fatal(err)
	}
	req, _ = http.NewRequest("GET", u, nil)
	if resp, _, err := r.send(t, req); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("presigned: got %v %v, want the fake's 404 (verified, no such key); fake: %+v", resp, err, r.s3.Requests())
	}
	for _, seen := range append(r.s3.Requests(), r.sts.Requests()...) {
		if !seen.Verified {
			t.Errorf("fake refused %s %s: %s", seen.Method, seen.URL, seen.Err)
		}
	}
}

// BenchmarkAWSInject: verifying a placeholder signature and re-signing a GET
// (the SDK's signing is outside the timer).
func BenchmarkAWSInject(b *testing.B) {
	r := newAWSRig(b)
	base := time.Now().UTC()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		req, _ := http.NewRequest("GET", fmt.Sprintf("https://s3.fake.test/bucket/k%d", i), nil)
		req.Header.Set("X-Amz-Content-Sha256", emptySHA256)
		v4.NewSigner().SignHTTP(context.Background(), r.phCreds(), req, emptySHA256, "s3", awsRegion, base,
			func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
		b.StartTimer()
		if _, err := r.in.Inject(context.Background(), r.sb, req); err != nil {
			b.Fatal(err)
		}
	}
}
