package audit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/test/poll"
)

// writerConfig is a real writer's config in a temporary directory.
func writerConfig(t *testing.T) audit.Config {
	t.Helper()
	dir := t.TempDir()
	return audit.Config{File: filepath.Join(dir, "audit.jsonl"), SigningKeyFile: filepath.Join(dir, "audit.key")}
}

func deniedRecord(sandbox string, i int) *audit.Record {
	return &audit.Record{
		Sandbox: sandbox, Kind: audit.KindConnect, Decision: audit.DecisionDeny, Mode: "enforce",
		Host: fmt.Sprintf("h%d.exfil.example", i%7), Port: 443,
		Reasons: []audit.Reason{{ID: "host_not_allowed", Msg: "not on the allowlist"}},
	}
}

// summaryCount returns how many requests a summary record stands for.
func summaryCount(t *testing.T, r *audit.Record) int {
	t.Helper()
	var n int
	if err := json.Unmarshal(r.Extra[audit.SummaryRequestsKey], &n); err != nil {
		t.Fatalf("summary without a count: %+v", r)
	}
	return n
}

// TestBudgetFloodCountsEveryRequest: one sandbox floods denied requests past
// its budget. Every request is either its own record or counted in exactly
// one summary (individual + summarized == sent), the chain verifies, the Tally
// counts them all, and another sandbox's denials, under its own budget, are
// all written one by one.
func TestBudgetFloodCountsEveryRequest(t *testing.T) {
	cfg := writerConfig(t)
	w, err := audit.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	tally := audit.NewTally()
	b, err := audit.NewBudget(audit.BudgetConfig{Rate: 100, Burst: 50, SummaryInterval: 20 * time.Millisecond}, audit.Observe(w, tally), nil)
	if err != nil {
		t.Fatal(err)
	}
	const flood, quiet, workers = 3000, 40, 4
	var wg sync.WaitGroup
	for g := range workers { // the flooding sandbox logs from several goroutines at once
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < flood; i += workers {
				if err := b.Log(deniedRecord("alk-flood", i)); err != nil {
					t.Errorf("flood record %d: %v", i, err)
					return
				}
			}
		}()
	}
	sentQuiet := 0
	for i := range quiet {
		if err := b.Log(deniedRecord("alk-quiet", i)); err != nil {
			t.Fatal(err)
		}
		sentQuiet++
		time.Sleep(time.Millisecond) // spread over the flood
	}
	wg.Wait()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := audit.VerifyFiles(audit.VerifyOptions{PublicKey: w.PublicKey(), Complete: true}, cfg.File)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	count := map[string]struct{ individual, summarized, summaries int }{}
	for _, r := range audittest.ReadLog(t, cfg.File) {
		c := count[r.Sandbox]
		switch r.Kind {
		case audit.KindSummary:
			c.summaries++
			c.summarized += summaryCount(t, &r)
			if r.Reasons[0].ID != audit.ReasonAuditSummary || r.Decision != audit.DecisionDeny {
				t.Errorf("summary record: got %+v", r)
			}
		case audit.KindConnect:
			c.individual++
		}
		count[r.Sandbox] = c
	}
	f := count["alk-flood"]
	if f.individual+f.summarized != flood {
		t.Fatalf("flood sandbox: got %d individual + %d summarized = %d, want %d", f.individual, f.summarized, f.individual+f.summarized, flood)
	}
	if f.summaries == 0 || f.individual >= flood {
		t.Fatalf("flood sandbox: got %d individual records and %d summaries, want the budget to fold most", f.individual, f.summaries)
	}
	q := count["alk-quiet"]
	if q.individual != sentQuiet || q.summaries != 0 {
		t.Fatalf("quiet sandbox: got %d individual, %d summaries; want %d individual, none summarized", q.individual, q.summaries, sentQuiet)
	}
	if rep.Records != f.individual+f.summaries+q.individual {
		t.Fatalf("verify: got %d records, want %d", rep.Records, f.individual+f.summaries+q.individual)
	}
	tallied := 0
	for _, r := range tally.Rows() {
		tallied += r.Count
	}
	if tallied != flood+sentQuiet {
		t.Fatalf("tally: got %d requests, want %d", tallied, flood+sentQuiet)
	}
	if st := b.Stats(); int(st.Summarized) != f.summarized || int(st.Summaries) != f.summaries || st.Lost != 0 {
		t.Fatalf("stats: got %+v, want %d summaries of %d, none lost", st, f.summaries, f.summarized)
	}
}

