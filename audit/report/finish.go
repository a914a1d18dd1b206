package report

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// Column names of Timeline.Rows and Cells.Rows.
var (
	timelineColumns = []string{"bucket", "sandbox", "kind", "decision", "count", "bytes_up", "bytes_down"}
	cellColumns     = []string{"sandbox", "kind", "decision", "dest", "reason", "count", "bytes_up", "bytes_down"}
)

// finish turns the aggregates into a Report (without the verification).
func (a *aggregator) finish() *Report {
	rep := &Report{Scope: a.scope}
	rep.Cells = a.cellsOut()
	rep.Timeline = a.timelineOut()
	rep.Sandboxes, rep.Totals = a.sandboxRows()
	rep.Destinations = a.destinationRows()
	rep.TopDenied = a.deniedRows()
	rep.Who = a.infoRows()
	rep.Bypass = a.bypassRows()
	rep.DNS = a.dnsOut()
	rep.Secrets = a.secretRows()
	rep.Findings = a.findingRows()
	rep.Drops = valuesSorted(a.drops, func(x, y *DropRow) int { return cmp.Compare(x.Sandbox, y.Sandbox) })
	rep.Budgets = valuesSorted(a.budgets, func(x, y *BudgetRow) int {
		return cmp.Or(cmp.Compare(x.Sandbox, y.Sandbox), cmp.Compare(x.Source, y.Source))
	})
	rep.Events = a.events
	if rep.Events == nil {
		rep.Events = []Event{}
	}
	a.scopeNotes(&rep.Scope, &rep.Timeline)
	return rep
}

func (a *aggregator) cellsOut() Cells {
	out := Cells{
		Dict:    Dict{Sandbox: a.sandboxes.list, Kind: a.kinds.list, Decision: a.decisions.list, Dest: a.dests.list, Reason: a.reasons.list},
		Columns: cellColumns,
		Rows:    make([][]int64, 0, len(a.cells)),
	}
	for k, t := range a.cells {
		out.Rows = append(out.Rows, []int64{int64(k.sb), int64(k.kind), int64(k.dec), int64(k.dest), int64(k.reason), t.n, t.up, t.down})
	}
	slices.SortFunc(out.Rows, compareRows)
	for _, p := range []*[]string{&out.Dict.Sandbox, &out.Dict.Kind, &out.Dict.Decision, &out.Dict.Dest, &out.Dict.Reason} {
		if *p == nil {
			*p = []string{}
		}
	}
	return out
}

func compareRows(x, y []int64) int {
	for i := range x {
		if c := cmp.Compare(x[i], y[i]); c != 0 {
			return c
		}
	}
	return 0
}

func (a *aggregator) timelineOut() Timeline {
	out := Timeline{BucketSeconds: a.width, Columns: timelineColumns, Rows: make([][]int64, 0, len(a.tl))}
	if !a.haveB {
		return out
	}
	out.Start = time.Unix(a.minB, 0).UTC()
	out.Buckets = int((a.maxB-a.minB)/a.width) + 1
	for k, t := range a.tl {
		out.Rows = append(out.Rows, []int64{(k.bucket - a.minB) / a.width, int64(k.sb), int64(k.kind), int64(k.dec), t.n, t.up, t.down})
	}
	slices.SortFunc(out.Rows, compareRows)
	return out
}

func (c *Counts) add(dec string, t *tally) {
	switch dec {
	case audit.DecisionAllow:
		c.Allowed += t.n
	case audit.DecisionDeny:
		c.Denied += t.n
	case audit.OutcomeWouldDeny:
		c.WouldDeny += t.n
	default:
		c.Errors += t.n
	}
	c.BytesUp += t.up
	c.BytesDown += t.down
}

func (c Counts) requests() int64 { return c.Allowed + c.Denied + c.WouldDeny + c.Errors }

