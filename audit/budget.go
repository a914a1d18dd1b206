package audit

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/budget"
	"github.com/airlock-dev/airlock/oplog"
)

// Budget defaults (per sandbox), the same as the DNS filter's audit budget.
const (
	DefaultBudgetRate            = 200.0 // individual deny/error records per second
	DefaultBudgetBurst           = 1000
	DefaultBudgetSummaryInterval = time.Second
	DefaultBudgetTopHosts        = 10
	MaxBudgetTopHosts            = 100
)

// ReasonAuditSummary is the reason id of a Budget's summary record (kind
// KindSummary): the requests it counts came while their sandbox was over its
// audit budget and have no record of their own.
const ReasonAuditSummary = "audit_summary"

// modeReport is policy's report mode (audit does not import policy): a
// "deny" in report mode was let through.
const modeReport = "report"

// BudgetConfig sizes each sandbox's budget. Zero fields take the Default*
// values.
type BudgetConfig struct {
	// Rate (records per second) and Burst size each sandbox's token bucket of
	// individual records that are budgeted (see Budget).
	Rate  float64
	Burst int
	// SummaryInterval is how long a summary window stays open: the first
	// record over budget opens it, its summary is written when it ends.
	SummaryInterval time.Duration
	// TopHosts is how many of the most-refused hosts a summary names
	// (1..MaxBudgetTopHosts).
	TopHosts int
}

func (c *BudgetConfig) applyDefaults() {
	if c.Rate == 0 {
		c.Rate = DefaultBudgetRate
	}
	if c.Burst == 0 {
		c.Burst = DefaultBudgetBurst
	}
	if c.SummaryInterval == 0 {
		c.SummaryInterval = DefaultBudgetSummaryInterval
	}
	if c.TopHosts == 0 {
		c.TopHosts = DefaultBudgetTopHosts
	}
}

// Validate names the first bad field.
func (c *BudgetConfig) Validate() error {
	switch {
	case !(c.Rate > 0) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("audit: budget rate %v: want a positive number of records per second", c.Rate)
	case c.Burst < 1:
		return fmt.Errorf("audit: budget burst %d: want at least 1", c.Burst)
	case c.SummaryInterval <= 0:
		return fmt.Errorf("audit: budget summary interval %v: want a positive duration", c.SummaryInterval)
	case c.TopHosts < 1 || c.TopHosts > MaxBudgetTopHosts:
		return fmt.Errorf("audit: budget top hosts %d: want 1..%d", c.TopHosts, MaxBudgetTopHosts)
	}
	return nil
}

// Budget is a Logger that bounds how many records of refused requests each
// sandbox writes one by one, so one sandbox sending a flood of requests it
// knows will be denied cannot fill the disk or the writer's queue for the
// others. It sits between the gateway and the Tally.
//
// What is budgeted: a record with a sandbox whose decision is deny or error
// and that shows nothing moved: no byte either way, no secret applied, not
// report mode (a report-mode deny was let through). Such a request was
// refused before it left; what an auditor needs of a flood of them is that it
// happened, from which sandbox, how many, why and to where, not one line
// each. Past the sandbox's token bucket (Rate, Burst) these records are
// counted into one summary record per SummaryInterval (kind "summary",
// reason audit_summary: counts by kind, decision, reason id and flag, the
// distinct and most frequent hosts, the window's start and end), so nothing
// is lost: every refused request is either its own record or counted in
// exactly one summary.
//
// What is never budgeted: allowed records (real egress, the evidence of what
// may have left), tunnel close records (bytes that moved), records of
// requests whose bytes moved or that carried a secret, records without a
// sandbox, and every record written through a reservation (room for it was
// taken because the request was about to leave). Their volume is bounded by
// real upstream traffic, which costs the sandbox a connection each, not by a
// cheap refusal.
//
// A summary the next logger refuses is carried into the sandbox's next
// window. While the next logger reports a failure (Err), over-budget records
// are passed on, not counted, so the caller sees the refusal. Forget writes a
// sandbox's last summary when it stops; Close writes every sandbox's.
type Budget struct {
	cfg  BudgetConfig
	next Logger
	log  *slog.Logger

	mu        sync.RWMutex
	sandboxes map[string]*budget.Meter
	closed    bool

	summaries, summarized, lost atomic.Uint64
}

var (
	_ Reserver = (*Budget)(nil)
	_ Logger   = (*Budget)(nil)
)

// BudgetStats are a Budget's counters since NewBudget.
type BudgetStats struct {
	Summaries  uint64 // summary records written
	Summarized uint64 // records counted into written summaries
	Lost       uint64 // records counted into a summary that could not be written at the end (logged at Error)
	Open       int    // summary windows open now
}

// NewBudget wraps next. logger may be nil.
func NewBudget(cfg BudgetConfig, next Logger, logger *slog.Logger) (*Budget, error) {
	cfg.applyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if next == nil {
		return nil, errors.New("audit: budget needs a logger to wrap")
	}
	return &Budget{
		cfg:       cfg,
		next:      next,
		log:       oplog.For(logger, "audit-budget"),
		sandboxes: make(map[string]*budget.Meter),
	}, nil
}

// budgeted reports whether r counts against its sandbox's budget (see Budget).
func budgeted(r *Record) bool {
	return r.Sandbox != "" &&
		(r.Decision == DecisionDeny || r.Decision == DecisionError) &&
		r.Mode != modeReport &&
		r.BytesUp == 0 && r.BytesDown == 0 && len(r.Secrets) == 0 &&
		r.Kind != KindSummary && Summarized(r) == 0
}

