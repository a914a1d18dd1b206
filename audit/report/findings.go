package report

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// FindingRow is what content inspection found with one detector, in one
// place, for one sandbox at one destination, with one outcome: never a value
// (the fingerprints tell repeats of one value apart).
type FindingRow struct {
	Detector    string    `json:"detector"`
	Class       string    `json:"class"`
	Where       string    `json:"where"`
	Sandbox     string    `json:"sandbox"`
	Destination string    `json:"destination"`
	Decision    string    `json:"decision"` // the record's outcome (audit.Outcome)
	Count       int64     `json:"count"`
	Values      int       `json:"values"` // distinct fingerprints, capped at maxFindingValues
	First       time.Time `json:"first"`
	Last        time.Time `json:"last"`
}

// maxFindingValues bounds the fingerprints a row keeps to count values.
const maxFindingValues = 64

// DefaultMaxFindingRows bounds the findings table; further rows fold.
const DefaultMaxFindingRows = 2000

type findingKey struct{ det, class, where, sb, dest, dec string }

// findingAgg folds the records' findings into rows.
type findingAgg struct {
	rows map[findingKey]*findingAcc
}

type findingAcc struct {
	FindingRow
	fps map[string]bool
}

// add counts r's findings.
func (a *aggregator) findings(sb string, r *audit.Record) {
	if len(r.Findings) == 0 {
		return
	}
	if a.fnd.rows == nil {
		a.fnd.rows = map[findingKey]*findingAcc{}
	}
	dest, dec := destOf(r), audit.Outcome(r)
	for i := range r.Findings {
		f := &r.Findings[i]
		k := findingKey{f.Detector, f.Class, f.Where, sb, dest, dec}
		acc := a.fnd.rows[k]
		if acc == nil {
			if len(a.fnd.rows) >= DefaultMaxFindingRows {
				a.folded["findings"]++
				continue
			}
			acc = &findingAcc{FindingRow: FindingRow{Detector: f.Detector, Class: f.Class, Where: f.Where, Sandbox: sb,
				Destination: dest, Decision: dec, First: r.TS}, fps: map[string]bool{}}
			a.fnd.rows[k] = acc
		}
		acc.Count++
		acc.Last = r.TS
		if f.Fingerprint != "" && len(acc.fps) < maxFindingValues {
			acc.fps[f.Fingerprint] = true
		}
	}
}

// findingRows is the findings table: canaries first, then credentials, then
// by count.
func (a *aggregator) findingRows() []FindingRow {
	rank := func(class string) int {
		switch class {
		case audit.FindingClassCanary:
			return 0
		case audit.FindingClassCredential:
			return 1
		}
		return 2
	}
	rows := valuesSorted(a.fnd.rows, func(x, y *findingAcc) int {
		return cmp.Or(cmp.Compare(rank(x.Class), rank(y.Class)), cmp.Compare(y.Count, x.Count),
			cmp.Compare(x.Detector, y.Detector), cmp.Compare(x.Destination, y.Destination), cmp.Compare(x.Sandbox, y.Sandbox),
			cmp.Compare(x.Where, y.Where), cmp.Compare(x.Decision, y.Decision))
	})
	out := make([]FindingRow, len(rows))
	for i, r := range rows {
		out[i] = r.FindingRow
		out[i].Values = len(r.fps)
	}
	return out
}

// ByDetector groups Summarize by content-inspection detector: each record
// with findings counts once under each detector it names.
const ByDetector = "detector"

// summarizeDetectors is Summarize by detector.
func summarizeDetectors(ctx context.Context, files []string, f audit.Filter) ([]Row, error) {
	rows := map[string]*Row{}
	err := audit.Query(ctx, files, f, func(r *audit.Record) error {
		seen := map[string]bool{}
		for _, x := range r.Findings {
			if seen[x.Detector] {
				continue
			}
			seen[x.Detector] = true
			row := rows[x.Detector]
			if row == nil {
				if len(rows) >= DefaultMaxFindingRows {
					continue
				}
				row = &Row{Key: x.Detector}
				rows[x.Detector] = row
			}
			switch audit.Outcome(r) {
			case audit.DecisionAllow:
				row.Allowed++
			case audit.DecisionDeny:
				row.Denied++
			case audit.OutcomeWouldDeny:
				row.WouldDeny++
			default:
				row.Errors++
			}
			row.BytesUp += r.BytesUp
			row.BytesDown += r.BytesDown
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	out := valuesSorted(rows, func(x, y *Row) int {
		return cmp.Or(cmp.Compare(y.requests(), x.requests()), cmp.Compare(x.Key, y.Key))
	})
	return out, nil
}
