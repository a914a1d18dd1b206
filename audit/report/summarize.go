package report

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/airlock-dev/airlock/audit"
)

// Dimensions Summarize groups by.
const (
	ByHost    = "host"    // the destination: host (or DNS name, or IP) and port
	BySandbox = "sandbox" // the sandbox id
	ByReason  = "reason"  // the first reason id
	ByKind    = "kind"    // the record kind
)

// Summarize counts the records of files that pass f, grouped by one
// dimension, with the report's counting (Scope.Counting) and its bounds
// (destinations past DefaultMaxCells fold into Other): the rows of `airlock
// audit query --by`, most requests first.
func Summarize(ctx context.Context, files []string, f audit.Filter, by string) ([]Row, error) {
	if by == ByDetector {
		return summarizeDetectors(ctx, files, f) // findings.go
	}
	cfg := Config{Files: files}
	cfg.applyDefaults()
	a := newAggregator(&cfg)
	var key func(k cellKey) string
	switch by {
	case ByHost:
		key = func(k cellKey) string { return a.dests.list[k.dest] }
	case BySandbox:
		key = func(k cellKey) string { return a.sandboxes.list[k.sb] }
	case ByReason:
		key = func(k cellKey) string { return cmp.Or(a.reasons.list[k.reason], "(none)") }
	case ByKind:
		key = func(k cellKey) string { return a.kinds.list[k.kind] }
	default:
		return nil, fmt.Errorf("report: cannot group by %q: want %s, %s, %s, %s or %s", by, ByHost, BySandbox, ByReason, ByKind, ByDetector)
	}
	err := audit.Query(ctx, files, f, func(r *audit.Record) error {
		a.add(r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	rows := rowsOf(a.group(key))
	slices.SortFunc(rows, func(x, y Row) int {
		return cmp.Or(cmp.Compare(y.requests(), x.requests()),
			cmp.Compare(y.BytesUp+y.BytesDown, x.BytesUp+x.BytesDown), cmp.Compare(x.Key, y.Key))
	})
	return rows, nil
}
