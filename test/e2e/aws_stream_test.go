package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/secrets"
	"github.com/airlock-dev/airlock/test/fakeaws"
)

// TestRootAWSCLIStreamingChecksum: the aws CLI with --checksum-algorithm
// streams its uploads as aws-chunked bodies (STREAMING-UNSIGNED-PAYLOAD-
// TRAILER: chunks, then the checksum as a trailer inside the body, over an
// HTTP/1.1 chunked transfer, transfer-encoding signed): a 3 MB PutObject
// with CRC32 (streamed past the gateway's body scan), a 200 kB one with
// SHA256 (buffered by it) and a multipart upload whose parts carry SHA256,
// from a sandbox holding only placeholders.
// The gateway re-signs the header and passes the stream as it is; the fake
// S3 checks the real signature, decodes the chunks, and checks the trailer's
// checksum and the decoded length against what it decoded. The objects come
// back whole.
func TestRootAWSCLIStreamingChecksum(t *testing.T) {
	e := newEnv(t, "")
	requireTool(t, "/usr/bin/aws")
	const (
		keyID  = "AKIAE2ESTREAMKEY0001"
		secret = "e2eSTREAMawsSecretKey/0123456789+abcdefgh"
		region = "eu-west-3"
	)
	tag := strings.TrimPrefix(sandboxID("c"), "e2e-c-")
	s3Host := "s3-" + tag + ".aws.example.test"
	s3 := fakeaws.New(fakeaws.Config{Service: "s3", Region: region, AccessKeyID: keyID, Secret: secret})
	if _, err := w.net.AddHost([]string{s3Host}, s3); err != nil {
		t.Fatal(err)
	}
	secretsFile := filepath.Join(e.dir, "secrets.yaml")
	if err := os.WriteFile(secretsFile, []byte(`secrets:
  - id: aws
    env: E2E_AWS_SECRET
bindings:
  - secret: aws
    sandboxes: {labels: {e2e: aws-stream}}
    host: `+s3Host+`
    aws_sigv4: {access_key_id: `+keyID+`, region: `+region+`, service: s3}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	res := e.sh([]string{"--id", sandboxID("awsstream"), "--label", "e2e=aws-stream", "--secrets", secretsFile,
		"--allow", s3Host}, `
set -e
export HOME=/tmp AWS_DEFAULT_REGION=`+region+` AWS_CONFIG_FILE=/tmp/awsconfig AWS_PAGER= AWS_EC2_METADATA_DISABLED=true
printf '[default]\ns3 =\n  addressing_style = path\n  multipart_threshold = 5MB\n  multipart_chunksize = 5MB\n' > /tmp/awsconfig
head -c 3000000 /dev/urandom > /tmp/one.bin
head -c 200000 /dev/urandom > /tmp/small.bin
head -c 5300000 /dev/urandom > /tmp/p1.bin
head -c 1000000 /dev/urandom > /tmp/p2.bin
S3="/usr/bin/aws --endpoint-url https://`+s3Host+` s3api"
$S3 put-object --bucket bucket --key one.bin --body /tmp/one.bin --checksum-algorithm CRC32 >/dev/null
$S3 put-object --bucket bucket --key small.bin --body /tmp/small.bin --checksum-algorithm SHA256 >/dev/null
id=$($S3 create-multipart-upload --bucket bucket --key parts.bin --checksum-algorithm SHA256 --output text --query UploadId)
e1=$($S3 upload-part --bucket bucket --key parts.bin --upload-id "$id" --part-number 1 --body /tmp/p1.bin --checksum-algorithm SHA256 --output text --query ETag)
e2=$($S3 upload-part --bucket bucket --key parts.bin --upload-id "$id" --part-number 2 --body /tmp/p2.bin --checksum-algorithm SHA256 --output text --query ETag)
$S3 complete-multipart-upload --bucket bucket --key parts.bin --upload-id "$id" --multipart-upload "Parts=[{ETag=$e1,PartNumber=1},{ETag=$e2,PartNumber=2}]" >/dev/null
cat /tmp/p1.bin /tmp/p2.bin > /tmp/parts.bin
for f in one small parts; do /usr/bin/aws --endpoint-url https://`+s3Host+` s3 cp --only-show-errors s3://bucket/$f.bin /tmp/$f.down; cmp /tmp/$f.bin /tmp/$f.down; done
echo same=yes
`, "E2E_AWS_SECRET="+secret)
	if res.code != 0 {
		t.Log(dump(e.records()))
	}
	wantCode(t, res, 0)
	wantKV(t, kv(res.stdout), "same", "yes", res)

	streamed := map[string]int{} // trailer checksum -> verified aws-chunked uploads
	for _, r := range s3.Requests() {
		if !r.Verified {
			t.Errorf("fake s3 refused %s %s: %s", r.Method, r.URL, r.Err)
		}
		all := r.URL + " " + strings.ToLower(strings.Join(flatten(r.Header), " "))
		if strings.Contains(all, secrets.PlaceholderPrefix) {
			t.Errorf("fake s3 saw a placeholder in %s %s", r.Method, r.URL)
		}
		if r.Method == "PUT" && r.Header.Get("X-Amz-Content-Sha256") == "STREAMING-UNSIGNED-PAYLOAD-TRAILER" &&
			strings.Contains(r.Header.Get("Content-Encoding"), "aws-chunked") && r.Checksum != "" {
			streamed[r.Checksum]++
		}
	}
	if streamed["x-amz-checksum-crc32"] != 1 || streamed["x-amz-checksum-sha256"] != 3 {
		t.Errorf("verified aws-chunked uploads by trailer checksum: got %v, want 1 crc32 (put-object) and 3 sha256 (a small put-object, two parts)", streamed)
	}
	auditBytes, err := os.ReadFile(e.audit)
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"sandbox output": res.stdout, "airlock stderr": res.stderr, "audit log": string(auditBytes)} {
		for _, form := range secrets.CanaryForms(secret) {
			if strings.Contains(text, form) {
				t.Errorf("%s holds a form of the real secret (%q)", name, form)
			}
		}
	}
}
