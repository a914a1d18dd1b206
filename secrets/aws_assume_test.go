package secrets

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/fakeaws"
)

// newAssumeRig: the sandbox's S3 requests are re-signed with temporary
// credentials the injector gets from the fake STS with the long-term key;
// the fake S3 accepts only those (the long-term key is not one of its keys).
func newAssumeRig(t *testing.T, policy string, labels map[string]string) (*awsRig, *fakeaws.Keys) {
	return newAssumeRigSTS(t, policy, labels, awsRealKeyID, awsRealSecret)
}

// newAssumeRigSTS: the fake STS accepts the key stsKeyID/stsSecret.
func newAssumeRigSTS(t *testing.T, policy string, labels map[string]string, stsKeyID, stsSecret string) (*awsRig, *fakeaws.Keys) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "aws-secret")
	if err := os.WriteFile(f, []byte(awsRealSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	pol := ""
	if policy != "" {
		pol = ", session_policy: '" + policy + "'"
	}
	cfg, err := Parse([]byte(fmt.Sprintf(`secrets:
  - id: aws
    file: %s
bindings:
  - secret: aws
    sandboxes: {ids: [sb-aws]}
    host: s3.fake.test
    aws_sigv4:
      access_key_id: %s
      region: %s
      service: s3
      assume_role: {role_arn: "arn:aws:iam::123456789012:role/agent", duration: 1h, sts_host: sts.fake.test%s}
`, f, awsRealKeyID, awsRegion, pol)))
	if err != nil {
		t.Fatal(err)
	}
	logger, logs := newLogSink(t, awsRealSecret)
	in, err := New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	r := &awsRig{in: in, sb: Sandbox{ID: "sb-aws", Labels: labels}, logs: logs}
	if r.ph, err = in.Placeholders(r.sb); err != nil {
		t.Fatal(err)
	}
	keys := &fakeaws.Keys{}
	r.serve(t,
		fakeaws.New(fakeaws.Config{Service: "s3", Region: awsRegion, AccessKeyID: "AKIANOTTHELONGTERM01", Secret: "unused-secret-value", Keys: keys}),
		fakeaws.New(fakeaws.Config{Service: "sts", Region: awsRegion, AccessKeyID: stsKeyID, Secret: stsSecret, Keys: keys}))
	in.SetTokenClient(r.client)
	return r, keys
}

func TestAWSAssumeRole(t *testing.T) {
	r, keys := newAssumeRig(t, `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"arn:aws:s3:::team-{{label.team}}/*"}]}`,
		map[string]string{"team": `red"x`})
	if r.ph[EnvAWSSessionToken] == "" {
		t.Fatal("no session token placeholder for an assume_role binding")
	}
	clock := time.Now().UTC()
	r.in.now = func() time.Time { return clock }
	put := func(name string) {
		t.Helper()
		body := []byte("object " + name)
		req, _ := http.NewRequest("PUT", "https://s3.fake.test/bucket/"+name, bytes.NewReader(body))
		r.sdkSign(t, req, sha(body), "s3", clock)
		resp, _, err := r.send(t, req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: got %v %v, want 200; fake: %+v", name, resp, err, r.s3.Requests())
		}
	}
	put("a")
	put("b")
	issued := r.sts.Issued()
	if len(issued) != 1 {
		t.Fatalf("got %d AssumeRole calls for two requests, want 1 (cached)", len(issued))
	}
	is := issued[0]
	if is.Caller != awsRealKeyID || is.Session != "airlock-sb-aws" || is.Duration != time.Hour ||
		!strings.Contains(is.Policy, `team-red\"x/*`) {
		t.Errorf("AssumeRole: got %+v, want signed by the long-term key, session airlock-sb-aws, 1h, the label in the policy", is)
	}
	// 56 minutes on, less than AssumeRefreshBefore is left: fresh credentials.
	clock = clock.Add(56 * time.Minute)
	keys.Expire(is.KeyID)
	put("c")
	if n := len(r.sts.Issued()); n != 2 {
		t.Fatalf("got %d AssumeRole calls after the credentials neared expiry, want 2", n)
	}
	// Forget drops the sandbox's credentials.
	r.in.Forget(r.sb.ID)
	if r.ph, _ = r.in.Placeholders(r.sb); r.ph[EnvAWSSessionToken] == "" {
		t.Fatal("no placeholders after Forget")
	}
	put("d")
	if n := len(r.sts.Issued()); n != 3 {
		t.Fatalf("got %d AssumeRole calls after Forget, want 3", n)
	}
	for _, s := range r.s3.Requests() {
		if !s.Verified {
			t.Errorf("fake s3 refused %s: %s", s.URL, s.Err)
		}
	}
}

// TestAWSAssumeRoleFailure: STS refuses, or the policy names a label the
// sandbox lacks: a 503 naming the binding and the role, never a key, and
// nothing reaches S3.
func TestAWSAssumeRoleFailure(t *testing.T) {
	tests := []struct {
		name     string
		policy   string
		labels   map[string]string
		otherKey bool // the fake STS knows another long-term key
		break_   func(r *awsRig)
		want     string
	}{
		{name: "sts refuses the caller", otherKey: true, want: "sts answered 403"},
		{name: "no token client", break_: func(r *awsRig) { r.in.SetTokenClient(nil) }, want: "no token client"},
		{name: "missing label", policy: `{"Resource":"{{label.team}}"}`, want: `label "team"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keyID, secret := awsRealKeyID, awsRealSecret
			if tt.otherKey {
				keyID, secret = "AKIAOTHER00000000001", "other-secret-x"
			}
			r, _ := newAssumeRigSTS(t, tt.policy, tt.labels, keyID, secret)
			if tt.break_ != nil {
				tt.break_(r)
			}
			req, _ := http.NewRequest("GET", "https://s3.fake.test/bucket/x", nil)
			r.sdkSign(t, req, emptySHA256, "s3", time.Now().UTC())
			_, _, err := r.send(t, req)
			var u *UnavailableError
			if !errors.As(err, &u) || HTTPStatus(err) != http.StatusServiceUnavailable {
				t.Fatalf("got %v, want an UnavailableError (503)", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "bindings[0]") || !strings.Contains(msg, "role/agent") || !strings.Contains(msg, tt.want) {
				t.Errorf("got %q, want the binding, the role and %q named", msg, tt.want)
			}
			if strings.Contains(msg, awsRealSecret) {
				t.Error("the error carries the secret")
			}
			if n := len(r.s3.Requests()); n != 0 {
				t.Errorf("s3 saw %d requests, want 0", n)
			}
		})
	}
}
