package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/test/roottest"
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

// TestServeSecondOnSameRunDir pins a second `airlock serve` on a running
// one's --run-dir that failed to start ("audit file in use") and, undoing
// its start, removed the running daemon's run directory (its CA, bundle and
// namespace state): every create after was internal while health said ok.
// Now the second exits at once naming the first's pid, the directory is
// intact, health is ok and a create and an exec still work.
func TestServeSecondOnSameRunDir(t *testing.T) {
	roottest.Require(t)
	e := newServeEnv(t)
	runDir := filepath.Join(e.dir, "run")
	d := startServe(t, e, runDir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, w.bin, "serve", "--config", e.config, "--socket", filepath.Join(e.dir, "second.sock"),
		"--run-dir", runDir).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("second serve: got %v, output %q; want exit 2", err, out)
	}
	if _, err := os.Stat(filepath.Join(runDir, "ca-bundle.pem")); err != nil {
		t.Errorf("the first serve's run dir after the second failed: %v", err)
	}
	if !strings.Contains(string(out), fmt.Sprintf("in use by process %d", d.PID())) {
		t.Errorf("second serve's output %q does not name the first's pid %d", out, d.PID())
	}
	if h, err := d.C.Health(ctx); err != nil || !h.OK {
		t.Fatalf("health: got %+v, %v; want ok", h, err)
	}
	sb, err := d.C.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("create after the second serve failed: %v", err)
	}
	defer d.C.DeleteSandbox(context.Background(), sb.ID)
	var stdout bytes.Buffer
	res, err := d.C.Exec(ctx, sb.ID, api.ExecRequest{Argv: []string{"echo", "ok"}}, client.ExecIO{Stdout: &stdout})
	if err != nil || res.ExitStatus != 0 || stdout.String() != "ok\n" {
		t.Fatalf("exec: got %+v, %q, %v", res, stdout.String(), err)
	}
}
