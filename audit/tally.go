package audit

import (
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/airlock-dev/airlock/termtext"
)

// Tally is an Observer that counts decisions by destination, so `airlock
// run` and the daemon's summary print a one-screen egress summary without
// reading the audit file back. It keeps one counter per (kind, decision,
// host), bounded by MaxTallyKeys; past that, destinations are folded into
// "(other)". It is also a Logger that writes nowhere (Log counts), for
// counters kept apart from the log.
type Tally struct {
	mu     sync.Mutex
	counts map[tallyKey]int
}

// MaxTallyKeys bounds the distinct destinations a Tally keeps.
const MaxTallyKeys = 4096

type tallyKey struct {
	kind, decision, host string
	port                 int
}

var (
	_ Observer = (*Tally)(nil)
	_ Logger   = (*Tally)(nil)
)

// NewTally returns an empty Tally.
func NewTally() *Tally {
	return &Tally{counts: make(map[tallyKey]int)}
}

// Observe counts r (decisions only: close, checkpoint, exec and sandbox
// lifecycle records are not egress decisions).
func (t *Tally) Observe(r *Record) { t.count(r) }

// Log counts r; it never fails.
func (t *Tally) Log(r *Record) error {
	t.count(r)
	return nil
}

// count adds r to the counts if it is an egress decision.
func (t *Tally) count(r *Record) {
	if r == nil {
		return
	}
	if r.Decision != "" && r.Kind != KindClose && r.Kind != KindExec && r.Kind != KindCheckpoint && r.Kind != KindSandbox {
		host := r.Host
		if r.Kind == KindDNS && r.QName != "" {
			host = r.QName
		}
		if host == "" {
			host = r.IP
		}
		n := Summarized(r)
		if n > 0 && host == "" {
			host = "(summarized)"
		}
		n = max(n, 1)
		// A report-mode denial was let through: counted apart (would_deny).
		k := tallyKey{kind: r.Kind, decision: Outcome(r), host: host, port: r.Port}
		t.mu.Lock()
		if _, ok := t.counts[k]; !ok && len(t.counts) >= MaxTallyKeys {
			k.host, k.port = "(other)", 0
		}
		t.counts[k] += n
		t.mu.Unlock()
	}
}

// TallyRow is one line of a summary.
type TallyRow struct {
	Decision string // allow, deny, error or OutcomeWouldDeny
	Kind     string
	Host     string
	Port     int
	Count    int
}

// Rows returns the counts, denials first, then by count.
func (t *Tally) Rows() []TallyRow {
	t.mu.Lock()
	rows := make([]TallyRow, 0, len(t.counts))
	for k, n := range t.counts {
		rows = append(rows, TallyRow{Decision: k.decision, Kind: k.kind, Host: k.host, Port: k.port, Count: n})
	}
	t.mu.Unlock()
	SortTallyRows(rows)
	return rows
}

// SortTallyRows orders rows as Rows does: errors, denials, would-denials,
// allows; then by count.
func SortTallyRows(rows []TallyRow) {
	rank := map[string]int{DecisionError: 0, DecisionDeny: 1, OutcomeWouldDeny: 2, DecisionAllow: 3}
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if rank[a.Decision] != rank[b.Decision] {
			return rank[a.Decision] < rank[b.Decision]
		}
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		if a.Host != b.Host {
			return a.Host < b.Host
		}
		return a.Kind < b.Kind
	})
}

// WriteSummary prints at most maxRows rows (and how many were left out) as a
// short table an operator reads at a glance.
func (t *Tally) WriteSummary(w io.Writer, maxRows int) {
	WriteSummary(w, t.Rows(), maxRows)
}

// WriteSummary prints rows (in Rows' order) as Tally.WriteSummary does: the
// counts, report mode's would-denials apart from denials, then at most
// maxRows destinations.
func WriteSummary(w io.Writer, rows []TallyRow, maxRows int) {
	var s Summary
	for _, r := range rows {
		switch r.Decision {
		case DecisionAllow:
			s.Allowed += int64(r.Count)
		case OutcomeWouldDeny:
			s.WouldDeny += int64(r.Count)
		default:
			s.Denied += int64(r.Count)
		}
	}
	s.Rows = rows
	s.Write(w, maxRows)
}

// Summary is what an egress summary prints: counts, and rows by destination
// (Rows' order) of which Omitted more were left out before.
type Summary struct {
	Allowed, Denied, WouldDeny int64
	Rows                       []TallyRow
	Omitted                    int
}

// Write prints s as `airlock run`'s egress summary: the counts, report
// mode's would-denials apart from denials, then at most maxRows rows and how
// many more there are. Hosts and kinds are escaped (termtext).
func (s Summary) Write(w io.Writer, maxRows int) {
	fmt.Fprintf(w, "airlock: egress summary: %d allowed, %d denied", s.Allowed, s.Denied)
	if s.WouldDeny > 0 {
		fmt.Fprintf(w, ", %d would deny (report mode: let through)", s.WouldDeny)
	}
	fmt.Fprintln(w)
	for i, r := range s.Rows {
		if i == maxRows {
			break
		}
		dest := r.Host
		if r.Port != 0 && r.Kind != KindDNS {
			dest = fmt.Sprintf("%s:%d", r.Host, r.Port)
		}
		// A host is the sandbox's choice: escaped, it cannot drive the terminal.
		dec := r.Decision
		if dec == OutcomeWouldDeny {
			dec = "would deny (report)"
		}
		fmt.Fprintf(w, "  %-5s %-7s %-40s x%d\n", termtext.Escape(dec), termtext.Escape(r.Kind), termtext.Escape(dest), r.Count)
	}
	if more := len(s.Rows) - min(len(s.Rows), maxRows) + s.Omitted; more > 0 {
		fmt.Fprintf(w, "  ... %d more destinations (airlock audit query)\n", more)
	}
}
