package audit

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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

// Bounds on one summary window's memory, whatever a sandbox sends.
const (
	maxBudgetHosts = 2048 // distinct hosts counted by name per window
	maxBudgetKeys  = 64   // distinct values of each by_* count; more go under "other"
)

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
	sandboxes map[string]*sandboxBudget
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
		sandboxes: make(map[string]*sandboxBudget),
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
	if s == nil || s.bucket.take(time.Now()) {
		return b.next.Log(r)
	}
	// Over budget. Count it only while the log accepts records: a broken log
	// must refuse, not swallow, so the caller knows.
	if err := b.Err(); err != nil {
		return b.next.Log(r)
	}
	if !s.add(r) {
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
func (b *Budget) sandbox(id string) *sandboxBudget {
	b.mu.RLock()
	s, closed := b.sandboxes[id], b.closed
	b.mu.RUnlock()
	if s != nil || closed {
		return s
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	if s = b.sandboxes[id]; s == nil {
		s = &sandboxBudget{b: b, id: id, bucket: newTokenBucket(b.cfg.Rate, b.cfg.Burst, time.Now())}
		b.sandboxes[id] = s
	}
	return s
}

// Forget writes the sandbox's last summary, if it has one open, and drops its
// budget. Call it when the sandbox stops; a record that arrives later starts
// a fresh budget.
func (b *Budget) Forget(id string) {
	b.mu.Lock()
	s := b.sandboxes[id]
	delete(b.sandboxes, id)
	b.mu.Unlock()
	if s != nil {
		s.close()
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
	for _, s := range all {
		s.close()
	}
	return nil
}

// Stats returns the counters.
func (b *Budget) Stats() BudgetStats {
	st := BudgetStats{Summaries: b.summaries.Load(), Summarized: b.summarized.Load(), Lost: b.lost.Load()}
	b.mu.RLock()
	defer b.mu.RUnlock()
	for _, s := range b.sandboxes {
		s.mu.Lock()
		if s.cur != nil {
			st.Open++
		}
		s.mu.Unlock()
	}
	return st
}

// tokenBucket is a GCRA token bucket: one atomic theoretical arrival time, no
// lock; a take costs a load and a compare-and-swap.
type tokenBucket struct {
	base      time.Time
	interval  int64 // nanoseconds per token
	tolerance int64 // nanoseconds of burst
	tat       atomic.Int64
}

func newTokenBucket(rate float64, burst int, now time.Time) *tokenBucket {
	const maxNS = float64(1 << 62)
	interval := math.Min(math.Max(1e9/rate, 1), maxNS)
	tol := math.Min(interval*float64(burst), maxNS)
	return &tokenBucket{base: now, interval: int64(interval), tolerance: int64(tol)}
}

// take reports whether one more record at now fits the budget.
func (t *tokenBucket) take(now time.Time) bool {
	at := int64(now.Sub(t.base))
	for {
		tat := t.tat.Load()
		next := max(tat, at) + t.interval
		if next-at > t.tolerance {
			return false
		}
		if t.tat.CompareAndSwap(tat, next) {
			return true
		}
	}
}

// sandboxBudget is one sandbox's bucket and open summary window. Windows
// open and close under mu, so they never overlap; writeMu orders summary
// writes so the final one is the last.
type sandboxBudget struct {
	b      *Budget
	id     string
	bucket *tokenBucket

	writeMu sync.Mutex

	mu     sync.Mutex
	cur    *budgetSummary
	timer  *time.Timer
	closed bool
}

// add counts r into the open window, opening one if none is; false once the
// sandbox is closed.
func (s *sandboxBudget) add(r *Record) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.cur == nil {
		s.open(newBudgetSummary(time.Now()))
	}
	s.cur.add(r)
	return true
}

// open makes sum the open window and arms its timer; s.mu is held.
func (s *sandboxBudget) open(sum *budgetSummary) {
	s.cur = sum
	s.timer = time.AfterFunc(s.b.cfg.SummaryInterval, s.flushDue)
}

// take closes the open window, if any, and returns it; s.mu is held.
func (s *sandboxBudget) take() *budgetSummary {
	sum := s.cur
	s.cur = nil
	if sum != nil {
		sum.end = time.Now()
	}
	return sum
}

// flushDue writes the window's summary when its interval ends; a refused one
// is carried into the next window.
func (s *sandboxBudget) flushDue() {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	sum := s.take()
	s.mu.Unlock()
	if sum == nil {
		return
	}
	if err := s.write(sum, false); err != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch {
		case s.closed:
			s.lostSummary(sum, err)
		case s.cur == nil:
			s.open(sum)
		default:
			s.cur.merge(sum)
		}
	}
}

// close writes the final summary, if any record is still uncounted, and makes
// later adds fail.
func (s *sandboxBudget) close() {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	s.closed = true
	sum := s.take()
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
	if sum == nil {
		return
	}
	if err := s.write(sum, true); err != nil {
		s.lostSummary(sum, err)
	}
}

func (s *sandboxBudget) write(sum *budgetSummary, final bool) error {
	if err := s.b.next.Log(sum.record(s.id, s.b.cfg.TopHosts, final)); err != nil {
		s.b.log.Error("audit summary refused", oplog.SandboxKey, s.id, SummaryRequestsKey, sum.n, SummaryFinalKey, final, oplog.ErrorKey, err)
		return err
	}
	s.b.summaries.Add(1)
	s.b.summarized.Add(uint64(sum.n))
	return nil
}

// lostSummary reports counts that could not be written after the sandbox
// stopped: they go to the operational log at Error, never silently away.
func (s *sandboxBudget) lostSummary(sum *budgetSummary, err error) {
	s.b.lost.Add(uint64(sum.n))
	s.b.log.Error("audit summary lost", oplog.SandboxKey, s.id, SummaryRequestsKey, sum.n,
		slog.Any(SummaryByDecisionKey, sum.byDecision), slog.Any("by_reason", sum.byReason),
		SummaryWindowStartKey, sum.start, oplog.ErrorKey, err)
}

// budgetSummary is one window's counts for one sandbox.
type budgetSummary struct {
	start, end  time.Time
	n           int
	byKind      map[string]int
	byDecision  map[string]int
	byReason    map[string]int
	byFlag      map[string]int
	hosts       map[string]int
	hostsCapped bool
}

func newBudgetSummary(start time.Time) *budgetSummary {
	return &budgetSummary{
		start:      start,
		byKind:     make(map[string]int, 4),
		byDecision: make(map[string]int, 2),
		byReason:   make(map[string]int, 4),
		byFlag:     make(map[string]int),
		hosts:      make(map[string]int),
	}
}

func countBudgetKey(m map[string]int, k string, n int) {
	if _, ok := m[k]; !ok && len(m) >= maxBudgetKeys {
		k = "other"
	}
	m[k] += n
}

// add counts r. A record with several reasons counts under each.
func (s *budgetSummary) add(r *Record) {
	s.n++
	countBudgetKey(s.byKind, r.Kind, 1)
	countBudgetKey(s.byDecision, r.Decision, 1)
	if len(r.Reasons) == 0 {
		countBudgetKey(s.byReason, "none", 1)
	}
	for _, x := range r.Reasons {
		countBudgetKey(s.byReason, x.ID, 1)
	}
	for _, f := range r.Flags {
		countBudgetKey(s.byFlag, f, 1)
	}
	host := r.Host
	if host == "" {
		host = r.IP
	}
	s.addHost(host, 1)
}

func (s *budgetSummary) addHost(host string, n int) {
	if host == "" {
		return
	}
	if len(host) > shrinkString {
		host = host[:shrinkString]
	}
	if _, ok := s.hosts[host]; !ok && len(s.hosts) >= maxBudgetHosts {
		s.hostsCapped = true
		return
	}
	s.hosts[host] += n
}

// merge adds o's counts to s (a summary whose write failed, carried on).
func (s *budgetSummary) merge(o *budgetSummary) {
	if o.start.Before(s.start) {
		s.start = o.start
	}
	s.n += o.n
	for _, p := range [][2]map[string]int{{s.byKind, o.byKind}, {s.byDecision, o.byDecision}, {s.byReason, o.byReason}, {s.byFlag, o.byFlag}} {
		for k, v := range p[1] {
			countBudgetKey(p[0], k, v)
		}
	}
	for h, v := range o.hosts {
		s.addHost(h, v)
	}
	s.hostsCapped = s.hostsCapped || o.hostsCapped
}

// hostCount is one entry of a summary's top_hosts.
type hostCount struct {
	Host  string `json:"host"`
	Count int    `json:"count"`
}

// record renders the summary. Its decision is deny unless every counted
// record was an error.
func (s *budgetSummary) record(sandbox string, topN int, final bool) *Record {
	top := make([]hostCount, 0, len(s.hosts))
	for h, c := range s.hosts {
		top = append(top, hostCount{h, c})
	}
	slices.SortFunc(top, func(a, b hostCount) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Host, b.Host)
	})
	top = top[:min(len(top), topN)]
	extra := map[string]json.RawMessage{}
	put := func(k string, v any) { extra[k], _ = json.Marshal(v) }
	put(SummaryRequestsKey, s.n)
	put("by_kind", s.byKind)
	put(SummaryByDecisionKey, s.byDecision)
	put("by_reason", s.byReason)
	if len(s.byFlag) > 0 {
		put(SummaryByFlagKey, s.byFlag)
	}
	put("distinct_hosts", len(s.hosts))
	if s.hostsCapped {
		put("distinct_hosts_capped", true)
	}
	put("top_hosts", top)
	put(SummaryWindowStartKey, s.start.UTC().Format(time.RFC3339Nano))
	put(SummaryWindowEndKey, s.end.UTC().Format(time.RFC3339Nano))
	put(SummaryWindowMSKey, s.end.Sub(s.start).Milliseconds())
	if final {
		put(SummaryFinalKey, true)
	}
	decision := DecisionDeny
	if s.byDecision[DecisionError] == s.n {
		decision = DecisionError
	}
	return &Record{
		Sandbox:  sandbox,
		Kind:     KindSummary,
		Decision: decision,
		Reasons: []Reason{{ID: ReasonAuditSummary, Msg: fmt.Sprintf(
			"%d refused requests over the sandbox's audit budget, counted here instead of one record each", s.n)}},
		Extra: extra,
	}
}