// Log passes r on, or counts it into its sandbox's summary when it is
// budgeted and the sandbox is over its budget.
func (b *Budget) Log(r *Record) error {
	if r == nil || !budgeted(r) {
		return b.next.Log(r)
	}
	s := b.sandbox(r.Sandbox)
	if s == nil || s.Allow(time.Now()) {
		return b.next.Log(r)
	}
	// Over budget. Count it only while the log accepts records: a broken log
	// must refuse, not swallow, so the caller knows.
	if err := b.Err(); err != nil {
		return b.next.Log(r)
	}
	if !s.Count(func(sum *budget.Summary) { countRefusal(sum, r) }) {
		return b.next.Log(r) // the sandbox was forgotten meanwhile
	}
	return nil
}

// Reserve passes through to the wrapped logger; the record written through
// the reservation is never budgeted.
func (b *Budget) Reserve() (Reservation, error) {
	rs, ok := b.next.(Reserver)
	if !ok {
		return nil, fmt.Errorf("audit: %T cannot reserve room for a record", b.next)
	}
	return rs.Reserve()
}

// Err passes on the wrapped logger's health (see Writer.Err).
func (b *Budget) Err() error {
	if h, ok := b.next.(Health); ok {
		return h.Err()
	}
	return nil
}

// sandbox returns id's budget, creating it; nil after Close.
func (b *Budget) sandbox(id string) *budget.Meter {
	b.mu.RLock()
	m, closed := b.sandboxes[id], b.closed
	b.mu.RUnlock()
	if m != nil || closed {
		return m
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	if m = b.sandboxes[id]; m == nil {
		m = budget.NewMeter(b.cfg.Rate, b.cfg.Burst, b.cfg.SummaryInterval, budget.Hooks{
			Write: func(s *budget.Summary, final bool) error { return b.write(id, s, final) },
			Lost:  func(s *budget.Summary, err error) { b.lostSummary(id, s, err) },
		}, time.Now())
		b.sandboxes[id] = m
	}
	return m
}

// Forget writes the sandbox's last summary, if it has one open, and drops its
// budget. Call it when the sandbox stops; a record that arrives later starts
// a fresh budget.
func (b *Budget) Forget(id string) {
	b.mu.Lock()
	m := b.sandboxes[id]
	delete(b.sandboxes, id)
	b.mu.Unlock()
	if m != nil {
		m.Close()
	}
}

// Close writes every sandbox's last summary; later records are passed on one
// by one. Close it before the logger it wraps.
func (b *Budget) Close() error {
	b.mu.Lock()
	b.closed = true
	all := b.sandboxes
	b.sandboxes = nil
	b.mu.Unlock()
	for _, m := range all {
		m.Close()
	}
	return nil
}

// Stats returns the counters.
func (b *Budget) Stats() BudgetStats {
	st := BudgetStats{Summaries: b.summaries.Load(), Summarized: b.summarized.Load(), Lost: b.lost.Load()}
	b.mu.RLock()
	defer b.mu.RUnlock()
	for _, m := range b.sandboxes {
		if m.Open() {
			st.Open++
		}
	}
	return st
}

// countRefusal counts r into a summary. A record with several reasons counts
// under each.
func countRefusal(s *budget.Summary, r *Record) {
	s.Count(SummaryByKindKey, r.Kind, 1)
	s.Count(SummaryByDecisionKey, r.Decision, 1)
	if len(r.Reasons) == 0 {
		s.Count(SummaryByReasonKey, "none", 1)
	}
	for _, x := range r.Reasons {
		s.Count(SummaryByReasonKey, x.ID, 1)
	}
	for _, f := range r.Flags {
		s.Count(SummaryByFlagKey, f, 1)
	}
	host := r.Host
	if host == "" {
		host = r.IP
	}
	if len(host) > shrinkString {
		host = host[:shrinkString]
	}
	s.AddName(host, 1)
}

// budgetFields are the names of a Budget summary's own fields.
var budgetFields = budget.Fields{Count: SummaryRequestsKey, Distinct: "distinct_hosts", Top: "top_hosts", Item: "host"}

func (b *Budget) write(id string, s *budget.Summary, final bool) error {
	if err := b.next.Log(summaryRecord(id, s, b.cfg.TopHosts, final)); err != nil {
		b.log.Error("audit summary refused", oplog.SandboxKey, id, SummaryRequestsKey, s.N, SummaryFinalKey, final, oplog.ErrorKey, err)
		return err
	}
	b.summaries.Add(1)
	b.summarized.Add(uint64(s.N))
	return nil
}

// lostSummary reports counts that could not be written after the sandbox
// stopped: they go to the operational log at Error, never silently away.
func (b *Budget) lostSummary(id string, s *budget.Summary, err error) {
	b.lost.Add(uint64(s.N))
	b.log.Error("audit summary lost", oplog.SandboxKey, id, SummaryRequestsKey, s.N,
		slog.Any(SummaryByDecisionKey, s.By[SummaryByDecisionKey]), slog.Any(SummaryByReasonKey, s.By[SummaryByReasonKey]),
		SummaryWindowStartKey, s.Start, oplog.ErrorKey, err)
}

// summaryRecord renders a sandbox's summary. Its decision is deny unless
// every counted record was an error.
func summaryRecord(sandbox string, s *budget.Summary, topN int, final bool) *Record {
	decision := DecisionDeny
	if s.By[SummaryByDecisionKey][DecisionError] == s.N {
		decision = DecisionError
	}
	return &Record{
		Sandbox:  sandbox,
		Kind:     KindSummary,
		Decision: decision,
		Reasons: []Reason{{ID: ReasonAuditSummary, Msg: fmt.Sprintf(
			"%d refused requests over the sandbox's audit budget, counted here instead of one record each", s.N)}},
		Extra: s.Extra(budgetFields, topN, final),
	}
}