// TestBudgetNeverFoldsEgress: records that show something left (or may have)
// are written one by one however far over budget the sandbox is.
func TestBudgetNeverFoldsEgress(t *testing.T) {
	tests := []struct {
		name string
		rec  audit.Record
	}{
		{name: "allowed", rec: audit.Record{Sandbox: "s", Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Host: "pypi.org"}},
		{name: "tunnel close", rec: audit.Record{Sandbox: "s", Kind: audit.KindClose, Host: "pypi.org", BytesUp: 10}},
		{name: "report mode deny", rec: audit.Record{Sandbox: "s", Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Mode: "report", Host: "x.example"}},
		{name: "deny after bytes up", rec: audit.Record{Sandbox: "s", Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Host: "x.example", BytesUp: 1}},
		{name: "deny after bytes down", rec: audit.Record{Sandbox: "s", Kind: audit.KindTCP, Decision: audit.DecisionDeny, Host: "x.example", BytesDown: 1}},
		{name: "deny with a secret", rec: audit.Record{Sandbox: "s", Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Host: "api.example", Secrets: []audit.Secret{{ID: "k"}}}},
		{name: "no sandbox", rec: audit.Record{Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Host: "x.example"}},
		{name: "dns summary", rec: audit.Record{Sandbox: "s", Kind: audit.KindDNS, Decision: audit.DecisionDeny, Extra: map[string]json.RawMessage{audit.SummaryQueriesKey: json.RawMessage("9")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := &audittest.Log{}
			b, err := audit.NewBudget(audit.BudgetConfig{Rate: 0.001, Burst: 1, SummaryInterval: time.Hour}, next, nil)
			if err != nil {
				t.Fatal(err)
			}
			for range 20 {
				r := tt.rec
				if err := b.Log(&r); err != nil {
					t.Fatal(err)
				}
			}
			b.Close()
			if got := len(next.Records()); got != 20 {
				t.Fatalf("got %d records passed on, want all 20 one by one", got)
			}
			if st := b.Stats(); st.Summaries != 0 {
				t.Fatalf("got %d summaries, want none", st.Summaries)
			}
		})
	}
	t.Run("budgeted control", func(t *testing.T) {
		// The same setup folds a plain denial: the rows above would fail if the
		// exemptions were missing.
		next := &audittest.Log{}
		b, _ := audit.NewBudget(audit.BudgetConfig{Rate: 0.001, Burst: 1, SummaryInterval: time.Hour}, next, nil)
		for i := range 20 {
			_ = b.Log(deniedRecord("s", i))
		}
		b.Close()
		recs := next.Records()
		if len(recs) != 2 || recs[1].Kind != audit.KindSummary || summaryCount(t, &recs[1]) != 19 {
			t.Fatalf("got %d records (%+v), want 1 individual and a final summary of 19", len(recs), recs)
		}
	})
}

// A record written through a reservation is never folded: room for it was
// taken because its request was about to leave.
func TestBudgetReservationNeverFolded(t *testing.T) {
	cfg := writerConfig(t)
	w, err := audit.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := audit.NewBudget(audit.BudgetConfig{Rate: 0.001, Burst: 1, SummaryInterval: time.Hour}, audit.Observe(w, audit.NewTally()), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		res, err := b.Reserve()
		if err != nil {
			t.Fatal(err)
		}
		if err := res.Log(deniedRecord("s", i)); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if rep, err := audit.VerifyFiles(audit.VerifyOptions{}, cfg.File); err != nil || rep.Records != 5 {
		t.Fatalf("verify: got %d records, %v; want 5 individual", rep.Records, err)
	}
	nb, err := audit.NewBudget(audit.BudgetConfig{}, audittest.Discard{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	if _, err := nb.Reserve(); err == nil {
		t.Fatal("Reserve over a logger that cannot reserve: got nil error")
	}
}

// A summary the log refuses is carried into the next window: its counts are
// in a later summary, not lost.
func TestBudgetCarriesRefusedSummary(t *testing.T) {
	refused := 0 // guarded by next's lock, under which the refusal runs
	next := &audittest.Log{}
	next.Refuse(func(r *audit.Record) error {
		if r.Kind == audit.KindSummary && refused == 0 {
			refused++
			return audit.ErrOverflow
		}
		return nil
	})
	b, err := audit.NewBudget(audit.BudgetConfig{Rate: 0.001, Burst: 1, SummaryInterval: 5 * time.Millisecond}, next, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := b.Log(deniedRecord("s", i)); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 5*time.Second, "the first, refused, summary attempt", func() bool { return next.Refused() > 0 })
	for i := range 5 {
		_ = b.Log(deniedRecord("s", i))
	}
	b.Close()
	total := 0
	for _, r := range next.Records() {
		if r.Kind == audit.KindSummary {
			total += summaryCount(t, &r)
		} else {
			total++
		}
	}
	if total != 15 {
		t.Fatalf("got %d requests accounted for, want 15", total)
	}
}

// While the log is failing, an over-budget denial is passed on (and refused)
// rather than counted into a summary that could not be written.
func TestBudgetPassesRefusalWhileLogFails(t *testing.T) {
	broken := errors.New("audit: writer failed: write: no space left on device")
	next := &audittest.Log{}
	b, err := audit.NewBudget(audit.BudgetConfig{Rate: 0.001, Burst: 1, SummaryInterval: time.Hour}, next, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Log(deniedRecord("s", 0)); err != nil {
		t.Fatal(err)
	}
	next.Break(broken)
	if err := b.Log(deniedRecord("s", 1)); !errors.Is(err, broken) {
		t.Fatalf("over-budget Log while the log fails: got %v, want the log's error", err)
	}
	if err := b.Err(); !errors.Is(err, broken) {
		t.Fatalf("Err: got %v, want the wrapped logger's", err)
	}
	if st := b.Stats(); st.Open != 0 {
		t.Fatalf("got %d open windows, want none (nothing counted while failing)", st.Open)
	}
	b.Close()
}

// Forget writes the stopping sandbox's last summary (final) and leaves the
// others' windows open.
func TestBudgetForgetWritesFinalSummary(t *testing.T) {
	next := &audittest.Log{}
	b, err := audit.NewBudget(audit.BudgetConfig{Rate: 0.001, Burst: 1, SummaryInterval: time.Hour}, next, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		_ = b.Log(deniedRecord("a", i))
		_ = b.Log(deniedRecord("b", i))
	}
	b.Forget("a")
	var final *audit.Record
	for _, r := range next.Records() {
		if r.Kind == audit.KindSummary {
			if r.Sandbox != "a" || final != nil {
				t.Fatalf("unexpected summary %+v", r)
			}
			final = &r
		}
	}
	if final == nil || summaryCount(t, final) != 3 || string(final.Extra["final"]) != "true" {
		t.Fatalf("final summary of a: got %+v, want 3 requests, final", final)
	}
	if st := b.Stats(); st.Open != 1 {
		t.Fatalf("got %d open windows, want 1 (b's)", st.Open)
	}
	b.Close()
	if st := b.Stats(); st.Summarized != 6 || st.Summaries != 2 {
		t.Fatalf("stats after Close: got %+v, want 2 summaries of 6", st)
	}
}

func TestBudgetConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  audit.BudgetConfig
		want string
	}{
		{name: "negative rate", cfg: audit.BudgetConfig{Rate: -1}, want: "budget rate"},
		{name: "negative burst", cfg: audit.BudgetConfig{Burst: -1}, want: "budget burst"},
		{name: "top hosts", cfg: audit.BudgetConfig{TopHosts: audit.MaxBudgetTopHosts + 1}, want: "budget top hosts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := audit.NewBudget(tt.cfg, &audittest.Log{}, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

// BenchmarkBudgetLog is the budget's own cost per record: an allowed record
// (passed straight on), a denial under budget, and one folded into a summary.
func BenchmarkBudgetLog(b *testing.B) {
	for _, bc := range []struct {
		name string
		rec  *audit.Record
		rate float64
	}{
		{"allow", &audit.Record{Sandbox: "s", Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Host: "pypi.org"}, 1},
		{"deny-under-budget", deniedRecord("s", 1), 1e12},
		{"deny-folded", deniedRecord("s", 1), 0.001},
	} {
		b.Run(bc.name, func(b *testing.B) {
			bu, err := audit.NewBudget(audit.BudgetConfig{Rate: bc.rate, Burst: 1, SummaryInterval: time.Hour}, audittest.Discard{}, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for range b.N {
				_ = bu.Log(bc.rec)
			}
			b.StopTimer()
			bu.Close()
		})
	}
}
