package audit_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
)

func TestTally(t *testing.T) {
	next := &audittest.Log{}
	ta := audit.NewTally()
	log := audit.Observe(next, ta)
	for _, r := range []*audit.Record{
		{Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Host: "pypi.org", Port: 443},
		{Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Host: "pypi.org", Port: 443},
		{Kind: audit.KindConnect, Decision: audit.DecisionDeny, Host: "evil.example", Port: 443},
		{Kind: audit.KindDNS, Decision: audit.DecisionDeny, QName: "x.exfil.example", Port: 53},
		{Kind: audit.KindClose, Host: "pypi.org"},
		{Kind: audit.KindExec, Exec: &audit.Exec{Phase: audit.ExecStart}},
	} {
		if err := log.Log(r); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(next.Records()); got != 6 {
		t.Fatalf("got %d records passed on, want 6", got)
	}
	rows := ta.Rows()
	if len(rows) != 3 || rows[0].Decision != audit.DecisionDeny || rows[2].Host != "pypi.org" || rows[2].Count != 2 {
		t.Fatalf("got rows %+v", rows)
	}
	var b bytes.Buffer
	ta.WriteSummary(&b, 10)
	out := b.String()
	for _, want := range []string{"2 allowed, 2 denied", "evil.example:443", "x.exfil.example ", "x2"} {
		if !strings.Contains(out, want) {
			t.Fatalf("summary %q lacks %q", out, want)
		}
	}
}

// TestTallyCountsSummaries: a DNS flood summarized by the filter, or drops
// summarized by netns, counts every event it stands for, not one.
func TestTallyCountsSummaries(t *testing.T) {
	ta := audit.NewTally()
	_ = ta.Log(&audit.Record{Kind: audit.KindDNS, Decision: audit.DecisionDeny, Port: 53, Extra: map[string]json.RawMessage{audit.SummaryQueriesKey: json.RawMessage("1757")}})
	_ = ta.Log(&audit.Record{Kind: audit.KindDrop, Decision: audit.DecisionDeny, Extra: map[string]json.RawMessage{audit.SummarySuppressedKey: json.RawMessage("40")}})
	_ = ta.Log(&audit.Record{Kind: audit.KindDNS, Decision: audit.DecisionDeny, QName: "x.example", Port: 53})
	total := 0
	for _, r := range ta.Rows() {
		total += r.Count
	}
	if total != 1757+40+1 {
		t.Fatalf("got %d events, want %d", total, 1757+40+1)
	}
}

func TestTallyBounded(t *testing.T) {
	ta := audit.NewTally()
	for i := 0; i < audit.MaxTallyKeys+50; i++ {
		_ = ta.Log(&audit.Record{Kind: audit.KindDNS, Decision: audit.DecisionDeny, QName: strings.Repeat("a", i%60+1) + ".x" + string(rune('a'+i%26)) + ".example", Port: i})
	}
	if n := len(ta.Rows()); n > audit.MaxTallyKeys+1 {
		t.Fatalf("got %d rows, want at most %d", n, audit.MaxTallyKeys+1)
	}
}

// TestErrReportsHealth: Writer.Err is nil while the writer accepts records and
// ErrClosed after Close; Observed passes it on, so the gateway and the DNS filter
// can stop traffic before it leaves rather than after its record is refused.
func TestErrReportsHealth(t *testing.T) {
	w, err := audit.New(audit.Config{File: filepath.Join(t.TempDir(), "a.jsonl")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ta := audit.Observe(w, audit.NewTally())
	if err := ta.Err(); err != nil {
		t.Fatalf("Err of a working writer = %v, want nil", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ta.Err(); !errors.Is(err, audit.ErrClosed) {
		t.Fatalf("Err after Close = %v, want ErrClosed", err)
	}
	if err := audit.Observe(audittest.Discard{}).Err(); err != nil {
		t.Fatalf("Err of a logger that cannot tell = %v, want nil", err)
	}
}

// Observed over a logger that cannot reserve room cannot either.
func TestObservedReserveNeedsAReserver(t *testing.T) {
	if _, err := audit.Observe(audittest.Discard{}, audit.NewTally()).Reserve(); err == nil {
		t.Fatal("Reserve through Observed over a logger that cannot reserve: got nil error")
	}
}

// TestTallyWouldDenyApart pins a bug from a user trial: run's egress summary
// counted report mode's would-denials (let through) as denials.
func TestTallyWouldDenyApart(t *testing.T) {
	tl := audit.NewTally()
	for _, r := range []*audit.Record{
		{Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Mode: audit.ModeEnforce, Host: "enforced.example", Port: 80},
		{Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Mode: audit.ModeReport, Host: "reported.example", Port: 80},
		{Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Mode: audit.ModeReport, Host: "reported.example", Port: 80},
		{Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Mode: audit.ModeReport, Host: "ok.example", Port: 80},
	} {
		if err := tl.Log(r); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	tl.WriteSummary(&b, 12)
	want := "airlock: egress summary: 1 allowed, 1 denied, 2 would deny (report mode: let through)\n" +
		"  deny  http    enforced.example:80                      x1\n" +
		"  would deny (report) http    reported.example:80                      x2\n" +
		"  allow http    ok.example:80                            x1\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
