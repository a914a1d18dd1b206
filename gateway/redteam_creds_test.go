package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy/policytest"
	"github.com/airlock-dev/airlock/secrets"
	"github.com/airlock-dev/airlock/test/fakeaws"
)

// Red-team battery for AWS SigV4 bindings: the sandbox holds placeholder AWS
// credentials and signs with the AWS SDK; the fakes behind the gateway accept
// only the REAL credentials (checked with the SDK's own signer). Each attack
// asserts the refusal, its audit record, and that no fake saw the request.

const (
	credsKeyID  = "AKIAGATEWAYREALKEY01"
	credsSecret = "gatewayREALawsSecret/0123456789+abcdefXYZ"
	credsRegion = "eu-central-1"
)

type awsSetup struct {
	h             *harness
	s3, sts, evil *fakeaws.Server
	s3Port        int
	evilPort      int
	ph            aws.Credentials
	client        *http.Client
	logs          *syncBuffer
}

func newAWSSetup(t *testing.T, opts ...harnessOpt) *awsSetup {
	t.Helper()
	st := &awsSetup{logs: &syncBuffer{}}
	pki := newTestPKI(t)
	cert := pki.leaf(t, "s3.aws.example", "sts.aws.example", "evil.example")
	mk := func(service string) *fakeaws.Server {
		return fakeaws.New(fakeaws.Config{Service: service, Region: credsRegion, AccessKeyID: credsKeyID, Secret: credsSecret})
	}
	st.s3, st.sts, st.evil = mk("s3"), mk("sts"), mk("s3")
	s3u, stsu, evilu := newUpstream(t, st.s3, &cert), newUpstream(t, st.sts, &cert), newUpstream(t, st.evil, &cert)
	st.s3Port, st.evilPort = s3u.port, evilu.port

	f := filepath.Join(t.TempDir(), "aws")
	if err := os.WriteFile(f, []byte(credsSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := secrets.Parse([]byte(fmt.Sprintf(`secrets:
  - id: aws
    file: %s
bindings:
  - secret: aws
    sandboxes: {ids: [sb-test]}
    host: s3.aws.example
    port: %d
    aws_sigv4: {access_key_id: %s, region: %s, service: s3}
  - secret: aws
    sandboxes: {ids: [sb-test]}
    host: sts.aws.example
    port: %d
    aws_sigv4: {access_key_id: %s, region: %s, service: sts}
`, f, s3u.port, credsKeyID, credsRegion, stsu.port, credsKeyID, credsRegion)))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewJSONHandler(st.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	inj, err := secrets.New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	env, err := inj.Placeholders(secrets.Sandbox{ID: "sb-test"})
	if err != nil {
		t.Fatal(err)
	}
	st.ph = aws.Credentials{AccessKeyID: env[secrets.EnvAWSAccessKeyID], SecretAccessKey: env[secrets.EnvAWSSecretAccessKey]}
	hosts := []string{"s3.aws.example", "sts.aws.example", "evil.example"}
	opts = append(opts, func(c *Config) { c.Injector = inj })
	st.h = newHarnessLogger(t, policytest.Allow(hosts...), names(hosts...), pki, logger, opts...)
	st.h.allowUpstreams(s3u, stsu, evilu)
	roots := x509.NewCertPool()
	roots.AddCert(pki.upCA)
	mitm, _ := LoadCACert(pki.mitmCert)
	roots.AddCert(mitm)
	st.client = clientVia(st.h.explicit, roots)
	t.Cleanup(func() {
		// Nothing the gateway logged or recorded carries the real secret.
		for _, form := range secrets.CanaryForms(credsSecret) {
			if strings.Contains(st.logs.String(), form) {
				t.Errorf("operational logs carry a form of the real secret")
			}
		}
		recs, _ := json.Marshal(st.h.log.Records())
		if bytes.Contains(recs, []byte(credsSecret)) || bytes.Contains(recs, []byte(credsKeyID)) {
			t.Errorf("audit records carry the real credentials")
		}
	})
	return st
}

func (st *awsSetup) sign(t *testing.T, req *http.Request, creds aws.Credentials, service, region string, at time.Time) {
	t.Helper()
	hash := sha256Hex(nil)
	if req.Body != nil {
		b, _ := io.ReadAll(req.Body)
		hash = sha256Hex(b)
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	if service == "s3" {
		req.Header.Set("X-Amz-Content-Sha256", hash)
	}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hash, service, region, at,
		func(o *v4.SignerOptions) { o.DisableURIPathEscaping = service == "s3" }); err != nil {
		t.Fatal(err)
	}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func (st *awsSetup) s3URL(path string) string {
	return fmt.Sprintf("https://s3.aws.example:%d%s", st.s3Port, path)
}

func (st *awsSetup) seen() int {
	return len(st.s3.Requests()) + len(st.sts.Requests()) + len(st.evil.Requests())
}

func TestRedTeamAWSSigV4(t *testing.T) {
	st := newAWSSetup(t)
	now := time.Now().UTC()

	// Control: a properly signed request goes through and is accepted by the
	// fake with the real key; its audit record names the binding.
	req, _ := http.NewRequest("PUT", st.s3URL("/bucket/k"), strings.NewReader("object body"))
	st.sign(t, req, st.ph, "s3", credsRegion, now)
	resp, err := st.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("control: got %d, want 200; fake saw %+v", resp.StatusCode, st.s3.Requests())
	}
	rec := lastHTTPRecord(t, st.h, "s3.aws.example", "/bucket/k")
	if len(rec.Secrets) != 1 || rec.Secrets[0].Where != "aws-sigv4:s3/"+credsRegion {
		t.Errorf("control: got audit secrets %+v, want the aws binding", rec.Secrets)
	}
	if got, _ := st.s3.Object("/bucket/k"); string(got) != "object body" {
		t.Errorf("control: got stored %q", got)
	}
	replayable := func() *http.Request {
		r, _ := http.NewRequest("GET", st.s3URL("/bucket/k"), nil)
		st.sign(t, r, st.ph, "s3", credsRegion, now.Add(time.Second))
		return r
	}()

	tests := []struct {
		name   string
		req    func() *http.Request
		status int
		reason string
		first  bool // the request is sent once before (the replay row)
	}{
		{name: "placeholder signature sent to another host", status: 403, reason: secrets.CodePlaceholderMisuse,
			req: func() *http.Request {
				r, _ := http.NewRequest("GET", fmt.Sprintf("https://evil.example:%d/bucket/k", st.evilPort), nil)
				st.sign(t, r, st.ph, "s3", credsRegion, now)
				return r
			}},
		{name: "signed for another region", status: 403, reason: secrets.CodeAWSSignature,
			req: func() *http.Request {
				r, _ := http.NewRequest("GET", st.s3URL("/bucket/k"), nil)
				st.sign(t, r, st.ph, "s3", "us-west-2", now)
				return r
			}},
		{name: "signed for another service", status: 403, reason: secrets.CodeAWSSignature,
			req: func() *http.Request {
				r, _ := http.NewRequest("GET", st.s3URL("/bucket/k"), nil)
				st.sign(t, r, st.ph, "sts", credsRegion, now)
				return r
			}},
		{name: "signed for another host, sent to the bound one", status: 403, reason: secrets.CodeAWSSignature,
			req: func() *http.Request {
				r, _ := http.NewRequest("GET", fmt.Sprintf("https://evil.example:%d/bucket/k", st.s3Port), nil)
				st.sign(t, r, st.ph, "s3", credsRegion, now)
				r.URL.Host, r.Host = fmt.Sprintf("s3.aws.example:%d", st.s3Port), ""
				return r
			}},
		{name: "replayed signature", status: 403, reason: secrets.CodeAWSReplay, first: true,
			req: func() *http.Request { return replayable.Clone(context.Background()) }},
		{name: "stale date", status: 403, reason: secrets.CodeAWSStale,
			req: func() *http.Request {
				r, _ := http.NewRequest("GET", st.s3URL("/bucket/k"), nil)
				st.sign(t, r, st.ph, "s3", credsRegion, now.Add(-20*time.Minute))
				return r
			}},
		{name: "presigned URL handed to another host", status: 403, reason: secrets.CodePlaceholderMisuse,
			req: func() *http.Request {
				r, _ := http.NewRequest("GET", st.s3URL("/bucket/k?X-Amz-Expires=60"), nil)
				u, _, err := v4.NewSigner().PresignHTTP(context.Background(), st.ph, r, "UNSIGNED-PAYLOAD", "s3", credsRegion, now,
					func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
				if err != nil {
					t.Fatal(err)
				}
				u = strings.Replace(u, fmt.Sprintf("s3.aws.example:%d", st.s3Port), fmt.Sprintf("evil.example:%d", st.evilPort), 1)
				r, _ = http.NewRequest("GET", u, nil)
				return r
			}},
		{name: "secret key placeholder in a body", status: 403, reason: secrets.CodePlaceholderMisuse,
			req: func() *http.Request {
				r, _ := http.NewRequest("PUT", st.s3URL("/bucket/leak"), strings.NewReader("key="+st.ph.SecretAccessKey))
				st.sign(t, r, st.ph, "s3", credsRegion, now)
				return r
			}},
		{name: "unsigned request to the bound host", status: 403, reason: secrets.CodePlaceholderRequired,
			req: func() *http.Request {
				r, _ := http.NewRequest("GET", st.s3URL("/bucket/k"), nil)
				return r
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := tt.req()
			if tt.first {
				first, err := st.client.Do(replayable)
				if err != nil || first.StatusCode != http.StatusOK {
					t.Fatalf("first send: got %v %v, want 200", first, err)
				}
				first.Body.Close()
			}
			before := st.seen()
			resp, err := st.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("got %d %s, want %d", resp.StatusCode, body, tt.status)
			}
			rec := auditOf(t, st.h, resp)
			if !audittest.HasReason(rec, tt.reason) {
				t.Errorf("got audit record %+v, want reason %s", rec, tt.reason)
			}
			if got := st.seen() - before; got != 0 {
				t.Errorf("the fakes saw %d requests, want 0", got)
			}
		})
	}
}

// TestRedTeamAWSReflectedKeyScrubbed: the upstream's error names the real
// access key id (as S3's SignatureDoesNotMatch does); the sandbox gets it
// scrubbed, and the audit record counts the scrub.
func TestRedTeamAWSReflectedKeyScrubbed(t *testing.T) {
	st := newAWSSetup(t)
	// Signed over a payload hash that is not the body's: the gateway
	// verifies and re-signs it, the fake refuses the hash and names its key.
	req, _ := http.NewRequest("PUT", st.s3URL("/bucket/x"), strings.NewReader("body"))
	wrong := sha256Hex([]byte("another body"))
	req.Header.Set("X-Amz-Content-Sha256", wrong)
	if err := v4.NewSigner().SignHTTP(context.Background(), st.ph, req, wrong, "s3", credsRegion,
		time.Now().UTC(), func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }); err != nil {
		t.Fatal(err)
	}
	resp, err := st.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !bytes.Contains(body, []byte("SignatureDoesNotMatch")) {
		t.Fatalf("got %d %s, want the fake's 403", resp.StatusCode, body)
	}
	if bytes.Contains(body, []byte(credsKeyID)) || !bytes.Contains(body, []byte(audit.Redacted)) {
		t.Errorf("the real access key id reached the sandbox: %s", body)
	}
	rec := lastHTTPRecord(t, st.h, "s3.aws.example", "/bucket/x")
	if len(rec.Secrets) != 1 || rec.Secrets[0].Scrubbed == 0 {
		t.Errorf("got audit secrets %+v, want one scrub counted", rec.Secrets)
	}
}

// TestAWSLargeUpload: a 6 MB PUT signed UNSIGNED-PAYLOAD (as the aws CLI
// sends it over HTTPS), with and without Expect: 100-continue, is re-signed
// and stored. Regression: the client that waits for 100 Continue longer than
// body_scan_timeout (the aws CLI waits without limit) was refused 408: the
// body scan before policy waited for a body the client held back.
func TestAWSLargeUpload(t *testing.T) {
	st := newAWSSetup(t, func(c *Config) { c.BodyScanTimeout = 3 * time.Second })
	body := bytes.Repeat([]byte("0123456789abcdef"), 6<<20/16)
	for i, expect := range []bool{false, true} {
		t.Run(fmt.Sprintf("expect=%v", expect), func(t *testing.T) {
			path := fmt.Sprintf("/bucket/big%d", i)
			req, _ := http.NewRequest("PUT", st.s3URL(path), bytes.NewReader(body))
			req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
			if expect {
				req.Header.Set("Expect", "100-continue")
				st.client.Transport.(*http.Transport).ExpectContinueTimeout = time.Minute
			}
			if err := v4.NewSigner().SignHTTP(context.Background(), st.ph, req, "UNSIGNED-PAYLOAD", "s3", credsRegion,
				time.Now().UTC().Add(time.Duration(i)*time.Second), func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }); err != nil {
				t.Fatal(err)
			}
			resp, err := st.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("got %d %s, want 200", resp.StatusCode, b)
			}
			if got, _ := st.s3.Object(path); !bytes.Equal(got, body) {
				t.Errorf("stored %d bytes, want %d", len(got), len(body))
			}
		})
	}
}

