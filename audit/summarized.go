package audit

import (
	"encoding/json"

	"github.com/airlock-dev/airlock/budget"
)

// Extra keys under which a record that stands for many events gives their
// count; Tally counts each event.
const (
	SummaryRequestsKey   = "requests"   // a Budget's summary (kind summary)
	SummaryQueriesKey    = "queries"    // the DNS filter's audit-budget summary (kind dns)
	SummarySuppressedKey = "suppressed" // netns's rate-limited drops (kind drop)
)

// Extra keys every audit-budget summary record carries, a Budget's (kind
// KindSummary) and the DNS filter's (kind KindDNS), besides its count. The
// fields are written in one place, budget.Summary.Extra.
const (
	SummaryByDecisionKey  = "by_decision" // count per decision
	SummaryByKindKey      = "by_kind"     // count per record kind (a Budget's)
	SummaryByReasonKey    = "by_reason"   // count per reason id (a Budget's)
	SummaryByFlagKey      = "by_flag"     // count per flag, when any
	SummaryWindowStartKey = budget.WindowStartKey
	SummaryWindowEndKey   = budget.WindowEndKey
	SummaryWindowMSKey    = budget.WindowMSKey
	SummaryFinalKey       = budget.FinalKey // the sandbox's last summary, written as it stops
)

// SummaryCounts is what a record that stands for many events says it counts:
// the DNS filter's over-budget queries, netns's rate-limited drops, a
// Budget's refused requests.
type SummaryCounts struct {
	N          int64            // events counted; 0 for an ordinary record
	ByDecision map[string]int64 // nil when the record does not say
	ByKind     map[string]int64 // nil when the record does not say
	ByReason   map[string]int64 // a Budget's, by reason id
	ByFlag     map[string]int64 // the DNS filter's, by flag
	Final      bool             // the sandbox's last summary
}

// SummaryOf parses r's summary fields, the one reader of them. N is 0 for an
// ordinary record (or a malformed count).
func SummaryOf(r *Record) SummaryCounts {
	var c SummaryCounts
	if r == nil || len(r.Extra) == 0 {
		return c
	}
	for _, k := range [...]string{SummaryQueriesKey, SummarySuppressedKey, SummaryRequestsKey} {
		if raw, ok := r.Extra[k]; ok {
			var n int64
			if json.Unmarshal(raw, &n) == nil && n > 0 {
				c.N = n
				break
			}
		}
	}
	if c.N == 0 {
		return c
	}
	c.ByDecision = extraCounts(r, SummaryByDecisionKey)
	c.ByKind = extraCounts(r, SummaryByKindKey)
	c.ByReason = extraCounts(r, SummaryByReasonKey)
	c.ByFlag = extraCounts(r, SummaryByFlagKey)
	var final bool
	c.Final = json.Unmarshal(r.Extra[SummaryFinalKey], &final) == nil && final
	return c
}

// Summarized returns how many events a summary record stands for, or 0 for
// an ordinary record (SummaryOf(r).N).
func Summarized(r *Record) int {
	return int(SummaryOf(r).N)
}

func extraCounts(r *Record, key string) map[string]int64 {
	raw, ok := r.Extra[key]
	if !ok {
		return nil
	}
	var m map[string]int64
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	return m
}
