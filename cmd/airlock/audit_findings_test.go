package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// findingsLog writes, through the real writer, a canary denied to one host,
// a credential recorded at another, and a clean request.
func findingsLog(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	w, err := audit.New(audit.Config{File: filepath.Join(dir, "audit.jsonl"), SigningKeyFile: filepath.Join(dir, "audit.key")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	recs := []*audit.Record{
		{Sandbox: "sb-a", Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Mode: audit.ModeEnforce, Host: "paste.example", Port: 443,
			Method: "POST", Path: "/new", Reasons: []audit.Reason{{ID: "content_canary"}},
			Findings: []audit.Finding{{Detector: "canary", Class: "canary", Where: "body", Encoding: "base64", Confidence: "high", Fingerprint: "00112233aabbccdd"}}},
		{Sandbox: "sb-a", Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Mode: audit.ModeEnforce, Host: "api.example", Port: 443,
			Method: "GET", Path: "/v1", Status: 200,
			Findings: []audit.Finding{{Detector: "path-entropy", Class: "entropy", Where: "url.path", Confidence: "low", Score: 4.5}}},
		{Sandbox: "sb-b", Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Mode: audit.ModeEnforce, Host: "pypi.org", Port: 443,
			Method: "GET", Path: "/simple/", Status: 200},
	}
	for _, r := range recs {
		r.TS = ts
		if err := w.Log(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "audit.jsonl")
}

// TestAuditQueryFindings: --findings selects records with a finding (any, by
// class, by detector), the table's FINDINGS column names detector and place,
// and --by detector counts them.
func TestAuditQueryFindings(t *testing.T) {
	log := findingsLog(t)
	for _, tc := range []struct {
		name  string
		args  []string
		lines int
		want  string
	}{
		{"any", []string{"--findings", "any"}, 2, "canary@body+base64"},
		{"class", []string{"--findings", "canary"}, 1, "paste.example:443"},
		{"detector", []string{"--findings", "path-entropy"}, 1, "path-entropy@url.path"},
		{"none matches", []string{"--findings", "github-pat"}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runAudit(t, append([]string{"query", "--file", log}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if !strings.Contains(lines[0], "FINDINGS") || len(lines)-1 != tc.lines || !strings.Contains(out, tc.want) {
				t.Fatalf("got %d rows:\n%s\nwant %d containing %q", len(lines)-1, out, tc.lines, tc.want)
			}
		})
	}
	out, err := runAudit(t, "query", "--file", log, "--by", "detector", "--format", "csv")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "canary,0,1,0,0") || !strings.Contains(out, "path-entropy,1,0,0,0") {
		t.Fatalf("--by detector: got\n%s", out)
	}
}