// TestTokenClientGuarded: the gateway's own token calls go through the
// guarded dialer: an allowed upstream answers; a name that resolves to the
// metadata service or a private address is refused before any dial, and
// plain HTTP is refused.
func TestTokenClientGuarded(t *testing.T) {
	pki := newTestPKI(t)
	cert := pki.leaf(t, "sts.aws.example")
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "sts") }), &cert)
	res := names("sts.aws.example")
	res["metadata.example"] = []netip.Addr{netip.MustParseAddr("169.254.169.254")}
	res["private.example"] = []netip.Addr{netip.MustParseAddr("10.1.2.3")}
	h := newHarness(t, policytest.Allow(), res, pki)
	h.allowUpstreams(up)
	c := h.g.TokenClient()

	resp, err := c.Get(fmt.Sprintf("https://sts.aws.example:%d/", up.port))
	if err != nil {
		t.Fatalf("allowed upstream: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "sts" {
		t.Errorf("got %q, want the upstream's answer", b)
	}
	for _, u := range []string{"https://metadata.example/latest/meta-data/", "https://private.example/",
		"https://169.254.169.254/", fmt.Sprintf("http://sts.aws.example:%d/", up.port)} {
		if resp, err := c.Get(u); err == nil {
			resp.Body.Close()
			t.Errorf("%s: got %d, want a refusal", u, resp.StatusCode)
		}
	}
	for _, a := range append(h.dialer.dialedAddrs(), h.dialer.refusedAddrs()...) {
		if !strings.HasPrefix(a, "127.0.0.1:") {
			t.Errorf("the dial function saw %s; the guard must refuse it first", a)
		}
	}
}

