//go:build !airlock_front

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/config"
)

// TestAuditExportJSONLCopyVerifies: a JSONL export of a rotated log is the
// chain byte for byte, and `airlock audit verify` accepts the copy with the
// signatures and --complete.
func TestAuditExportJSONLCopyVerifies(t *testing.T) {
	logPath, keyPath := rotatedFixture(t, 60)
	out, err := runAudit(t, "export", "--format", "jsonl", "--rotated", logPath)
	if err != nil {
		t.Fatalf("export: %v", err)
	}
	files, _ := audit.ChainFiles(logPath)
	if len(files) < 3 {
		t.Fatalf("got %d files, want a rotated chain", len(files))
	}
	var want []byte
	for _, f := range files {
		b, _ := os.ReadFile(f)
		want = append(want, b...)
	}
	if out != string(want) {
		t.Fatalf("export differs from the chain (%d bytes, want %d)", len(out), len(want))
	}
	copyPath := filepath.Join(t.TempDir(), "copy.jsonl")
	os.WriteFile(copyPath, []byte(out), 0o600)
	if got, err := runAudit(t, "verify", "--pubkey", keyPath+".pub", "--complete", copyPath); err != nil {
		t.Fatalf("verify the copy: %v", err)
	} else if !strings.Contains(got, "chain ok") {
		t.Fatalf("verify: got %q, want chain ok", got)
	}
}

// rotatedFixture writes n records with 4 KiB files (several rotations).
func rotatedFixture(t *testing.T, n int) (logPath, keyPath string) {
	t.Helper()
	dir := t.TempDir()
	logPath, keyPath = filepath.Join(dir, "audit.jsonl"), filepath.Join(dir, "audit.key")
	appendFixture(t, logPath, keyPath, n)
	return logPath, keyPath
}

func appendFixture(t *testing.T, logPath, keyPath string, n int) {
	t.Helper()
	w, err := audit.New(audit.Config{File: logPath, SigningKeyFile: keyPath, CheckpointEvery: 5, MaxSize: 4096}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		r := &audit.Record{Sandbox: "sb-1", Owner: "1000", Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Host: "pypi.org", Port: 443, Method: "GET", Path: fmt.Sprintf("/p/%d", i)}
		if err := w.Log(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestAuditExportOCSF(t *testing.T) {
	logPath, _ := auditFixture(t, 6)
	out, err := runAudit(t, "export", "--format", "ocsf", logPath)
	if err != nil {
		t.Fatal(err)
	}
	var classes []float64
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		classes = append(classes, ev["class_uid"].(float64))
	}
	if len(classes) < 6 || classes[0] != 4002 {
		t.Fatalf("got classes %v, want HTTP Activity (4002) events", classes)
	}
}

// TestAuditExportStateResumes: a second run with the same --state ships only
// what was appended since.
func TestAuditExportStateResumes(t *testing.T) {
	logPath, keyPath := rotatedFixture(t, 20)
	state := filepath.Join(t.TempDir(), "state")
	first, err := runAudit(t, "export", "--format", "jsonl", "--state", state, "--rotated", logPath)
	if err != nil {
		t.Fatal(err)
	}
	appendFixture(t, logPath, keyPath, 10)
	second, err := runAudit(t, "export", "--format", "jsonl", "--state", state, "--rotated", logPath)
	if err != nil {
		t.Fatal(err)
	}
	third, err := runAudit(t, "export", "--format", "jsonl", "--state", state, "--rotated", logPath)
	if err != nil || third != "" {
		t.Fatalf("third run: got %q, %v; want nothing new", third, err)
	}
	files, _ := audit.ChainFiles(logPath)
	var all []byte
	for _, f := range files {
		b, _ := os.ReadFile(f)
		all = append(all, b...)
	}
	if first+second != string(all) {
		t.Fatalf("first and second run together: %d bytes, want the chain's %d, each line once", len(first+second), len(all))
	}
}

func TestAuditExportErrors(t *testing.T) {
	logPath, _ := auditFixture(t, 2)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens here: the collector is down
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantMsg  string
	}{
		{name: "no format", args: []string{logPath}, wantCode: 2, wantMsg: "--format is required"},
		{name: "unknown format", args: []string{"--format", "cef", logPath}, wantCode: 2, wantMsg: `format "cef"`},
		{name: "otlp needs an endpoint", args: []string{"--format", "otlp", logPath}, wantCode: 2, wantMsg: "otlp sink endpoint"},
		{name: "syslog over udp", args: []string{"--format", "syslog", "--to", "udp://127.0.0.1:514", logPath}, wantCode: 2, wantMsg: "tcp://host:port or tls://host:port"},
		{name: "follow takes one file", args: []string{"--format", "jsonl", "--follow", logPath, logPath}, wantCode: 2, wantMsg: "--follow takes one FILE"},
		{name: "missing file", args: []string{"--format", "jsonl", logPath + ".nope"}, wantCode: 2, wantMsg: "no such file"},
		{name: "collector down gives up", args: []string{"--format", "syslog", "--to", "tcp://" + closed, "--max-attempts", "2", logPath}, wantCode: 1, wantMsg: "after 2 attempts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runAudit(t, append([]string{"export"}, tt.args...)...)
			if code := exitCode(err); code != tt.wantCode || err == nil || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("got exit %d, %v; want exit %d with %q", code, err, tt.wantCode, tt.wantMsg)
			}
		})
	}
}

