package report_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/report"
)

// writeModeLog writes, through the real writer, 4 enforced denials, 4
// report-mode denials (let through: they carry bytes, the server answered)
// and 2 allows, in one sandbox.
func writeModeLog(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	w, err := audit.New(audit.Config{File: filepath.Join(dir, "audit.jsonl"), SigningKeyFile: filepath.Join(dir, "audit.key")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	rec := func(i int, host, dec, mode string) *audit.Record {
		r := &audit.Record{TS: base.Add(time.Duration(i) * time.Second), Sandbox: "sb-mode", Kind: audit.KindHTTP,
			Decision: dec, Mode: mode, Host: host, Port: 80, Method: "POST", Path: "/upload"}
		if dec == audit.DecisionDeny {
			r.Reasons = []audit.Reason{{ID: "default_deny"}}
		}
		if dec == audit.DecisionAllow || mode == audit.ModeReport {
			r.Status, r.BytesUp, r.BytesDown = 200, 10, 20
		} else {
			r.Status = 403
		}
		return r
	}
	var recs []*audit.Record
	for i := range 4 {
		recs = append(recs, rec(i, "enforced.example", audit.DecisionDeny, audit.ModeEnforce),
			rec(10+i, "reported.example", audit.DecisionDeny, audit.ModeReport))
	}
	recs = append(recs, rec(20, "ok.example", audit.DecisionAllow, audit.ModeReport), rec(21, "ok.example", audit.DecisionAllow, audit.ModeEnforce))
	for _, r := range recs {
		if err := w.Log(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "audit.jsonl")
}

// TestReportModeDenialsApart pins a bug from a user trial: the report's
// "8 denied" included 4 report-mode denials whose requests reached the
// server. They are counted as would_deny, in the totals, the per-sandbox and
// per-destination rows, top denials and the timeline, and the page says so.
func TestReportModeDenialsApart(t *testing.T) {
	rep, err := report.Build(context.Background(), report.Config{Files: []string{writeModeLog(t)}})
	if err != nil {
		t.Fatal(err)
	}
	wantTotals := report.Counts{Allowed: 2, Denied: 4, WouldDeny: 4, BytesUp: 60, BytesDown: 120}
	if rep.Totals != wantTotals {
		t.Errorf("totals: got %+v, want %+v", rep.Totals, wantTotals)
	}
	if len(rep.Sandboxes) != 1 || rep.Sandboxes[0].Counts != wantTotals {
		t.Errorf("sandboxes: got %+v, want one row of %+v", rep.Sandboxes, wantTotals)
	}
	dests := map[string]report.Counts{}
	for _, d := range rep.Destinations {
		dests[d.Key] = d.Counts
	}
	if got, want := dests["reported.example:80"], (report.Counts{WouldDeny: 4, BytesUp: 40, BytesDown: 80}); got != want {
		t.Errorf("destination reported.example:80: got %+v, want %+v", got, want)
	}
	if got, want := dests["enforced.example:80"], (report.Counts{Denied: 4}); got != want {
		t.Errorf("destination enforced.example:80: got %+v, want %+v", got, want)
	}
	wantTop := []report.DeniedRow{
		{Destination: "enforced.example:80", Reason: "default_deny", Outcome: audit.DecisionDeny, Count: 4, Sandboxes: 1, Samples: []string{"POST /upload"}},
		{Destination: "reported.example:80", Reason: "default_deny", Outcome: audit.OutcomeWouldDeny, Count: 4, Sandboxes: 1, Samples: []string{"POST /upload"}},
	}
	if len(rep.TopDenied) != len(wantTop) {
		t.Fatalf("top denied: got %+v, want %+v", rep.TopDenied, wantTop)
	}
	for i, w := range wantTop {
		if !reflect.DeepEqual(rep.TopDenied[i], w) {
			t.Errorf("top denied %d: got %+v, want %+v", i, rep.TopDenied[i], w)
		}
	}
	byDec := map[string]int64{}
	for _, r := range rep.Timeline.Rows {
		byDec[rep.Cells.Dict.Decision[r[3]]] += r[4]
	}
	if byDec[audit.DecisionDeny] != 4 || byDec[audit.OutcomeWouldDeny] != 4 || byDec[audit.DecisionAllow] != 2 {
		t.Errorf("timeline by decision: got %v, want deny 4, would_deny 4, allow 2", byDec)
	}
	var page bytes.Buffer
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`<div class="card denied" data-k="denied"><span class="v" data-v="4">`,
		`<div class="card would" data-k="would_deny"><span class="v" data-v="4">`,
		`data-col="would_deny" data-v="4"`,
	} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("page: missing %q", want)
		}
	}
}

