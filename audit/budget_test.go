package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// recLogger records what it is given, safely from several goroutines; refuse,
// when set, decides per record whether Log fails, and health is its Err.
type recLogger struct {
	mu     sync.Mutex
	recs   []*Record
	refuse func(r *Record) error
	health error
}

func (l *recLogger) Log(r *Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refuse != nil {
		if err := l.refuse(r); err != nil {
			return err
		}
	}
	c := *r
	l.recs = append(l.recs, &c)
	return nil
}

func (l *recLogger) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.health
}

func (l *recLogger) records() []*Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Record(nil), l.recs...)
}

func deniedRecord(sandbox string, i int) *Record {
	return &Record{
		Sandbox: sandbox, Kind: "connect", Decision: DecisionDeny, Mode: "enforce",
		Host: fmt.Sprintf("h%d.exfil.example", i%7), Port: 443,
		Reasons: []Reason{{ID: "host_not_allowed", Msg: "not on the allowlist"}},
	}
}

// summaryCount returns how many requests a summary record stands for.
func summaryCount(t *testing.T, r *Record) int {
	t.Helper()
	var n int
	if err := json.Unmarshal(r.Extra[SummaryRequestsKey], &n); err != nil {
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
	cfg := testConfig(t)
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	tally := NewTally(w)
	b, err := NewBudget(BudgetConfig{Rate: 100, Burst: 50, SummaryInterval: 20 * time.Millisecond}, tally, nil)
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
	rep, err := VerifyFiles(VerifyOptions{PublicKey: w.PublicKey(), Complete: true}, cfg.File)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	count := map[string]struct{ individual, summarized, summaries int }{}
	for _, l := range readLines(t, cfg.File) {
		r := decodeLine(t, l)
		c := count[r.Sandbox]
		switch r.Kind {
		case KindSummary:
			c.summaries++
			c.summarized += summaryCount(t, &r)
			if r.Reasons[0].ID != ReasonAuditSummary || r.Decision != DecisionDeny {
				t.Errorf("summary record: got %+v", r)
			}
		case "connect":
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
		rec  Record
	}{
		{name: "allowed", rec: Record{Sandbox: "s", Kind: "http", Decision: DecisionAllow, Host: "pypi.org"}},
		{name: "tunnel close", rec: Record{Sandbox: "s", Kind: "close", Host: "pypi.org", BytesUp: 10}},
		{name: "report mode deny", rec: Record{Sandbox: "s", Kind: "http", Decision: DecisionDeny, Mode: modeReport, Host: "x.example"}},
		{name: "deny after bytes up", rec: Record{Sandbox: "s", Kind: "http", Decision: DecisionDeny, Host: "x.example", BytesUp: 1}},
		{name: "deny after bytes down", rec: Record{Sandbox: "s", Kind: "tcp", Decision: DecisionDeny, Host: "x.example", BytesDown: 1}},
		{name: "deny with a secret", rec: Record{Sandbox: "s", Kind: "http", Decision: DecisionDeny, Host: "api.example", Secrets: []Secret{{ID: "k"}}}},
		{name: "no sandbox", rec: Record{Kind: "http", Decision: DecisionDeny, Host: "x.example"}},
		{name: "dns summary", rec: Record{Sandbox: "s", Kind: "dns", Decision: DecisionDeny, Extra: map[string]json.RawMessage{"queries": json.RawMessage("9")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := &recLogger{}
			b, err := NewBudget(BudgetConfig{Rate: 0.001, Burst: 1, SummaryInterval: time.Hour}, next, nil)
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
			if got := len(next.records()); got != 20 {
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
		next := &recLogger{}
		b, _ := NewBudget(BudgetConfig{Rate: 0.001, Burst: 1, SummaryInterval: time.Hour}, next, nil)
		for i := range 20 {
			_ = b.Log(deniedRecord("s", i))
		}
		b.Close()
		recs := next.records()
		if len(recs) != 2 || recs[1].Kind != KindSummary || summaryCount(t, recs[1]) != 19 {
			t.Fatalf("got %d records (%+v), want 1 individual and a final summary of 19", len(recs), recs)
		}
	})
}

// A record written through a reservation is never folded: room for it was
// taken because its request was about to leave.
func TestBudgetReservationNeverFolded(t *testing.T) {
	cfg := testConfig(t)
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBudget(BudgetConfig{Rate: 0.001, Burst: 1, SummaryInterval: time.Hour}, NewTally(w), nil)
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
	if rep, err := VerifyFiles(VerifyOptions{}, cfg.File); err != nil || rep.Records != 5 {
		t.Fatalf("verify: got %d records, %v; want 5 individual", rep.Records, err)
	}
	if _, err := (&Budget{next: &recLogger{}}).Reserve(); err == nil {
		t.Fatal("Reserve over a logger that cannot reserve: got nil error")
	}
}

// A summary the log refuses is carried into the next window: its counts are
// in a later summary, not lost.
func TestBudgetCarriesRefusedSummary(t *testing.T) {
	refused := 0
	next := &recLogger{}
	next.refuse = func(r *Record) error {
		if r.Kind == KindSummary && refused == 0 {
			refused++
			return ErrOverflow
		}
		return nil
	}
	b, err := NewBudget(BudgetConfig{Rate: 0.001, Burst: 1, SummaryInterval: 5 * time.Millisecond}, next, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := b.Log(deniedRecord("s", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Wait (bounded) for the first, refused, summary attempt.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		next.mu.Lock()
		r := refused
		next.mu.Unlock()
		if r > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no summary was attempted within 5s")
		}
	}
	for i := range 5 {
		_ = b.Log(deniedRecord("s", i))
	}
	b.Close()
	total := 0
	for _, r := range next.records() {
		if r.Kind == KindSummary {
			total += summaryCount(t, r)
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
	next := &recLogger{}
	b, err := NewBudget(BudgetConfig{Rate: 0.001, Burst: 1, SummaryInterval: time.Hour}, next, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Log(deniedRecord("s", 0)); err != nil {
		t.Fatal(err)
	}
	next.mu.Lock()
	next.health = broken
	next.refuse = func(*Record) error { return broken }
	next.mu.Unlock()
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
	next := &recLogger{}
	b, err := NewBudget(BudgetConfig{Rate: 0.001, Burst: 1, SummaryInterval: time.Hour}, next, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		_ = b.Log(deniedRecord("a", i))
		_ = b.Log(deniedRecord("b", i))
	}
	b.Forget("a")
	var final *Record
	for _, r := range next.records() {
		if r.Kind == KindSummary {
			if r.Sandbox != "a" || final != nil {
				t.Fatalf("unexpected summary %+v", r)
			}
			final = r
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
		cfg  BudgetConfig
		want string
	}{
		{name: "negative rate", cfg: BudgetConfig{Rate: -1}, want: "budget rate"},
		{name: "negative burst", cfg: BudgetConfig{Burst: -1}, want: "budget burst"},
		{name: "top hosts", cfg: BudgetConfig{TopHosts: MaxBudgetTopHosts + 1}, want: "budget top hosts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewBudget(tt.cfg, &recLogger{}, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

type discardLogger struct{}

func (discardLogger) Log(*Record) error { return nil }

// BenchmarkBudgetLog is the budget's own cost per record: an allowed record
// (passed straight on), a denial under budget, and one folded into a summary.
func BenchmarkBudgetLog(b *testing.B) {
	for _, bc := range []struct {
		name string
		rec  *Record
		rate float64
	}{
		{"allow", &Record{Sandbox: "s", Kind: "http", Decision: DecisionAllow, Host: "pypi.org"}, 1},
		{"deny-under-budget", deniedRecord("s", 1), 1e12},
		{"deny-folded", deniedRecord("s", 1), 0.001},
	} {
		b.Run(bc.name, func(b *testing.B) {
			bu, err := NewBudget(BudgetConfig{Rate: bc.rate, Burst: 1, SummaryInterval: time.Hour}, discardLogger{}, nil)
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