// TestServeAuditExportConfig: serve's wiring maps audit.export onto the
// exporter, with the state file next to the log by default, and a sink that
// cannot start is an error naming it.
func TestServeAuditExportConfig(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Decode(bytes.NewReader([]byte("audit: {file: " + filepath.Join(dir, "audit.jsonl") + ", export: [{format: jsonl, endpoint: " + filepath.Join(dir, "copy.jsonl") + "}]}")))
	if err != nil {
		t.Fatal(err)
	}
	appendFixture(t, cfg.Audit.File, filepath.Join(dir, "audit.key"), 3)
	if ec := exportConfig(cfg.Audit.Export[0], cfg.Audit.File); ec.StateFile != cfg.Audit.File+".jsonl.export-state" || ec.Name != "jsonl" {
		t.Fatalf("got state file %q, name %q", ec.StateFile, ec.Name)
	}
	reg, stop, err := startAuditExport(t.Context(), cfg, io.Discard, "node-a", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	waitForFile(t, filepath.Join(dir, "copy.jsonl"), cfg.Audit.File)
	stop(time.Minute)
	if mfs, err := reg.Gather(); err != nil || len(mfs) != 5 {
		t.Fatalf("got %d metric families (%v), want 5", len(mfs), err)
	}
	cfg.Audit.Export[0].Endpoint = "/no/such/dir/copy.jsonl"
	if _, _, err := startAuditExport(t.Context(), cfg, io.Discard, "node-a", slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "audit.export[0]") {
		t.Fatalf("got %v, want an error naming audit.export[0]", err)
	}
}

// waitForFile waits (up to 30 s) until got holds exactly want's bytes.
func waitForFile(t *testing.T, got, want string) {
	t.Helper()
	w, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if g, _ := os.ReadFile(got); bytes.Equal(g, w) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never held %s's %d bytes", got, want, len(w))
		}
	}
}

// TestAuditExportFollow: --follow ships the live file's chain, then records
// appended later, until interrupted.
func TestAuditExportFollow(t *testing.T) {
	logPath, keyPath := rotatedFixture(t, 10)
	out := filepath.Join(t.TempDir(), "copy.jsonl")
	cmd := newAuditCmd()
	cmd.SetArgs([]string{"export", "--format", "jsonl", "--to", out, "--follow", "--state", out + ".state", logPath})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	waitForChain(t, out, logPath)
	appendFixture(t, logPath, keyPath, 30)
	waitForChain(t, out, logPath)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("export --follow: %v", err)
	}
	if got, err := runAudit(t, "verify", "--pubkey", keyPath+".pub", "--complete", out); err != nil {
		t.Fatalf("verify the copy: %v (%s)", err, got)
	}
}

// waitForChain waits (up to 30 s) until got holds the whole chain of live.
func waitForChain(t *testing.T, got, live string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		files, _ := audit.ChainFiles(live)
		var want []byte
		for _, f := range files {
			b, _ := os.ReadFile(f)
			want = append(want, b...)
		}
		if g, _ := os.ReadFile(got); bytes.Equal(g, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never held the chain of %s", got, live)
		}
	}
}