// TestReportWhoAndBypass pins what an auditor could not learn from the
// report: what ran (argv of exec records) and for whom (owner, labels from
// the creation record, pod), which requests stand behind a top denial, and
// which connections got around the proxy (captured transparently, or aimed
// at an IP address) as such.
func TestReportWhoAndBypass(t *testing.T) {
	dir := t.TempDir()
	w, err := audit.New(audit.Config{File: filepath.Join(dir, "audit.jsonl"), SigningKeyFile: filepath.Join(dir, "audit.key")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	pod := &audit.Pod{Namespace: "ml", Name: "trainer-0", ServiceAccount: "trainer"}
	deny := []audit.Reason{{ID: "default_deny"}}
	for _, r := range []*audit.Record{
		{Kind: audit.KindSandbox, Decision: audit.DecisionAllow, Reasons: []audit.Reason{{ID: "created"}},
			Extra: map[string]json.RawMessage{"labels": json.RawMessage(`{"team":"ml"}`)}},
		{Kind: audit.KindExec, Exec: &audit.Exec{Phase: audit.ExecStart, Argv: []string{"python3", "train.py"}}},
		{Kind: audit.KindExec, Exec: &audit.Exec{Phase: audit.ExecStart, Argv: []string{"python3", "train.py"}}},
		{Kind: audit.KindExec, Exec: &audit.Exec{Phase: audit.ExecStart, Argv: []string{"curl", "https://evil.example"}}},
		{Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Host: "evil.example", Port: 80, Method: "POST", Path: "/upload", Reasons: deny},
		{Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Host: "evil.example", Port: 80, Method: "GET", Path: "/x", Reasons: deny},
		{Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Host: "evil.example", Port: 80, Method: "POST", Path: "/upload", Reasons: deny},
		{Kind: audit.KindTLS, Decision: audit.DecisionDeny, Host: "evil.example", Port: 443, Reasons: deny},
		{Kind: audit.KindConnect, Decision: audit.DecisionDeny, Host: "198.18.0.7", Port: 443, Reasons: deny},
		{Kind: audit.KindConnect, Decision: audit.DecisionAllow, Host: "pypi.org", Port: 443},
	} {
		r.TS, r.Sandbox, r.Owner, r.Pod = ts, "sb-ml", "4242", pod
		if err := w.Log(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := report.Build(context.Background(), report.Config{Files: []string{filepath.Join(dir, "audit.jsonl")}})
	if err != nil {
		t.Fatal(err)
	}
	wantWho := []report.SandboxInfo{{Sandbox: "sb-ml", Owner: "4242", Labels: map[string]string{"team": "ml"}, Pod: pod, Execs: 3,
		Argv: []string{"python3 train.py", "curl https://evil.example"}}}
	if !reflect.DeepEqual(rep.Who, wantWho) {
		t.Errorf("who: got %+v, want %+v", rep.Who, wantWho)
	}
	var samples []string
	for _, d := range rep.TopDenied {
		if d.Destination == "evil.example:80" {
			samples = d.Samples
		}
	}
	if want := []string{"POST /upload", "GET /x"}; !reflect.DeepEqual(samples, want) {
		t.Errorf("samples of evil.example:80: got %v, want %v", samples, want)
	}
	wantBypass := []report.BypassRow{
		{Sandbox: "sb-ml", Destination: "198.18.0.7:443", How: report.BypassDirectIP, Outcome: audit.DecisionDeny, Count: 1},
		{Sandbox: "sb-ml", Destination: "evil.example:443", How: report.BypassTransparent, Outcome: audit.DecisionDeny, Count: 1},
	}
	if !reflect.DeepEqual(rep.Bypass, wantBypass) {
		t.Errorf("bypass: got %+v, want %+v", rep.Bypass, wantBypass)
	}
	var page bytes.Buffer
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<table id="t-who">`, `<table id="t-bypass">`} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("page: missing %q", want)
		}
	}
}