// group sums the cells by the string key returns ("" skips a cell).
func (a *aggregator) group(key func(k cellKey) string) map[string]*Counts {
	out := map[string]*Counts{}
	for k, t := range a.cells {
		g := key(k)
		if g == "" {
			continue
		}
		c := out[g]
		if c == nil {
			c = &Counts{}
			out[g] = c
		}
		c.add(a.decisions.list[k.dec], t)
	}
	return out
}

func rowsOf(m map[string]*Counts) []Row {
	rows := make([]Row, 0, len(m))
	for k, c := range m {
		rows = append(rows, Row{Key: k, Counts: *c})
	}
	return rows
}

func (a *aggregator) sandboxRows() ([]Row, Counts) {
	rows := rowsOf(a.group(func(k cellKey) string { return a.sandboxes.list[k.sb] }))
	slices.SortFunc(rows, func(x, y Row) int { return cmp.Compare(x.Key, y.Key) })
	var tot Counts
	for _, r := range rows {
		tot.Allowed += r.Allowed
		tot.Denied += r.Denied
		tot.WouldDeny += r.WouldDeny
		tot.Errors += r.Errors
		tot.BytesUp += r.BytesUp
		tot.BytesDown += r.BytesDown
	}
	return rows, tot
}

// destinationRows is the top TopN destinations by requests (then bytes, then
// name) and one Other row for the rest.
func (a *aggregator) destinationRows() []Row {
	rows := rowsOf(a.group(func(k cellKey) string { return a.dests.list[k.dest] }))
	slices.SortFunc(rows, func(x, y Row) int {
		return cmp.Or(cmp.Compare(y.requests(), x.requests()),
			cmp.Compare(y.BytesUp+y.BytesDown, x.BytesUp+x.BytesDown), cmp.Compare(x.Key, y.Key))
	})
	if len(rows) <= a.cfg.TopN {
		return rows
	}
	other := Row{Key: Other}
	for _, r := range rows[a.cfg.TopN:] {
		other.Allowed += r.Allowed
		other.Denied += r.Denied
		other.WouldDeny += r.WouldDeny
		other.Errors += r.Errors
		other.BytesUp += r.BytesUp
		other.BytesDown += r.BytesDown
	}
	return append(rows[:a.cfg.TopN:a.cfg.TopN], other)
}

// deniedRows is the top TopN (destination, reason, outcome) by refusals
// (denied and errors: outcome deny) or report-mode would-denials (outcome
// would_deny), and one Other row for the rest.
func (a *aggregator) deniedRows() []DeniedRow {
	type dk struct {
		dest, reason int32
		would        bool
	}
	counts := map[dk]int64{}
	sbs := map[dk]map[int32]bool{}
	for k, t := range a.cells {
		dec := a.decisions.list[k.dec]
		if dec == audit.DecisionAllow || t.n == 0 {
			continue
		}
		d := dk{k.dest, k.reason, dec == audit.OutcomeWouldDeny}
		counts[d] += t.n
		if sbs[d] == nil {
			sbs[d] = map[int32]bool{}
		}
		sbs[d][k.sb] = true
	}
	rows := make([]DeniedRow, 0, len(counts))
	for d, n := range counts {
		outcome := audit.DecisionDeny
		if d.would {
			outcome = audit.OutcomeWouldDeny
		}
		samples := a.samples[sampleKey{a.dests.list[d.dest], a.reasons.list[d.reason], outcome}]
		if samples == nil {
			samples = []string{}
		}
		rows = append(rows, DeniedRow{Destination: a.dests.list[d.dest], Reason: a.reasons.list[d.reason], Outcome: outcome, Count: n, Sandboxes: len(sbs[d]), Samples: samples})
	}
	slices.SortFunc(rows, func(x, y DeniedRow) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), cmp.Compare(x.Destination, y.Destination), cmp.Compare(x.Reason, y.Reason), cmp.Compare(x.Outcome, y.Outcome))
	})
	if len(rows) <= a.cfg.TopN {
		return rows
	}
	other := DeniedRow{Destination: Other, Reason: Other}
	for _, r := range rows[a.cfg.TopN:] {
		other.Count += r.Count
	}
	return append(rows[:a.cfg.TopN:a.cfg.TopN], other)
}

