package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/export/exporttest"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/test/poll"
)

// TestServeAuditExportAcrossOutageAndRestart runs a real `airlock serve`
// shipping its audit log to an OTLP/HTTP collector (audit.export): records
// are shipped, the collector goes down, the daemon is restarted while it is
// down, the collector comes back; then `airlock audit export` with the
// daemon's state file ships what the last daemon wrote as it stopped. Every
// record reaches the collector exactly once, in order, and the collected copy
// verifies with the log's public key as a complete chain.
func TestServeAuditExportAcrossOutageAndRestart(t *testing.T) {
	e := newServeEnv(t)
	rc := exporttest.NewOTLPHTTP(t)
	cfg, err := os.ReadFile(e.config)
	if err != nil {
		t.Fatal(err)
	}
	auditLine := "audit: {file: \"" + e.audit + "\"}"
	withExport := "audit: {file: \"" + e.audit + "\", max_size: 8K, export: [{format: otlp, endpoint: \"" + rc.Endpoint() +
		"\", batch_size: 5, flush_interval: 50ms, backoff_min: 50ms, backoff_max: 500ms}]}"
	if !bytes.Contains(cfg, []byte(auditLine)) {
		t.Fatalf("config has no %q line:\n%s", auditLine, cfg)
	}
	if err := os.WriteFile(e.config, bytes.Replace(cfg, []byte(auditLine), []byte(withExport), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(e.dir, "run")
	sandboxes := func(c *client.Client, n int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for range n {
			sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Labels: map[string]string{"test": "audit-export"}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.DeleteSandbox(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
		}
	}

	d := startServe(t, e, runDir)
	sandboxes(d.C, 3)
	poll.Until(t, time.Minute, "the first records at the collector", func() bool { return len(rc.Got().Lines()) >= 6 })
	rc.SetDown(true)
	sandboxes(d.C, 3)
	poll.Until(t, time.Minute, "an attempt the collector refused", func() bool { return rc.Got().Refused() > 0 })
	if code := d.Stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exited %d\n%s", code, d.Output())
	}
	d2 := startServe(t, e, runDir)
	sandboxes(d2.C, 3)
	rc.SetDown(false)
	sandboxes(d2.C, 3)
	poll.Until(t, time.Minute, "the records of the outage at the collector", func() bool { return len(rc.Got().Lines()) >= 24 })
	if code := d2.Stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exited %d\n%s", code, d2.Output())
	}
	// What the daemon wrote while stopping: shipped by the CLI from the
	// daemon's own state file.
	out, err := exec.Command(w.bin, "audit", "export", "--format", "otlp", "--to", rc.Endpoint(), "--rotated",
		"--state", e.audit+".otlp.export-state", "--max-attempts", "3", e.audit).CombinedOutput()
	if err != nil {
		t.Fatalf("airlock audit export: %v\n%s", err, out)
	}
	files, err := audit.ChainFiles(e.audit)
	if err != nil || len(files) < 2 {
		t.Fatalf("got chain files %v (%v), want the log rotated at least once", files, err)
	}
	var want [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))...)
	}
	got := rc.Got().Lines()
	for i := range max(len(got), len(want)) {
		if i >= len(got) || i >= len(want) || !bytes.Equal(got[i], want[i]) {
			var r audit.Record
			if i < len(got) {
				json.Unmarshal(got[i], &r)
			}
			t.Fatalf("collected line %d (seq %d) differs from the log's (collected %d lines, log %d): lost, repeated or reordered", i+1, r.Seq, len(got), len(want))
		}
	}
	copyPath := filepath.Join(t.TempDir(), "collected.jsonl")
	if err := os.WriteFile(copyPath, append(bytes.Join(got, []byte("\n")), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(w.bin, "audit", "verify", "--pubkey", e.audit+".key.pub", "--complete", copyPath).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "chain ok") {
		t.Fatalf("airlock audit verify of the collected copy: %v\n%s", err, out)
	}
}
