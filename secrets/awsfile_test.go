package secrets

import (
	"strings"
	"testing"
)

func TestAWSCredentialsFileFor(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
		ok   bool
	}{
		{"none", map[string]string{"API_TOKEN": "airlock-ph-x"}, "", false},
		{"key id only", map[string]string{EnvAWSAccessKeyID: "airlock-ph-a"}, "", false},
		{"long-term", map[string]string{EnvAWSAccessKeyID: "airlock-ph-a", EnvAWSSecretAccessKey: "airlock-ph-b"},
			"[default]\naws_access_key_id = airlock-ph-a\naws_secret_access_key = airlock-ph-b\n", true},
		{"session", map[string]string{EnvAWSAccessKeyID: "airlock-ph-a", EnvAWSSecretAccessKey: "airlock-ph-b", EnvAWSSessionToken: "airlock-ph-c"},
			"[default]\naws_access_key_id = airlock-ph-a\naws_secret_access_key = airlock-ph-b\naws_session_token = airlock-ph-c\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := AWSCredentialsFileFor(tc.env)
			if ok != tc.ok || string(got) != tc.want {
				t.Errorf("got %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestAWSCredentialsFileFromPlaceholders: the file built from a real
// sandbox's placeholders holds those placeholders and no form of the value.
func TestAWSCredentialsFileFromPlaceholders(t *testing.T) {
	in, _, _ := setup(t, func(c *Config) {
		c.Bindings[0].Template = ""
		c.Bindings[0].Mode = ModeRequire
		c.Bindings[0].AWS = &AWSConfig{AccessKeyID: "AKIAIOSFODNN7EXAMPLE", Region: "eu-west-3", Service: "s3"}
	})
	ph, err := in.Placeholders(sb1)
	if err != nil {
		t.Fatal(err)
	}
	data, ok := AWSCredentialsFileFor(ph)
	if !ok || !strings.Contains(string(data), ph[EnvAWSSecretAccessKey]) || !strings.Contains(string(data), ph[EnvAWSAccessKeyID]) {
		t.Fatalf("got %q, %v from %v", data, ok, ph)
	}
	assertNoForms(t, "credentials file", string(data), canary)
}
