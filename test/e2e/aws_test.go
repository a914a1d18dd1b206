package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/secrets"
	"github.com/airlock-dev/airlock/test/fakeaws"
)

// TestRootAWSCLIPlaceholders: Debian's aws CLI in a sandbox that holds only
// placeholder AWS credentials uploads a 12 MB object in 5 MB parts (a
// multipart upload), downloads it in ranged GETs (206 answers pass for
// re-signed requests), and asks STS who it is. The fake S3 and STS endpoints accept only the REAL
// credentials (checked with the AWS SDK for Go's signer): the gateway
// verified each request's placeholder signature and re-signed it. The real
// secret appears nowhere in the sandbox's environment, its output, airlock's
// output or the audit log, and the fakes never saw a placeholder.
func TestRootAWSCLIPlaceholders(t *testing.T) {
	e := newEnv(t, "")
	requireTool(t, "/usr/bin/aws")
	const (
		keyID  = "AKIAE2EREALKEY000001"
		secret = "e2eREALawsSecretKey/0123456789+abcdefghijk"
		region = "eu-west-3"
	)
	tag := strings.TrimPrefix(sandboxID("a"), "e2e-a-")
	s3Host, stsHost := "s3-"+tag+".aws.example.test", "sts-"+tag+".aws.example.test"
	s3 := fakeaws.New(fakeaws.Config{Service: "s3", Region: region, AccessKeyID: keyID, Secret: secret})
	sts := fakeaws.New(fakeaws.Config{Service: "sts", Region: region, AccessKeyID: keyID, Secret: secret})
	if _, err := w.net.AddHost([]string{s3Host}, s3); err != nil {
		t.Fatal(err)
	}
	if _, err := w.net.AddHost([]string{stsHost}, sts); err != nil {
		t.Fatal(err)
	}
	secretsFile := filepath.Join(e.dir, "secrets.yaml")
	if err := os.WriteFile(secretsFile, []byte(`secrets:
  - id: aws
    env: E2E_AWS_SECRET
bindings:
  - secret: aws
    sandboxes: {labels: {e2e: aws}}
    host: `+s3Host+`
    aws_sigv4: {access_key_id: `+keyID+`, region: `+region+`, service: s3}
  - secret: aws
    sandboxes: {labels: {e2e: aws}}
    host: `+stsHost+`
    aws_sigv4: {access_key_id: `+keyID+`, region: `+region+`, service: sts}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	res := e.sh([]string{"--id", sandboxID("aws"), "--label", "e2e=aws", "--secrets", secretsFile,
		"--allow", s3Host, "--allow", stsHost}, `
set -e
REAL_HOME=$HOME
export HOME=/tmp AWS_DEFAULT_REGION=`+region+` AWS_CONFIG_FILE=/tmp/awsconfig AWS_PAGER= AWS_EC2_METADATA_DISABLED=true
printf '[default]\ns3 =\n  addressing_style = path\n  multipart_threshold = 5MB\n  multipart_chunksize = 5MB\n' > /tmp/awsconfig
env | grep '^AWS_' | sort
head -c 12000000 /dev/urandom > /tmp/up.bin
/usr/bin/aws --debug --endpoint-url https://`+s3Host+` s3 cp --only-show-errors /tmp/up.bin s3://bucket/up.bin 2>/tmp/dbg || { grep -v "^\s*$" /tmp/dbg | grep -iE "expect|continue|header|send|status|timeout|error" | tail -60 >&2; exit 1; }
/usr/bin/aws --endpoint-url https://`+s3Host+` s3 cp --only-show-errors s3://bucket/up.bin /tmp/down.bin
cmp /tmp/up.bin /tmp/down.bin && echo same=yes
echo "account=$(/usr/bin/aws --endpoint-url https://`+stsHost+` sts get-caller-identity --output text --query Account)"
# The same placeholders from ~/.aws/credentials, with the variables unset
# (a second later: the same request signed in the same second is a replay).
sleep 1
echo "file_placeholders=$(grep -c "= airlock-ph-" $REAL_HOME/.aws/credentials)"; cat $REAL_HOME/.aws/credentials
echo "file_account=$(env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_SESSION_TOKEN AWS_SHARED_CREDENTIALS_FILE=$REAL_HOME/.aws/credentials /usr/bin/aws --endpoint-url https://`+stsHost+` sts get-caller-identity --output text --query Account)"
`, "E2E_AWS_SECRET="+secret)
	if res.code != 0 {
		t.Log(dump(e.records()))
	}
	wantCode(t, res, 0)
	m := kv(res.stdout)
	wantKV(t, m, "same", "yes", res)
	wantKV(t, m, "account", "123456789012", res)
	wantKV(t, m, "file_account", "123456789012", res)
	wantKV(t, m, "file_placeholders", "2", res)
	if n := s3.Parts(); n < 3 {
		t.Errorf("fake s3 received %d upload parts, want 3 (a multipart upload)", n)
	}
	ranged := 0
	for _, r := range s3.Requests() {
		if r.Method == "GET" && r.Header.Get("Range") != "" {
			ranged++
		}
	}
	if ranged < 2 {
		t.Errorf("fake s3 served %d ranged GETs, want the CLI's multipart download", ranged)
	}
	for _, k := range []string{secrets.EnvAWSAccessKeyID, secrets.EnvAWSSecretAccessKey} {
		if !strings.HasPrefix(m[k], secrets.PlaceholderPrefix) {
			t.Errorf("%s in the sandbox: got %q, want a placeholder", k, m[k])
		}
	}

	// The fakes verified every request with the real key and never saw a
	// placeholder.
	for name, fake := range map[string]*fakeaws.Server{"s3": s3, "sts": sts} {
		reqs := fake.Requests()
		if len(reqs) == 0 {
			t.Errorf("fake %s saw no request", name)
		}
		for _, r := range reqs {
			if !r.Verified {
				t.Errorf("fake %s refused %s %s: %s", name, r.Method, r.URL, r.Err)
			}
			all := r.URL + " " + strings.ToLower(strings.Join(flatten(r.Header), " "))
			if strings.Contains(all, secrets.PlaceholderPrefix) {
				t.Errorf("fake %s saw a placeholder in %s %s", name, r.Method, r.URL)
			}
		}
	}
	recs := e.records()
	put := mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: s3Host, method: "PUT"})
	if len(put.Secrets) != 1 || put.Secrets[0].Where != "aws-sigv4:s3/"+region || put.Secrets[0].Fingerprint == "" {
		t.Errorf("upload's audit secrets: got %+v, want the aws binding with a fingerprint", put.Secrets)
	}
	mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: stsHost, method: "POST"})

	auditBytes, err := os.ReadFile(e.audit)
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"sandbox output": res.stdout, "airlock stderr": res.stderr, "audit log": string(auditBytes),
	} {
		for _, form := range secrets.CanaryForms(secret) {
			if strings.Contains(text, form) {
				t.Errorf("%s holds a form of the real secret (%q)", name, form)
			}
		}
	}
}

func flatten(h map[string][]string) []string {
	var out []string
	for k, vs := range h {
		out = append(out, k+": "+strings.Join(vs, ","))
	}
	return out
}

// TestRootAWSAssumeRole: the binding holds a long-term key the fake S3 does
// not accept; the gateway assumes a role with it at the fake STS (through its
// guarded dialer), per sandbox, with a session policy naming the sandbox's
// label, and re-signs the aws CLI's requests with the temporary credentials,
// which the fake S3 accepts. The sandbox holds placeholders only.
func TestRootAWSAssumeRole(t *testing.T) {
	e := newEnv(t, "")
	requireTool(t, "/usr/bin/aws")
	const (
		keyID  = "AKIAE2ELONGTERMKEY01"
		secret = "e2eLONGtermSecretKey/0123456789+abcdefghij"
		region = "eu-west-3"
	)
	tag := strings.TrimPrefix(sandboxID("r"), "e2e-r-")
	s3Host, stsHost := "s3-"+tag+".aws.example.test", "sts-"+tag+".aws.example.test"
	keys := &fakeaws.Keys{}
	s3 := fakeaws.New(fakeaws.Config{Service: "s3", Region: region, AccessKeyID: "AKIANOTACCEPTEDHERE1", Secret: "unused-secret", Keys: keys})
	sts := fakeaws.New(fakeaws.Config{Service: "sts", Region: region, AccessKeyID: keyID, Secret: secret, Keys: keys})
	if _, err := w.net.AddHost([]string{s3Host}, s3); err != nil {
		t.Fatal(err)
	}
	if _, err := w.net.AddHost([]string{stsHost}, sts); err != nil {
		t.Fatal(err)
	}
	secretsFile := filepath.Join(e.dir, "secrets.yaml")
	if err := os.WriteFile(secretsFile, []byte(`secrets:
  - id: aws
    env: E2E_AWS_SECRET
bindings:
  - secret: aws
    sandboxes: {labels: {e2e: aws-role}}
    host: `+s3Host+`
    aws_sigv4:
      access_key_id: `+keyID+`
      region: `+region+`
      service: s3
      assume_role:
        role_arn: arn:aws:iam::123456789012:role/agent
        sts_host: `+stsHost+`
        session_policy: '{"Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"arn:aws:s3:::{{label.team}}/*"}]}'
`), 0o600); err != nil {
		t.Fatal(err)
	}
	id := sandboxID("awsrole")
	res := e.sh([]string{"--id", id, "--label", "e2e=aws-role", "--label", "team=red", "--secrets", secretsFile,
		"--allow", s3Host}, `
set -e
export HOME=/tmp AWS_DEFAULT_REGION=`+region+` AWS_CONFIG_FILE=/tmp/awsconfig AWS_PAGER= AWS_EC2_METADATA_DISABLED=true
printf '[default]\ns3 =\n  addressing_style = path\n' > /tmp/awsconfig
env | grep '^AWS_' | sort
echo hello-role > /tmp/up.txt
/usr/bin/aws --endpoint-url https://`+s3Host+` s3 cp --only-show-errors /tmp/up.txt s3://red/up.txt
/usr/bin/aws --endpoint-url https://`+s3Host+` s3 cp --only-show-errors s3://red/up.txt /tmp/down.txt
echo "got=$(cat /tmp/down.txt)"
`, "E2E_AWS_SECRET="+secret)
	wantCode(t, res, 0)
	m := kv(res.stdout)
	wantKV(t, m, "got", "hello-role", res)
	if !strings.HasPrefix(m[secrets.EnvAWSSessionToken], secrets.PlaceholderPrefix) {
		t.Errorf("AWS_SESSION_TOKEN in the sandbox: got %q, want a placeholder", m[secrets.EnvAWSSessionToken])
	}
	issued := sts.Issued()
	if len(issued) != 1 {
		t.Fatalf("AssumeRole calls: got %d, want 1 (cached across the two commands)", len(issued))
	}
	if is := issued[0]; is.Caller != keyID || is.Session != "airlock-"+id || !strings.Contains(is.Policy, "arn:aws:s3:::red/*") {
		t.Errorf("AssumeRole: got %+v, want the long-term key, session airlock-%s, the label in the policy", is, id)
	}
	for _, r := range s3.Requests() {
		if !r.Verified {
			t.Errorf("fake s3 refused %s %s: %s", r.Method, r.URL, r.Err)
		}
	}
	auditBytes, err := os.ReadFile(e.audit)
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"sandbox output": res.stdout, "airlock stderr": res.stderr, "audit log": string(auditBytes)} {
		for _, form := range secrets.CanaryForms(secret) {
			if strings.Contains(text, form) {
				t.Errorf("%s holds a form of the long-term secret (%q)", name, form)
			}
		}
	}
}
