package config

import (
	"strings"
	"testing"
	"time"
)

// TestDecodeBundle: policy.bundle decodes with its defaults, and each bad
// setting is refused naming its field.
func TestDecodeBundle(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string
		check   func(t *testing.T, b *Bundle)
	}{
		{name: "defaults", yaml: "policy: {bundle: {url: https://b.example/airlock.tar.gz}}", check: func(t *testing.T, b *Bundle) {
			if time.Duration(b.MinDelay) != DefaultBundleMinDelay || time.Duration(b.MaxDelay) != DefaultBundleMaxDelay ||
				time.Duration(b.StartTimeout) != DefaultBundleStartTimeout || b.PersistDir != DefaultBundlePersistDir || b.LongPollingTimeout != 0 {
				t.Fatalf("got %+v, want the defaults", b)
			}
		}},
		{name: "full", yaml: `
policy:
  bundle:
    url: https://b.example/airlock.tar.gz
    min_delay: 10s
    max_delay: 20s
    long_polling_timeout: 60s
    persist_dir: /var/lib/alk
    token_secret: tok
    signing: {public_key_file: /etc/airlock/b.pub, key_id: prod, scope: airlock}
secrets: {file: /etc/airlock/secrets.yaml}
`, check: func(t *testing.T, b *Bundle) {
			if time.Duration(b.MinDelay) != 10*time.Second || time.Duration(b.LongPollingTimeout) != time.Minute || b.Signing.KeyID != "prod" || b.TokenSecret != "tok" {
				t.Fatalf("got %+v", b)
			}
		}},
		{name: "absent", yaml: "policy: {mode: enforce}", check: func(t *testing.T, b *Bundle) {
			if b != nil {
				t.Fatalf("got %+v, want nil", b)
			}
		}},
		{name: "unknown field", yaml: "policy: {bundle: {url: https://b.example/x, interval: 5s}}", wantErr: "field interval not found"},
		{name: "no url", yaml: "policy: {bundle: {min_delay: 5s, max_delay: 6s}}", wantErr: "policy.bundle.url: empty"},
		{name: "with dir", yaml: "policy: {dir: ./p, bundle: {url: https://b.example/x}}", wantErr: "cannot be combined with policy.dir"},
		{name: "credentials", yaml: "policy: {bundle: {url: https://u:p@b.example/x}}", wantErr: "carries credentials"},
		{name: "scheme", yaml: "policy: {bundle: {url: file:///etc/b.tar.gz}}", wantErr: "scheme must be http or https"},
		{name: "fraction", yaml: "policy: {bundle: {url: https://b.example/x, min_delay: 1500ms, max_delay: 2s}}", wantErr: "policy.bundle.min_delay: 1.5s"},
		{name: "only max", yaml: "policy: {bundle: {url: https://b.example/x, max_delay: 2s}}", wantErr: "policy.bundle.min_delay"},
		{name: "max below min", yaml: "policy: {bundle: {url: https://b.example/x, min_delay: 9s, max_delay: 2s}}", wantErr: "below policy.bundle.min_delay"},
		{name: "token without secrets", yaml: "policy: {bundle: {url: https://b.example/x, token_secret: t}}", wantErr: "secrets.file is not set"},
		{name: "token over http", yaml: "policy: {bundle: {url: http://b.example/x, token_secret: t}}\nsecrets: {file: /s.yaml}", wantErr: "must be https"},
		{name: "token over loopback http", yaml: "policy: {bundle: {url: http://127.0.0.1:8181/x, token_secret: t}}\nsecrets: {file: /s.yaml}"},
		{name: "two keys", yaml: "policy: {bundle: {url: https://b.example/x, signing: {public_key: k, public_key_file: f, key_id: a}}}", wantErr: "exactly one of public_key"},
		{name: "no key", yaml: "policy: {bundle: {url: https://b.example/x, signing: {key_id: a}}}", wantErr: "exactly one of public_key"},
		{name: "no key id", yaml: "policy: {bundle: {url: https://b.example/x, signing: {public_key_file: f}}}", wantErr: "signing.key_id: empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Decode(strings.NewReader(tt.yaml))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.check != nil {
				tt.check(t, c.Policy.Bundle)
			}
		})
	}
}
