package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-dev/airlock/test/servetest"
)

// newServeEnv writes an airlock.yaml for `airlock serve` against the fake
// internet: other.example.test allowed on its ports 80 and 443, a root-only
// socket in the test's directory and a warm pool of two.
func newServeEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, "")
	dir := e.dir
	yaml := fmt.Sprintf(`policy: {mode: enforce, allow: [other.example.test]}
dns: {upstreams: [%q]}
upstream: {allow_cidrs: [%q], ca_file: %q}
audit: {file: %q}
ca: {cert: %q, key: %q}
limits: {memory: 256M, cpus: 1, pids: 128, timeout: 3m, tmp_size: 64M}
api: {group: ""}
metrics: {listen: "127.0.0.1:0"}
sandbox: {pool_size: 2}
`, w.net.DNSAddr.String(), w.net.Subnet.String(), w.caFile, e.audit,
		filepath.Join(dir, "no-ca", "ca.pem"), filepath.Join(dir, "no-ca", "ca.key"))
	if err := os.WriteFile(e.config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

// startServe starts `airlock serve` for e (newServeEnv) with run directory
// runDir and a socket in e's directory, and waits until its API answers.
func startServe(t *testing.T, e *env, runDir string) *servetest.Daemon {
	t.Helper()
	return servetest.Start(t, w.bin, e.config, filepath.Join(e.dir, "api.sock"), runDir, "--drain-timeout", "5s")
}