func (a *aggregator) dnsOut() DNS {
	out := DNS{Queries: a.dnsQueries, Flagged: a.dnsFlagged}
	out.ByFlag = valuesSorted(a.flags, func(x, y *FlagRow) int {
		return cmp.Or(cmp.Compare(x.Sandbox, y.Sandbox), cmp.Compare(y.Count, x.Count), cmp.Compare(x.Flag, y.Flag))
	})
	names := make([]DNSName, 0, len(a.names))
	for k, n := range a.names {
		flags := make([]string, 0, len(n.flags))
		for f := range n.flags {
			flags = append(flags, f)
		}
		slices.Sort(flags)
		names = append(names, DNSName{Sandbox: k.sb, Domain: k.domain, Flags: flags, Count: n.count, Denied: n.denied,
			Distinct: len(n.names), Example: n.example})
	}
	slices.SortFunc(names, func(x, y DNSName) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), cmp.Compare(x.Domain, y.Domain), cmp.Compare(x.Sandbox, y.Sandbox))
	})
	if len(names) > a.cfg.TopN {
		a.folded["dns_names_shown"] += int64(len(names) - a.cfg.TopN)
		names = names[:a.cfg.TopN]
	}
	out.Names = names
	return out
}

func (a *aggregator) secretRows() []SecretUse {
	return valuesSorted(a.secrets, func(x, y *SecretUse) int {
		return cmp.Or(cmp.Compare(x.Sandbox, y.Sandbox), cmp.Compare(x.ID, y.ID), cmp.Compare(x.Version, y.Version),
			cmp.Compare(x.Destination, y.Destination), cmp.Compare(x.Where, y.Where), cmp.Compare(x.Decision, y.Decision))
	})
}

// valuesSorted returns m's values, copied, in cmpFn's order (never nil).
func valuesSorted[K comparable, V any](m map[K]*V, cmpFn func(x, y *V) int) []V {
	ptrs := make([]*V, 0, len(m))
	for _, v := range m {
		ptrs = append(ptrs, v)
	}
	slices.SortFunc(ptrs, cmpFn)
	out := make([]V, len(ptrs))
	for i, p := range ptrs {
		out[i] = *p
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// scopeNotes says, in the report, what was aggregated and what was folded.
func (a *aggregator) scopeNotes(s *Scope, tl *Timeline) {
	s.Counting = "Each decision record (http, connect, tls, tcp, dns, drop) counts one request; a summary record counts the events it stands for, split by its by_decision, under the destination (summarized). Bytes come from decision records and from tunnels' close records (kind close, counted as allowed, 0 requests)."
	s.Caps = map[string]int{"top_n": a.cfg.TopN, "max_buckets": a.cfg.MaxBuckets, "max_sandboxes": a.cfg.MaxSandboxes,
		"max_cells": a.cfg.MaxCells, "max_secret_uses": a.cfg.MaxSecretUses, "max_dns_flags": a.cfg.MaxDNSFlags, "max_events": a.cfg.MaxEvents}
	s.Notes = []string{
		fmt.Sprintf("%d records were read in one pass and folded into %d cells (sandbox, kind, decision, destination, first reason) and %d timeline rows of %s buckets; individual records are not embedded.",
			s.Records, len(a.cells), len(tl.Rows), time.Duration(tl.BucketSeconds)*time.Second),
		"The time filter narrows the timeline, the totals and the sandbox table (from the timeline's buckets); the destination, denial, DNS, secret and budget tables cover the whole selection.",
	}
	if len(a.folded) > 0 {
		s.Folded = a.folded
		for _, k := range sortedKeys(a.folded) {
			s.Notes = append(s.Notes, fmt.Sprintf("folded %s: %d records or events counted into an (other) row or left out of a bounded table (see caps)", k, a.folded[k]))
		}
	}
}
