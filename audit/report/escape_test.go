package report_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/report"
	"github.com/airlock-dev/airlock/audit/report/reporttest"
	"github.com/airlock-dev/airlock/termtext"
)

// spoof is a destination that reads as "pypi.org/exe.evil" once a browser
// applies its right-to-left override, with an isolate, a zero-width space,
// a CSI and a C1 CSI besides.
const spoof = "evil\u202eexe/gro.ipyp\u2066\u200b\x1b[2K\u009b2K"

// TestBrowserReportEscapes pins the bug where the report page drew a logged
// host, sandbox id, reason or DNS name as it was, so a bidi override
// reordered the row it was in and invisible characters hid text: every text
// the page shows, drawn by the template or by the script, is escaped as
// termtext escapes it, and the embedded data stays exact.
func TestBrowserReportEscapes(t *testing.T) {
	bin := reporttest.Chromium(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "audit.jsonl")
	w, err := audit.New(audit.Config{File: logPath}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)
	for _, r := range []*audit.Record{
		{TS: ts, Sandbox: "sb-" + spoof, Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Host: spoof, Port: 443,
			Method: "GET", Path: "/", Reasons: []audit.Reason{{ID: "deny_" + spoof, Msg: spoof}}},
		{TS: ts.Add(time.Second), Sandbox: "sb-1", Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Host: "pypi.org", Port: 443, Method: "GET", Path: "/"},
	} {
		if err := w.Log(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := report.Build(context.Background(), report.Config{Files: []string{logPath}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "report.html")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteHTML(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var data strings.Builder
	if err := rep.WriteJSON(&data); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(data.String(), "\u202e") {
		t.Errorf("the report's JSON: got %s, want the values exact", data.String())
	}

	page := reporttest.Open(t, bin, path)
	page.Choose("f-sandbox", "sb-"+spoof)
	text := page.Text()
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		if r != '\n' && r != '\t' && r != '\\' && !termtext.Safe(r) {
			t.Errorf("the page shows a raw %U: ...%q...", r, text[max(0, i-40):min(len(text), i+40)])
			break
		}
		i += size
	}
	// The sandbox, destination and denied-destination tables, the reason,
	// the filter's state and its option each show it escaped.
	want := termtext.Escape(spoof)
	if n := strings.Count(text, want); n < 5 {
		t.Errorf("the page shows %s %d times, want at least 5:\n%s", want, n, text)
	}
	if s := page.Shown(); !containsString(s.Dests, want) {
		t.Errorf("got destinations %q, want %q among them", s.Dests, want)
	}
}
