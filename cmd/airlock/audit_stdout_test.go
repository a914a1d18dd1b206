//go:build !airlock_front

package main

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/config"
)

// TestServeAuditStdoutStream is the per-node stream a cluster's log
// collector picks up: serve's jsonl sink on stdout ("-"). Nobody reads
// stdout at first (a stuck collector): the writer, which the gateway logs
// through, still takes every record at once and the shipper lags instead.
// Once stdout is read, the lines that came out carry the node and verify
// with the public key as the same chain: the copy keeps the proof.
func TestServeAuditStdoutStream(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Decode(strings.NewReader("audit: {file: " + filepath.Join(dir, "audit.jsonl") +
		", node: node-a, export: [{name: stdout, format: jsonl, endpoint: '-', flush_interval: 10ms}]}"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := audit.New(audit.Config{File: cfg.Audit.File, SigningKeyFile: filepath.Join(dir, "audit.key"), Node: cfg.Audit.Node, CheckpointEvery: 100}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe() // unbuffered: every write waits for a reader
	t.Cleanup(func() { pr.Close() })
	reg, stop, err := startAuditExport(t.Context(), cfg, pw, cfg.Audit.Node, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	for i := range n {
		if err := w.Log(&audit.Record{Sandbox: "sb-1", Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Host: "pypi.org", Port: 443}); err != nil {
			t.Fatalf("record %d refused while stdout is stuck: %v", i, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if lag := lagRecords(t, reg); lag == 0 {
		t.Fatalf("lag: got 0 with stdout unread, want the records waiting")
	}
	// The collector comes back: read until the copy ends in the log's last line.
	want, err := os.ReadFile(cfg.Audit.File)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	sc := bufio.NewScanner(pr)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		got.Write(sc.Bytes())
		got.WriteByte('\n')
		if got.Len() >= len(want) {
			break
		}
	}
	stop(time.Minute)
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("stdout copy differs from the log: got %d bytes, want %d", got.Len(), len(want))
	}
	pub := w.PublicKey()
	rep, err := audit.Verify(audit.VerifyOptions{PublicKey: pub, Complete: true}, audit.Input{Name: "stdout", R: bytes.NewReader(got.Bytes())})
	if err != nil {
		t.Fatalf("verify the stdout copy: %v", err)
	}
	if rep.Records < n {
		t.Errorf("verified %d records, want at least %d", rep.Records, n)
	}
	for i, line := range bytes.Split(bytes.TrimSpace(got.Bytes()), []byte("\n")) {
		if !bytes.Contains(line, []byte(`"node":"node-a"`)) {
			t.Fatalf("line %d has no node: %s", i+1, line)
		}
	}
}

// lagRecords reads airlock_audit_export_lag_records from the shippers'
// registry.
func lagRecords(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "airlock_audit_export_lag_records" && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no airlock_audit_export_lag_records")
	return 0
}

// TestServeAuditStdoutStuckStop: a stdout nobody ever reads does not keep
// serve from stopping: the stop waits its bound and leaves the stuck sink.
func TestServeAuditStdoutStuckStop(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Decode(strings.NewReader("audit: {file: " + filepath.Join(dir, "audit.jsonl") +
		", export: [{name: stdout, format: jsonl, endpoint: '-', flush_interval: 1ms}]}"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := audit.New(audit.Config{File: cfg.Audit.File, Node: "node-a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Log(&audit.Record{Kind: audit.KindHTTP, Decision: audit.DecisionAllow}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	defer pr.Close() // after the test: the stuck write then returns
	_, stop, err := startAuditExport(t.Context(), cfg, pw, "node-a", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the shipper is stuck in its write: a reader sees the first
	// byte, and no more is read.
	one := make([]byte, 1)
	if _, err := io.ReadFull(pr, one); err != nil {
		t.Fatal(err)
	}
	stop(10 * time.Millisecond) // returns: the test would time out otherwise
}

// TestAuditQueryNode: a collector's file holds two nodes' streams; --node
// picks one node's records.
func TestAuditQueryNode(t *testing.T) {
	dir := t.TempDir()
	var merged []byte
	for _, node := range []string{"node-a", "node-b"} {
		p := filepath.Join(dir, node+".jsonl")
		w, err := audit.New(audit.Config{File: p, Node: node}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := w.Log(&audit.Record{Sandbox: "sb-1", Kind: audit.KindDNS, Decision: audit.DecisionAllow, QName: node + ".example."}); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		merged = append(merged, b...)
	}
	p := filepath.Join(dir, "collected.jsonl")
	if err := os.WriteFile(p, merged, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runAudit(t, "query", "--file", p, "--node", "node-b", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d records, want node-b's 2:\n%s", len(lines), out)
	}
	for _, l := range lines {
		if !strings.Contains(l, `"node":"node-b"`) || !strings.Contains(l, "node-b.example.") {
			t.Errorf("got %s, want a node-b record", l)
		}
	}
}
