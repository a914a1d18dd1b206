package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
)

// auditFixture writes n records (alternating allow/deny, three hosts) and
// returns the log path and the signing key path.
func auditFixture(t *testing.T, n int) (logPath, keyPath string) {
	t.Helper()
	dir := t.TempDir()
	logPath, keyPath = filepath.Join(dir, "audit.jsonl"), filepath.Join(dir, "audit.key")
	w, err := audit.New(audit.Config{File: logPath, SigningKeyFile: keyPath, CheckpointEvery: 5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"pypi.org", "files.pythonhosted.org", "evil.example"}
	for i := range n {
		err := w.Log(&audit.Record{
			Sandbox: fmt.Sprintf("sb-%d", i%2), Kind: audit.KindHTTP, Decision: []string{audit.DecisionAllow, audit.DecisionDeny}[i%2],
			Host: hosts[i%3], Port: 443, Method: "GET", Path: "/x",
			Reasons: []audit.Reason{{ID: "r" + fmt.Sprint(i), Msg: "m"}},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return logPath, keyPath
}

func runAudit(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, _, err := runAuditErr(t, args...)
	return out, err
}

// runAuditErr runs `airlock audit ARGS...` and returns stdout and stderr.
func runAuditErr(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := newAuditCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	return out.String(), errOut.String(), err
}

// TestAuditVerifyUnsigned: verify without --pubkey says on stderr that the
// signatures were not checked, and --require-signatures makes that an error
// (exit 2, nothing verified). With --pubkey neither applies. Regression: the
// only word of it was a clause inside the summary's parentheses.
func TestAuditVerifyUnsigned(t *testing.T) {
	logPath, keyPath := auditFixture(t, 12)
	tests := []struct {
		name     string
		args     []string
		code     int
		out      string // stdout starts with it
		warn     bool   // the warning on stderr
		errorMsg string
	}{
		{"no pubkey", []string{logPath}, 0, "12 records", true, ""},
		{"required, no pubkey", []string{"--require-signatures", logPath}, 2, "", false, "--require-signatures: no --pubkey given"},
		{"required, pubkey", []string{"--require-signatures", "--pubkey", keyPath + ".pub", logPath}, 0, "12 records", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errs, err := runAuditErr(t, append([]string{"verify"}, tt.args...)...)
			if code := exitCode(err); code != tt.code || !strings.HasPrefix(out, tt.out) {
				t.Fatalf("got exit %d, %q, %v; want %d, %q", code, out, err, tt.code, tt.out)
			}
			if got := strings.Contains(errs, "signatures were NOT checked (no --pubkey)"); got != tt.warn {
				t.Errorf("warning on stderr: got %v, want %v (%q)", got, tt.warn, errs)
			}
			if tt.errorMsg != "" && (err == nil || !strings.Contains(err.Error(), tt.errorMsg)) {
				t.Errorf("got %v, want %q", err, tt.errorMsg)
			}
		})
	}
}

func exitCode(err error) int {
	var ec exitCoder
	if err == nil {
		return 0
	}
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return -1
}

func TestAuditVerifyCmd(t *testing.T) {
	logPath, keyPath := auditFixture(t, 12)
	pubPath := keyPath + ".pub"
	out, err := runAudit(t, "verify", logPath, "--pubkey", pubPath)
	if err != nil || !strings.HasPrefix(out, "12 records, 3 checkpoints, chain ok") || !strings.Contains(out, "signatures ok") {
		t.Fatalf("got %q, %v; want the ok summary", out, err)
	}
	out, err = runAudit(t, "verify", logPath)
	if err != nil || !strings.Contains(out, "signatures not checked") {
		t.Fatalf("without key: got %q, %v", out, err)
	}

	// Tamper with line 3: verify exits 1 naming file:line 4 (whose prev no longer matches).
	b, _ := os.ReadFile(logPath)
	lines := strings.SplitAfter(string(b), "\n")
	lines[2] = strings.Replace(lines[2], `"decision":"allow"`, `"decision":"deny"`, 1)
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(bad, []byte(strings.Join(lines, "")), 0o600)
	_, err = runAudit(t, "verify", bad, "--pubkey", pubPath)
	if exitCode(err) != 1 || !strings.Contains(err.Error(), bad+":4: prev mismatch") {
		t.Fatalf("tampered: got exit %d, %v; want exit 1 naming %s:4", exitCode(err), err, bad)
	}

	// The private key file is accepted as --pubkey too; a wrong key is caught.
	if _, err := runAudit(t, "verify", logPath, "--pubkey", keyPath); err != nil {
		t.Fatalf("private key as --pubkey: %v", err)
	}
	_, otherKey := auditFixture(t, 1)
	_, err = runAudit(t, "verify", logPath, "--pubkey", otherKey+".pub")
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "bad signature") {
		t.Fatalf("wrong key: got %v, want exit 1 bad signature", err)
	}
	if _, err := runAudit(t, "verify", "/nonexistent/audit.jsonl"); exitCode(err) != 2 {
		t.Fatalf("missing file: got %v, want exit 2", err)
	}
	if _, err := runAudit(t, "verify", logPath, "--pubkey", logPath); exitCode(err) != 2 {
		t.Fatalf("garbage pubkey: got %v, want exit 2", err)
	}
}

func TestAuditQueryCmd(t *testing.T) {
	logPath, _ := auditFixture(t, 12)
	tests := []struct {
		name  string
		args  []string
		lines int
	}{
		{"all json", []string{"--format", "json"}, 12},
		{"deny", []string{"--format", "json", "--decision", "deny"}, 6},
		{"sandbox and host", []string{"--format", "json", "--sandbox", "sb-0", "--host", "pypi.org"}, 2},
		{"host suffix", []string{"--format", "json", "--host", ".pythonhosted.org"}, 4},
		{"checkpoints", []string{"--format", "json", "--kind", "checkpoint"}, 3},
		{"since future", []string{"--format", "json", "--since", "2999-01-01T00:00:00Z"}, 0},
		{"since 1h ago", []string{"--format", "json", "--since", "1h"}, 12},
		{"limit", []string{"--format", "json", "--limit", "3"}, 3},
		{"table", []string{"--decision", "allow"}, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := runAudit(t, append([]string{"query", "--file", logPath}, tt.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Count(out, "\n"); got != tt.lines {
				t.Fatalf("got %d lines, want %d:\n%s", got, tt.lines, out)
			}
		})
	}
	for _, bad := range [][]string{
		{"query"},
		{"query", "--file", logPath, "--format", "xml"},
		{"query", "--file", logPath, "--since", "yesterday"},
		{"query", "--file", "/nonexistent/a.jsonl"},
	} {
		if _, err := runAudit(t, bad...); exitCode(err) != 2 {
			t.Errorf("%v: got %v, want exit 2", bad, err)
		}
	}
}

func TestAuditTailAndPubkeyCmd(t *testing.T) {
	logPath, keyPath := auditFixture(t, 4)
	out, err := runAudit(t, "tail", "-n", "2", logPath)
	if err != nil || strings.Count(out, "\n") != 2 || !strings.Contains(out, `"kind":"checkpoint"`) {
		t.Fatalf("tail: got %q, %v; want the last 2 lines ending with the close checkpoint", out, err)
	}
	out, err = runAudit(t, "pubkey", "--key", keyPath)
	pub, _ := os.ReadFile(keyPath + ".pub")
	if err != nil || out != string(pub) {
		t.Fatalf("pubkey: got %q, %v; want %q", out, err, pub)
	}
}

// A log cut at a line boundary after its last checkpoint is still a whole
// chain; --complete (the writer has stopped) catches it and names the first
// record not followed by a checkpoint. Without --pubkey the flag is refused.
func TestAuditVerifyCompleteCatchesCutTail(t *testing.T) {
	logPath, keyPath := auditFixture(t, 12) // checkpoints after 5, 10 and at Close
	pubPath := keyPath + ".pub"
	if out, err := runAudit(t, "verify", "--complete", "--pubkey", pubPath, logPath); err != nil || !strings.Contains(out, "head ") {
		t.Fatalf("whole log: got %q, %v; want ok with the head", out, err)
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	// Lines: r1..r5 c6 r7..r11 c12 r13 r14 c15. Drop c15 and r14.
	cut := strings.Join(lines[:13], "")
	if err := os.WriteFile(logPath, []byte(cut), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := runAudit(t, "verify", "--pubkey", pubPath, logPath); err != nil {
		t.Fatalf("without --complete the cut log verifies (documented): got %v", err)
	}
	_, err = runAudit(t, "verify", "--complete", "--pubkey", pubPath, logPath)
	if exitCode(err) != 1 || !strings.Contains(err.Error(), logPath+":13: unsigned tail") {
		t.Fatalf("cut log with --complete: got exit %d, %v; want exit 1 naming line 13", exitCode(err), err)
	}
	if _, err := runAudit(t, "verify", "--complete", logPath); exitCode(err) != 2 || !strings.Contains(err.Error(), "--pubkey") {
		t.Fatalf("--complete without --pubkey: got exit %d, %v; want exit 2", exitCode(err), err)
	}
}

// With retention the oldest rotated files are gone: `verify --rotated`
// verifies the kept files from their first line and says how much was
// pruned; deleting the oldest kept file is still caught.
func TestAuditVerifyAfterRetention(t *testing.T) {
	dir := t.TempDir()
	logPath, keyPath := filepath.Join(dir, "audit.jsonl"), filepath.Join(dir, "audit.key")
	w, err := audit.New(audit.Config{File: logPath, SigningKeyFile: keyPath, MaxSize: 4096, MaxFiles: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if err := w.Log(&audit.Record{Sandbox: "sb", Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Host: "evil.example", Path: fmt.Sprint("/", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Stats().Pruned == 0 {
		t.Fatal("retention deleted nothing")
	}
	out, err := runAudit(t, "verify", "--rotated", "--complete", "--pubkey", keyPath+".pub", logPath)
	if err != nil || !strings.Contains(out, "retention deleted seq 1..") || !strings.Contains(out, "anchored by the checkpoint") {
		t.Fatalf("verify --rotated after retention: got %q, %v; want ok naming what was pruned", out, err)
	}
	rotated, _ := audit.RotatedFiles(logPath)
	if err := os.Remove(rotated[0]); err != nil {
		t.Fatal(err)
	}
	_, err = runAudit(t, "verify", "--rotated", "--pubkey", keyPath+".pub", logPath)
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "seq gap") {
		t.Fatalf("oldest kept file deleted: got exit %d, %v; want exit 1, seq gap", exitCode(err), err)
	}
}
