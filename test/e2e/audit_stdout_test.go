package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/test/poll"
	"github.com/airlock-dev/airlock/test/servetest"
)

// TestServeAuditStdoutStream runs a real `airlock serve` as the DaemonSet
// does: NODE_NAME set (the downward API), the audit log shipped as JSON lines
// to stdout (audit.export endpoint "-"). Every record in the log and on
// stdout carries the node; stdout holds only records (the operational log is
// on stderr), each line byte for byte the log's, in order, and the copy
// verifies as the chain with `airlock audit verify` and the log's public key.
func TestServeAuditStdoutStream(t *testing.T) {
	e := newServeEnv(t)
	cfg, err := os.ReadFile(e.config)
	if err != nil {
		t.Fatal(err)
	}
	auditLine := "audit: {file: \"" + e.audit + "\"}"
	withStdout := "audit: {file: \"" + e.audit + "\", export: [{name: stdout, format: jsonl, endpoint: \"-\", flush_interval: 50ms}]}"
	if !bytes.Contains(cfg, []byte(auditLine)) {
		t.Fatalf("config has no %q line:\n%s", auditLine, cfg)
	}
	if err := os.WriteFile(e.config, bytes.Replace(cfg, []byte(auditLine), []byte(withStdout), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	node := fmt.Sprintf("alk-node-%d", os.Getpid())
	var stdout servetest.SyncBuffer
	d := servetest.StartWith(t, servetest.Options{Env: []string{"NODE_NAME=" + node}, Stdout: &stdout},
		w.bin, e.config, filepath.Join(e.dir, "api.sock"), filepath.Join(e.dir, "run"), "--drain-timeout", "5s")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for range 2 {
		sb, err := d.C.CreateSandbox(ctx, api.CreateSandboxRequest{Labels: map[string]string{"test": "audit-stdout"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.C.DeleteSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, time.Minute, "the sandboxes' records on stdout", func() bool {
		return bytes.Count(stdout.Bytes(), []byte(`"kind":"sandbox"`)) >= 4
	})
	if code := d.Stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exited %d\n%s", code, d.Output())
	}
	logged, err := os.ReadFile(e.audit)
	if err != nil {
		t.Fatal(err)
	}
	got := stdout.Bytes()
	// What serve wrote as it stopped (the last checkpoint) is shipped by the
	// next start: the stream is the log's beginning.
	if len(got) == 0 || !bytes.HasPrefix(logged, got) || got[len(got)-1] != '\n' {
		t.Fatalf("stdout is not whole lines of the log's beginning:\n--- stdout\n%s\n--- log\n%s", got, logged)
	}
	for i, line := range bytes.Split(bytes.TrimSuffix(logged, []byte("\n")), []byte("\n")) {
		var r audit.Record
		if err := json.Unmarshal(line, &r); err != nil || r.Node != node {
			t.Fatalf("log line %d: node %q (%v), want %q: %s", i+1, r.Node, err, node, line)
		}
	}
	copyPath := filepath.Join(t.TempDir(), "stdout.jsonl")
	if err := os.WriteFile(copyPath, got, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(w.bin, "audit", "verify", copyPath, "--pubkey", e.audit+".key.pub").CombinedOutput(); err != nil {
		t.Fatalf("airlock audit verify of the stdout copy: %v\n%s", err, out)
	}
}
