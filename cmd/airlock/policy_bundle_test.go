//go:build !airlock_front

package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/bundletest"
)

// TestPolicyBundleCommand: `airlock policy bundle` writes a signed bundle of
// a policy directory (rules calling the embedded library, data in a
// subdirectory, a preset) that the engine downloads, verifies and activates;
// a directory that fails its tests writes nothing.
func TestPolicyBundleCommand(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"egress.rego": `package airlock.egress

import data.airlock

allow if {
	input.kind in {"connect", "tls", "dns"}
	airlock.host_in(data.teams[input.sandbox.labels.team])
}
`,
		"egress_test.rego": `package airlock.egress_test

import data.airlock

test_ml if airlock.decision.allowed with input as {"kind": "connect", "sandbox": {"id": "s", "labels": {"team": "ml"}}, "destination": {"host": "huggingface.co", "port": 443}}
`,
		"teams/data.json":     `{"ml": {"huggingface.co": true}}`,
		"presets/corpgo.json": `{"goproxy.corp.example": true}`,
	}
	for rel, src := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	key := bundletest.NewKey(t, "prod", "airlock")
	keyFile := filepath.Join(t.TempDir(), "signing.pem")
	if err := os.WriteFile(keyFile, []byte(key.PrivatePEM), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "bundle.tar.gz")
	stdout, stderr, code := runPolicy(t, "", "bundle", dir, "-o", out, "--revision", "r9", "--signing-key", keyFile, "--key-id", "prod", "--scope", "airlock")
	if code != 0 || !strings.Contains(stdout, `revision "r9", signed with key prod`) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	tarball, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	srv := bundletest.NewServer(t)
	srv.Publish(tarball)
	e, err := policy.New(policy.Config{Bundle: &policy.BundleConfig{URL: srv.URL, Manual: true,
		Signing: &policy.BundleSigning{PublicKey: key.PublicPEM, KeyID: "prod", Scope: "airlock"}}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.PollBundle(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.BundleStatus(); !st.Active || st.Revision != "r9" {
		t.Fatalf("status %+v, want r9 active", st)
	}
	decide := func(team, host string) bool {
		d := e.Decide(ctx, &policy.Input{Kind: policy.KindConnect, Sandbox: policy.Sandbox{ID: "s", Labels: map[string]string{"team": team}},
			Destination: policy.Destination{Host: host, Port: 443}})
		return d.Permit()
	}
	if !decide("ml", "huggingface.co") || decide("web", "huggingface.co") || !decide("web", "goproxy.corp.example") {
		t.Fatal("the bundle's rules, data and preset are not what the directory says")
	}

	t.Run("refused", func(t *testing.T) {
		bad := t.TempDir()
		if err := os.WriteFile(filepath.Join(bad, "x_test.rego"), []byte("package x_test\n\ntest_fails if false\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		withSchema := t.TempDir()
		if err := os.MkdirAll(filepath.Join(withSchema, "schema"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(withSchema, "schema", "input.json"), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			name    string
			args    []string
			code    int
			wantErr string
		}{
			{name: "failing test", args: []string{"bundle", bad, "-o", filepath.Join(bad, "b.tar.gz")}, code: 1, wantErr: "test(s) failed"},
			{name: "schema", args: []string{"bundle", withSchema, "-o", filepath.Join(withSchema, "b.tar.gz")}, code: 1, wantErr: "cannot carry the input schema"},
			{name: "key id without key", args: []string{"bundle", dir, "-o", filepath.Join(bad, "b.tar.gz"), "--key-id", "x"}, code: 2, wantErr: "need --signing-key"},
			{name: "bad revision", args: []string{"bundle", dir, "-o", filepath.Join(bad, "b.tar.gz"), "--revision", "a b"}, code: 1, wantErr: "not printable ASCII"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				_, stderr, code := runPolicy(t, "", tt.args...)
				if code != tt.code || !strings.Contains(stderr, tt.wantErr) {
					t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, tt.code, tt.wantErr)
				}
				if _, err := os.Stat(tt.args[3]); !os.IsNotExist(err) {
					t.Fatalf("%s written (%v)", tt.args[3], err)
				}
			})
		}
	})
}
