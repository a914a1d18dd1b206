package dnsfilter

import (
	"cmp"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/oplog"
	"github.com/airlock-dev/airlock/policy"
)

// ReasonAuditSummary is the reason id of a summary record: the queries it counts
// came while their sandbox was over its audit budget (Config.AuditRate and
// AuditBurst) and have no record of their own.
const ReasonAuditSummary = "dns_audit_summary"

// Bounds on one summary window's memory, whatever a sandbox sends.
const (
	// maxSummaryNames bounds the distinct names counted per window; queries for
	// further names are counted (queries, by_*) but not by name, and the summary
	// says distinct_names_capped.
	maxSummaryNames = 2048
	// maxSummaryKeys bounds the distinct values of each by_* count; further
	// values are counted under "other".
	maxSummaryKeys = 64
)

// auditBudget is a sandbox's token bucket for individual audit records, kept as
// a GCRA (one atomic theoretical arrival time, no lock): a take costs one load
// and one compare-and-swap.
type auditBudget struct {
	base      time.Time
	interval  int64 // nanoseconds per token
	tolerance int64 // nanoseconds of burst
	tat       atomic.Int64
}

func newAuditBudget(rate float64, burst int, now time.Time) *auditBudget {
	const maxNS = float64(1 << 62)
	interval := math.Min(math.Max(1e9/rate, 1), maxNS)
	tol := math.Min(interval*float64(burst), maxNS)
	return &auditBudget{base: now, interval: int64(interval), tolerance: int64(tol)}
}

// take reports whether a query at now may have its own audit record.
func (b *auditBudget) take(now time.Time) bool {
	t := int64(now.Sub(b.base))
	for {
		tat := b.tat.Load()
		next := max(tat, t) + b.interval
		if next-t > b.tolerance {
			return false
		}
		if b.tat.CompareAndSwap(tat, next) {
			return true
		}
	}
}

// summaryEntry is what a summary keeps of one query.
type summaryEntry struct {
	name      string // normalized, or the name as asked when it did not normalize; "" without a question
	qtype     string // "" without a question
	decision  string
	rcode     string // "" when the query was dropped unanswered
	flags     []string
	forwarded bool // the answer came from an upstream exchange, not the cache
}

// auditSummary is one window's counts for one sandbox.
type auditSummary struct {
	start, end  time.Time
	n           int
	forwarded   int
	byDecision  map[string]int
	byRCode     map[string]int
	byQType     map[string]int
	byFlag      map[string]int
	names       map[string]int
	namesCapped bool
}

func newAuditSummary(start time.Time) *auditSummary {
	return &auditSummary{
		start:      start,
		byDecision: make(map[string]int, 3),
		byRCode:    make(map[string]int, 4),
		byQType:    make(map[string]int, 4),
		byFlag:     make(map[string]int),
		names:      make(map[string]int),
	}
}

func countKey(m map[string]int, k string, n int) {
	if _, ok := m[k]; !ok && len(m) >= maxSummaryKeys {
		k = "other"
	}
	m[k] += n
}

func (s *auditSummary) add(e *summaryEntry) {
	s.n++
	if e.forwarded {
		s.forwarded++
	}
	countKey(s.byDecision, e.decision, 1)
	rc := e.rcode
	if rc == "" {
		rc = "dropped"
	}
	countKey(s.byRCode, rc, 1)
	qt := e.qtype
	if qt == "" {
		qt = "none"
	}
	countKey(s.byQType, qt, 1)
	for _, fl := range e.flags {
		countKey(s.byFlag, fl, 1)
	}
	s.addName(e.name, 1)
}

func (s *auditSummary) addName(name string, n int) {
	if name == "" {
		return
	}
	if _, ok := s.names[name]; !ok && len(s.names) >= maxSummaryNames {
		s.namesCapped = true
		return
	}
	s.names[name] += n
}

// merge adds o's counts to s (a summary whose write failed, carried into the
// next window).
func (s *auditSummary) merge(o *auditSummary) {
	if o.start.Before(s.start) {
		s.start = o.start
	}
	s.n += o.n
	s.forwarded += o.forwarded
	for _, p := range [][2]map[string]int{{s.byDecision, o.byDecision}, {s.byRCode, o.byRCode}, {s.byQType, o.byQType}, {s.byFlag, o.byFlag}} {
		for k, v := range p[1] {
			countKey(p[0], k, v)
		}
	}
	for k, v := range o.names {
		s.addName(k, v)
	}
	s.namesCapped = s.namesCapped || o.namesCapped
}

// nameCount is one entry of a summary's top_names.
type nameCount struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

// decision is the summary record's decision: the summarized queries' decision
// when they all had the same one, else deny.
func (s *auditSummary) decision() string {
	if len(s.byDecision) == 1 {
		for d := range s.byDecision {
			return d
		}
	}
	return audit.DecisionDeny
}

