package dnsfilter

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/budget"
	"github.com/airlock-dev/airlock/oplog"
)

// ReasonAuditSummary is the reason id of a summary record: the queries it counts
// came while their sandbox was over its audit budget (Config.AuditRate and
// AuditBurst) and have no record of their own.
const ReasonAuditSummary = "dns_audit_summary"

// Summary count keys of the DNS filter's own (besides audit.SummaryByDecisionKey
// and audit.SummaryByFlagKey).
const (
	summaryByRCodeKey   = "by_rcode"
	summaryByQTypeKey   = "by_qtype"
	summaryForwardedKey = "forwarded"
)

// summaryFields are the names of a DNS summary's own fields.
var summaryFields = budget.Fields{Count: audit.SummaryQueriesKey, Distinct: "distinct_names", Top: "top_names", Item: "name"}

// summaryEntry is what a summary keeps of one query.
type summaryEntry struct {
	name      string // normalized, or the name as asked when it did not normalize; "" without a question
	qtype     string // "" without a question
	decision  string
	rcode     string // "" when the query was dropped unanswered
	flags     []string
	forwarded bool // the answer came from an upstream exchange, not the cache
}

// count adds e to s (s.N is counted by the Meter).
func (e *summaryEntry) count(s *budget.Summary) {
	fwd := 0 // counted even when 0: the summary always says how many were forwarded
	if e.forwarded {
		fwd = 1
	}
	s.Total(summaryForwardedKey, fwd)
	s.Count(audit.SummaryByDecisionKey, e.decision, 1)
	rc := e.rcode
	if rc == "" {
		rc = "dropped"
	}
	s.Count(summaryByRCodeKey, rc, 1)
	qt := e.qtype
	if qt == "" {
		qt = "none"
	}
	s.Count(summaryByQTypeKey, qt, 1)
	for _, fl := range e.flags {
		s.Count(audit.SummaryByFlagKey, fl, 1)
	}
	s.AddName(e.name, 1)
}

// newMeter returns sandbox s's audit budget: past it, queries are counted
// into one summary record per Config.AuditSummaryInterval.
func (s *sandboxServer) newMeter() *budget.Meter {
	f := s.f
	return budget.NewMeter(f.cfg.AuditRate, f.cfg.AuditBurst, f.cfg.AuditSummaryInterval, budget.Hooks{
		Write: s.writeSummary,
		Lost:  s.lostSummary,
		Windows: func(delta int) {
			f.metrics.overBudgetSbxs.Add(float64(delta))
		},
	}, time.Now())
}

func (s *sandboxServer) writeSummary(sum *budget.Summary, final bool) error {
	f := s.f
	if err := f.logAudit(summaryRecord(f.nextID(), s.sb.ID, sum, f.cfg.AuditTopNames, final)); err != nil {
		f.log.Error("audit summary refused", oplog.SandboxKey, s.sb.ID, audit.SummaryQueriesKey, sum.N, audit.SummaryFinalKey, final, oplog.ErrorKey, err)
		return err
	}
	f.metrics.summaries.Inc()
	f.metrics.summarized.Add(float64(sum.N))
	return nil
}

// lostSummary reports a summary that could not be written after the sandbox
// stopped: its counts go to the operational log at Error, never silently away.
func (s *sandboxServer) lostSummary(sum *budget.Summary, err error) {
	s.f.log.Error("audit summary lost", oplog.SandboxKey, s.sb.ID, audit.SummaryQueriesKey, sum.N,
		slog.Any(audit.SummaryByDecisionKey, sum.By[audit.SummaryByDecisionKey]), slog.Any(summaryByRCodeKey, sum.By[summaryByRCodeKey]),
		audit.SummaryWindowStartKey, sum.Start, oplog.ErrorKey, err)
}

// summaryRecord renders a summary as an audit record. Its decision is the
// summarized queries' decision when they all had the same one, else deny.
func summaryRecord(id, sandbox string, s *budget.Summary, topN int, final bool) *audit.Record {
	decision := audit.DecisionDeny
	if d := s.By[audit.SummaryByDecisionKey]; len(d) == 1 {
		for k := range d {
			decision = k
		}
	}
	flags := make([]string, 0, len(s.By[audit.SummaryByFlagKey]))
	for fl := range s.By[audit.SummaryByFlagKey] {
		flags = append(flags, fl)
	}
	slices.Sort(flags)
	return &audit.Record{
		ID:       id,
		Sandbox:  sandbox,
		Kind:     audit.KindDNS,
		Decision: decision,
		Port:     53,
		Reasons: []audit.Reason{{ID: ReasonAuditSummary, Msg: fmt.Sprintf(
			"%d queries over the sandbox's audit budget, counted here instead of one record each", s.N)}},
		Flags: flags,
		Extra: s.Extra(summaryFields, topN, final),
	}
}