// TestOAuthThroughGateway: an oauth binding's token is minted by the gateway
// itself (TokenClient, through the guarded dialer) from a token endpoint the
// sandbox's policy does not allow, and injected; the upstream gets the
// minted token, the sandbox never the client secret. When the token endpoint
// refuses, the sandbox gets a 503 naming the binding and the endpoint's
// error code, the audit record is a secret_unavailable failure, and the
// upstream sees nothing.
func TestOAuthThroughGateway(t *testing.T) {
	const clientSecret = "oauth-CLIENT-secret-0123456789"
	pki := newTestPKI(t)
	cert := pki.leaf(t, "auth.example", "api.oauth.example", "bad.oauth.example")
	var mints atomic.Int64
	auth := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, sec, _ := r.BasicAuth()
		if r.URL.Path != "/token" || sec != clientSecret {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"invalid_client"}`)
			return
		}
		fmt.Fprintf(w, `{"access_token":"minted-%d-abcdefghijkl","token_type":"Bearer","expires_in":3600}`, mints.Add(1))
	}), &cert)
	api := newEchoUpstream(t, &cert)
	f := filepath.Join(t.TempDir(), "cs")
	os.WriteFile(f, []byte(clientSecret), 0o600)
	cfg, err := secrets.Parse([]byte(fmt.Sprintf(`secrets:
  - id: cs
    file: %s
bindings:
  - secret: cs
    sandboxes: {ids: [sb-test]}
    host: api.oauth.example
    port: %d
    template: "Bearer {{value}}"
    oauth: {token_url: "https://auth.example:%d/token", grant: client_credentials, client_id: airlock}
  - secret: cs
    sandboxes: {ids: [sb-test]}
    host: bad.oauth.example
    port: %d
    template: "Bearer {{value}}"
    oauth: {token_url: "https://auth.example:%d/refused", grant: client_credentials, client_id: airlock}
`, f, api.Port, auth.port, api.Port, auth.port)))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	inj, err := secrets.New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"api.oauth.example", "bad.oauth.example"}
	res := names(append(hosts, "auth.example")...)
	h := newHarnessLogger(t, policytest.Allow(hosts...), res, pki, logger, func(c *Config) { c.Injector = inj })
	inj.SetTokenClient(h.g.TokenClient())
	h.allowUpstreams(auth)
	h.dialer.allow(api.Addr)
	roots := x509.NewCertPool()
	roots.AddCert(pki.upCA)
	mitm, _ := LoadCACert(pki.mitmCert)
	roots.AddCert(mitm)
	c := clientVia(h.explicit, roots)

	for i := 0; i < 2; i++ {
		resp, body, all := do(t, c, "GET", fmt.Sprintf("https://api.oauth.example:%d/v1", api.Port), nil, "")
		if resp.StatusCode != http.StatusOK || strings.Contains(all, clientSecret) {
			t.Fatalf("got %d %s, want 200 and no client secret", resp.StatusCode, body)
		}
	}
	if got := api.Last().Header.Get("Authorization"); got != "Bearer minted-1-abcdefghijkl" || mints.Load() != 1 {
		t.Errorf("upstream got %q after %d mints, want the first minted token, minted once", got, mints.Load())
	}
	before := api.Received.Load()
	resp, body, all := do(t, c, "GET", fmt.Sprintf("https://bad.oauth.example:%d/v1", api.Port), nil, "")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "bindings[1]") || strings.Contains(all, clientSecret) {
		t.Fatalf("refused token: got %d %q, want 503 naming bindings[1] and no secret", resp.StatusCode, body)
	}
	rec := auditOf(t, h, resp)
	if rec.Status != http.StatusServiceUnavailable || !strings.HasPrefix(rec.Error, ReasonSecretUnavailable) ||
		!strings.Contains(rec.Error, "bindings[1]") || strings.Contains(rec.Error, clientSecret) {
		t.Errorf("got audit record %+v, want a 503 failure %s naming bindings[1]", rec, ReasonSecretUnavailable)
	}
	if api.Received.Load() != before {
		t.Error("the upstream saw the request whose token could not be minted")
	}
	if strings.Contains(logs.String(), clientSecret) {
		t.Error("operational logs carry the client secret")
	}
}

// TestAWSOverHTTP2: a client that speaks HTTP/2 to the gateway gets its
// SDK-signed requests re-signed the same way (the Host it signed and the
// :authority the gateway sends agree).
func TestAWSOverHTTP2(t *testing.T) {
	st := newAWSSetup(t)
	tr := st.client.Transport.(*http.Transport).Clone()
	tr.ForceAttemptHTTP2 = true
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	now := time.Now().UTC()
	for i, method := range []string{"PUT", "GET"} {
		var body io.Reader
		if method == "PUT" {
			body = strings.NewReader("over h2")
		}
		req, _ := http.NewRequest(method, st.s3URL("/bucket/h2"), body)
		st.sign(t, req, st.ph, "s3", credsRegion, now.Add(time.Duration(i)*time.Second))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: got %s %d %s, want HTTP/2 200; fake saw %+v", method, resp.Proto, resp.StatusCode, b, st.s3.Requests())
		}
		if method == "GET" && string(b) != "over h2" {
			t.Errorf("GET: got %q", b)
		}
	}
}
