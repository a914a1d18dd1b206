package secrets

import (
	"strings"
	"testing"
)

func TestAWSConfigErrors(t *testing.T) {
	base := "secrets:\n  - id: aws\n    env: AWS_REAL\n  - id: tok\n    env: TOK\nbindings:\n  - secret: aws\n    sandboxes: {ids: [sb-1]}\n    host: s3.example\n"
	tests := []struct {
		name, binding, want string
	}{
		{"ok", "    aws_sigv4: {access_key_id: AKIAEXAMPLE00000001, region: us-east-1, service: s3}\n", ""},
		{"ok with token", "    aws_sigv4: {access_key_id: ASIAEXAMPLE00000001, region: us-east-1, service: s3, session_token_secret: tok}\n", ""},
		{"template", "    template: \"Bearer {{value}}\"\n    aws_sigv4: {access_key_id: AKIAEXAMPLE00000001, region: us-east-1, service: s3}\n", "template and basic_user do not apply"},
		{"placeholder env", "    mode: require\n    placeholder_env: X\n    aws_sigv4: {access_key_id: AKIAEXAMPLE00000001, region: us-east-1, service: s3}\n", "placeholder_env does not apply"},
		{"default mode", "    mode: default\n    aws_sigv4: {access_key_id: AKIAEXAMPLE00000001, region: us-east-1, service: s3}\n", `mode "default"`},
		{"bad key id", "    aws_sigv4: {access_key_id: akia-lower, region: us-east-1, service: s3}\n", "access_key_id"},
		{"bad region", "    aws_sigv4: {access_key_id: AKIAEXAMPLE00000001, region: US East, service: s3}\n", "region"},
		{"no service", "    aws_sigv4: {access_key_id: AKIAEXAMPLE00000001, region: us-east-1}\n", "service"},
		{"unknown token secret", "    aws_sigv4: {access_key_id: AKIAEXAMPLE00000001, region: us-east-1, service: s3, session_token_secret: nope}\n", "session_token_secret"},
		{"unknown field", "    aws_sigv4: {access_key_id: AKIAEXAMPLE00000001, region: us-east-1, service: s3, secret_key: x}\n", "secret_key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(base + tt.binding))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

// TestAWSPlaceholders: an AWS binding plants the access key id and secret
// placeholders (and the session token's with a token), distinct, stable,
// and forgotten with the sandbox.
func TestAWSPlaceholders(t *testing.T) {
	cfg, err := Parse([]byte("secrets:\n  - id: aws\n    env: AWS_REAL\n  - id: tok\n    env: TOK\nbindings:\n" +
		"  - secret: aws\n    sandboxes: {ids: [sb-1]}\n    host: s3.example\n" +
		"    aws_sigv4: {access_key_id: ASIAEXAMPLE00000001, region: us-east-1, service: s3, session_token_secret: tok}\n" +
		"  - secret: aws\n    sandboxes: {ids: [sb-1]}\n    host: sts.example\n" +
		"    aws_sigv4: {access_key_id: ASIAEXAMPLE00000001, region: us-east-1, service: sts, session_token_secret: tok}\n"))
	if err != nil {
		t.Fatal(err)
	}
	in, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	sb := Sandbox{ID: "sb-1"}
	env, err := in.Placeholders(sb)
	if err != nil {
		t.Fatal(err)
	}
	if len(env) != 3 || env[EnvAWSAccessKeyID] == env[EnvAWSSecretAccessKey] || env[EnvAWSSessionToken] == "" {
		t.Fatalf("got %v, want three distinct placeholders", env)
	}
	again, _ := in.Placeholders(sb)
	if again[EnvAWSSecretAccessKey] != env[EnvAWSSecretAccessKey] {
		t.Errorf("placeholders changed between calls")
	}
	in.Forget(sb.ID)
	if in.lookupPlaceholder(sb.ID, awsSecretKey("aws")) != "" {
		t.Errorf("Forget kept the secret key placeholder")
	}
}

// TestAWSPlaceholderConflict: two AWS bindings with different secrets for
// one sandbox would need two values in AWS_ACCESS_KEY_ID: refused with an
// error naming the variable, rather than one silently winning.
func TestAWSPlaceholderConflict(t *testing.T) {
	cfg, err := Parse([]byte("secrets:\n  - id: a\n    env: A\n  - id: b\n    env: B\nbindings:\n" +
		"  - secret: a\n    sandboxes: {ids: [sb-1]}\n    host: s3.example\n    aws_sigv4: {access_key_id: AKIAEXAMPLE00000001, region: us-east-1, service: s3}\n" +
		"  - secret: b\n    sandboxes: {ids: [sb-1]}\n    host: sts.example\n    aws_sigv4: {access_key_id: AKIAEXAMPLE00000002, region: us-east-1, service: sts}\n"))
	if err != nil {
		t.Fatal(err)
	}
	in, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Placeholders(Sandbox{ID: "sb-1"}); err == nil || !strings.Contains(err.Error(), EnvAWSAccessKeyID) {
		t.Fatalf("got %v, want an error naming %s", err, EnvAWSAccessKeyID)
	}
}
