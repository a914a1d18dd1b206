package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// modeLog writes, through the real writer, the creation records of two
// labelled sandboxes (owners 0 and 4242), an enforced and a report-mode
// denial in each, and an allow.
func modeLog(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	w, err := audit.New(audit.Config{File: filepath.Join(dir, "audit.jsonl"), SigningKeyFile: filepath.Join(dir, "audit.key")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, sb := range []struct{ id, owner, team string }{{"sb-ml", "0", "ml"}, {"sb-web", "4242", "web"}} {
		labels, _ := json.Marshal(map[string]string{"team": sb.team})
		recs := []*audit.Record{
			{Sandbox: sb.id, Owner: sb.owner, Kind: audit.KindSandbox, Decision: audit.DecisionAllow,
				Reasons: []audit.Reason{{ID: "created"}}, Extra: map[string]json.RawMessage{"labels": labels}},
			{Sandbox: sb.id, Owner: sb.owner, Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Mode: audit.ModeEnforce,
				Host: "enforced.example", Port: 80, Reasons: []audit.Reason{{ID: "default_deny"}}},
			{Sandbox: sb.id, Owner: sb.owner, Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Mode: audit.ModeReport,
				Host: "reported.example", Port: 80, Reasons: []audit.Reason{{ID: "exfil_destination"}}, Status: 200},
			{Sandbox: sb.id, Owner: sb.owner, Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Mode: audit.ModeEnforce,
				Host: "ok.example", Port: 80, Reasons: []audit.Reason{{ID: "allowlist"}}, Status: 200},
		}
		for _, r := range recs {
			r.TS = ts
			if err := w.Log(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "audit.jsonl")
}

// TestAuditQueryModeFilters pins a bug from a user trial: a report-mode
// denial (let through) looked like an enforced one in audit query. The table
// and CSV show the mode and the outcome would_deny, --by counts it apart,
// and --mode, --reason, --label and --owner select records.
func TestAuditQueryModeFilters(t *testing.T) {
	log := modeLog(t)
	tests := []struct {
		name  string
		args  []string
		lines int
	}{
		{"report mode", []string{"--mode", "report"}, 2},
		{"enforce mode", []string{"--mode", "enforce", "--decision", "deny"}, 2},
		{"reason", []string{"--reason", "exfil_destination"}, 2},
		{"label", []string{"--label", "team=ml"}, 4},
		{"label and mode", []string{"--label", "team=web", "--mode", "report"}, 1},
		{"two labels", []string{"--label", "team=web", "--label", "x=y"}, 0},
		{"owner uid", []string{"--owner", "4242"}, 4},
		{"owner name", []string{"--owner", "root"}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := runAudit(t, append([]string{"query", "--file", log, "--format", "json"}, tt.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Count(out, "\n"); got != tt.lines {
				t.Errorf("got %d records, want %d:\n%s", got, tt.lines, out)
			}
		})
	}

	out, err := runAudit(t, "query", "--file", log, "--sandbox", "sb-ml", "--kind", "http")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	wantRows := [][]string{
		{"TIME", "SEQ", "SANDBOX", "KIND", "DECISION", "MODE", "DESTINATION"},
		{"sb-ml", "http", "deny", "enforce", "enforced.example:80"},
		{"sb-ml", "http", "would_deny", "report", "reported.example:80"},
		{"sb-ml", "http", "allow", "enforce", "ok.example:80"},
	}
	if len(lines) != len(wantRows) {
		t.Fatalf("table: got %q, want %d lines", out, len(wantRows))
	}
	for i, w := range wantRows {
		if !strings.Contains(strings.Join(strings.Fields(lines[i]), " "), strings.Join(w, " ")) {
			t.Errorf("table line %d: got %q, want it to hold %q", i, lines[i], strings.Join(w, " "))
		}
	}

	out, err = runAudit(t, "query", "--file", log, "--format", "csv", "--mode", "report", "--sandbox", "sb-web")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(out, ",0,0,report,would_deny,4242,\n") { // then the findings column, empty
		t.Errorf("csv: got %q, want the row to end in mode report, outcome would_deny, owner 4242", out)
	}

	out, err = runAudit(t, "query", "--file", log, "--by", "host", "--format", "csv")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"host,allowed,denied,would_deny,errors,bytes_up,bytes_down\n", "\nenforced.example:80,0,2,0,0,0,0\n", "\nreported.example:80,0,0,2,0,0,0\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("--by host: got %q, want it to hold %q", out, want)
		}
	}

	for _, bad := range [][]string{
		{"--mode", "audit"},
		{"--label", "team"},
		{"--owner", "airlock-no-such-user-x"},
	} {
		if _, err := runAudit(t, append([]string{"query", "--file", log}, bad...)...); exitCode(err) != 2 || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%v: got %v, want exit 2 naming %s", bad, err, bad[0])
		}
	}
}

// TestAuditReportFilters: audit report takes --mode, --owner and --label as
// audit query does, and counts report mode's denials apart.
func TestAuditReportFilters(t *testing.T) {
	log := modeLog(t)
	tests := []struct {
		name string
		args []string
		want string // totals
	}{
		{"all", nil, `"allowed":2,"denied":2,"would_deny":2,"errors":0`},
		{"report mode", []string{"--mode", "report"}, `"allowed":0,"denied":0,"would_deny":2,"errors":0`},
		{"owner", []string{"--owner", "4242"}, `"allowed":1,"denied":1,"would_deny":1,"errors":0`},
		{"label", []string{"--label", "team=ml", "--mode", "enforce"}, `"allowed":1,"denied":1,"would_deny":0,"errors":0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := runAudit(t, append([]string{"report", log, "--format", "json"}, tt.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			var rep struct {
				Totals json.RawMessage `json:"totals"`
			}
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(rep.Totals), tt.want) {
				t.Errorf("totals: got %s, want %s", rep.Totals, tt.want)
			}
		})
	}
	if _, err := runAudit(t, "report", log, "--mode", "audit"); exitCode(err) != 2 || !strings.Contains(err.Error(), "--mode") {
		t.Errorf("--mode audit: got %v, want exit 2 naming --mode", err)
	}
}