// record renders the summary as an audit record.
func (s *auditSummary) record(id string, sb policy.Sandbox, topN int, final bool) *audit.Record {
	top := make([]nameCount, 0, len(s.names))
	for n, c := range s.names {
		top = append(top, nameCount{n, c})
	}
	slices.SortFunc(top, func(a, b nameCount) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	top = top[:min(len(top), topN)]
	flags := make([]string, 0, len(s.byFlag))
	for fl := range s.byFlag {
		flags = append(flags, fl)
	}
	slices.Sort(flags)
	extra := map[string]json.RawMessage{}
	put := func(k string, v any) { extra[k], _ = json.Marshal(v) }
	put(audit.SummaryQueriesKey, s.n)
	put(audit.SummaryByDecisionKey, s.byDecision)
	put("by_rcode", s.byRCode)
	put("by_qtype", s.byQType)
	if len(s.byFlag) > 0 {
		put(audit.SummaryByFlagKey, s.byFlag)
	}
	put("forwarded", s.forwarded)
	put("distinct_names", len(s.names))
	if s.namesCapped {
		put("distinct_names_capped", true)
	}
	put("top_names", top)
	put(audit.SummaryWindowStartKey, s.start.UTC().Format(time.RFC3339Nano))
	put(audit.SummaryWindowEndKey, s.end.UTC().Format(time.RFC3339Nano))
	put(audit.SummaryWindowMSKey, s.end.Sub(s.start).Milliseconds())
	if final {
		put(audit.SummaryFinalKey, true)
	}
	return &audit.Record{
		ID:       id,
		Sandbox:  sb.ID,
		Kind:     audit.KindDNS,
		Decision: s.decision(),
		Port:     53,
		Reasons: []audit.Reason{{ID: ReasonAuditSummary, Msg: fmt.Sprintf(
			"%d queries over the sandbox's audit budget, counted here instead of one record each", s.n)}},
		Flags: flags,
		Extra: extra,
	}
}

// summarizer collects one sandbox's over-budget queries into one summary per
// Config.AuditSummaryInterval: the first summarized query opens a window and
// arms a timer; the timer writes the summary and closes the window. close
// writes what is left (the final summary). A summary the audit logger refuses is
// carried into the next window, so counts are never dropped while the sandbox
// runs.
type summarizer struct {
	f  *Filter
	sb policy.Sandbox

	writeMu sync.Mutex // serializes writes, so the final summary is the last

	mu     sync.Mutex
	cur    *auditSummary
	timer  *time.Timer
	closed bool
}

func newSummarizer(f *Filter, sb policy.Sandbox) *summarizer {
	return &summarizer{f: f, sb: sb}
}

// add counts e into the open window (opening one if none is). It reports false
// once the summarizer is closed: the caller then writes e's record itself.
// Windows open and close under z.mu, so they never overlap.
func (z *summarizer) add(e *summaryEntry) bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.closed {
		return false
	}
	if z.cur == nil {
		z.open(newAuditSummary(time.Now()))
	}
	z.cur.add(e)
	return true
}

// open makes sum the open window and arms its timer; z.mu is held.
func (z *summarizer) open(sum *auditSummary) {
	z.f.metrics.overBudgetSbxs.Inc()
	z.cur = sum
	z.timer = time.AfterFunc(z.f.cfg.AuditSummaryInterval, z.flushDue)
}

// flushDue writes the open window's summary (timer goroutine).
func (z *summarizer) flushDue() {
	z.writeMu.Lock()
	defer z.writeMu.Unlock()
	z.mu.Lock()
	sum := z.take()
	z.mu.Unlock()
	if sum == nil {
		return
	}
	z.f.metrics.overBudgetSbxs.Dec()
	if err := z.write(sum, false); err != nil {
		z.mu.Lock()
		defer z.mu.Unlock()
		if z.closed {
			z.lost(sum, err)
			return
		}
		if z.cur == nil {
			z.open(sum)
		} else {
			z.cur.merge(sum)
		}
	}
}

// close writes the final summary, if any query is still uncounted, and makes
// later adds fail. It waits for a summary being written.
func (z *summarizer) close() {
	z.writeMu.Lock()
	defer z.writeMu.Unlock()
	z.mu.Lock()
	z.closed = true
	sum := z.take()
	if z.timer != nil {
		z.timer.Stop()
	}
	z.mu.Unlock()
	if sum == nil {
		return
	}
	z.f.metrics.overBudgetSbxs.Dec()
	if err := z.write(sum, true); err != nil {
		z.lost(sum, err)
	}
}

// take closes the open window, if any, and returns it; z.mu is held.
func (z *summarizer) take() *auditSummary {
	sum := z.cur
	z.cur = nil
	if sum != nil {
		sum.end = time.Now()
	}
	return sum
}

func (z *summarizer) write(sum *auditSummary, final bool) error {
	rec := sum.record(z.f.nextID(), z.sb, z.f.cfg.AuditTopNames, final)
	err := z.f.logAudit(rec)
	if err != nil {
		z.f.log.Error("audit summary refused", oplog.SandboxKey, z.sb.ID, audit.SummaryQueriesKey, sum.n, audit.SummaryFinalKey, final, oplog.ErrorKey, err)
		return err
	}
	z.f.metrics.summaries.Inc()
	z.f.metrics.summarized.Add(float64(sum.n))
	return nil
}

// lost reports a summary that could not be written after the sandbox stopped:
// its counts go to the operational log at Error, never silently away.
func (z *summarizer) lost(sum *auditSummary, err error) {
	z.f.log.Error("audit summary lost", oplog.SandboxKey, z.sb.ID, audit.SummaryQueriesKey, sum.n,
		slog.Any(audit.SummaryByDecisionKey, sum.byDecision), slog.Any("by_rcode", sum.byRCode),
		audit.SummaryWindowStartKey, sum.start, oplog.ErrorKey, err)
}
