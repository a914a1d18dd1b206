package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/sandboxd"
	"github.com/airlock-dev/airlock/test/roottest"
)

// TestRootNewFailsWithPartsUnderWay: New mints the CA and writes the trust
// directory beside its other steps, and builds the executor beside the
// gateway's; a step that fails while they are under way (before the CA is
// waited for, before the executor is joined) fails New with its own error
// and leaves nothing: the run directory is removed (after the CA and the
// trust directory were done with it) and the next New on it succeeds.
func TestRootNewFailsWithPartsUnderWay(t *testing.T) {
	roottest.Require(t)
	for _, tt := range []struct {
		name string
		edit func(*config.Config)
		want string
	}{
		{"before the CA is waited for", func(c *config.Config) { c.Upstream.AllowCIDRs = []string{"alk-not-a-prefix"} }, "upstream.allow_cidrs"},
		{"with the executor under way", func(c *config.Config) { c.Upstream.ProxyAuthSecret = "alk-missing" }, "upstream.proxy_auth_secret"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := config.Default()
			cfg.DNS.Upstreams = []string{"127.0.0.1:53"}
			cfg.Audit.File = filepath.Join(dir, "audit.jsonl")
			cfg.CA.Cert, cfg.CA.Key = filepath.Join(dir, "none.pem"), filepath.Join(dir, "none.key")
			runDir := filepath.Join(dir, "run")
			opts := Options{Config: cfg, EphemeralCA: true, RunDir: runDir, PolicyLate: true,
				Executor: &sandboxd.Config{InitArgs: []string{}}}
			tt.edit(&opts.Config)
			d, err := New(context.Background(), opts)
			if err == nil {
				d.Close()
				t.Fatal("New succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: got %v, want an error naming %s", err, tt.want)
			}
			if _, err := os.Lstat(runDir); !os.IsNotExist(err) {
				t.Errorf("run dir left: %v", err)
			}
			d, err = New(context.Background(), Options{Config: cfg, EphemeralCA: true, RunDir: runDir, PolicyLate: true,
				Executor: &sandboxd.Config{InitArgs: []string{}}})
			if err != nil {
				t.Fatalf("New after the failure: %v", err)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(runDir); !os.IsNotExist(err) {
				t.Errorf("run dir left after Close: %v", err)
			}
		})
	}
}
