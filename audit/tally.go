package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/airlock-dev/airlock/termtext"
)

// Tally is a Logger that counts decisions by destination before passing each
// record on, so `airlock run` can print a one-screen egress summary without
// reading the audit file back. It keeps one counter per (kind, decision, host),
// bounded by MaxTallyKeys; past that, destinations are folded into "(other)".
type Tally struct {
	next Logger

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
	_ Reserver    = (*Tally)(nil)
	_ Reservation = (*tallyReservation)(nil)
)

// NewTally wraps next.
func NewTally(next Logger) *Tally {
	return &Tally{next: next, counts: make(map[tallyKey]int)}
}

// Log counts r (decisions only: close, checkpoint and exec records are not
// egress decisions) and passes it on.
func (t *Tally) Log(r *Record) error {
	t.count(r)
	return t.next.Log(r)
}

// Reserve passes through to the wrapped logger's Reserve; the reservation
// counts its record when it is logged. A wrapped logger that cannot reserve
// is an error (fail closed): it could not keep the promise that the record
// will be accepted.
func (t *Tally) Reserve() (Reservation, error) {
	rs, ok := t.next.(Reserver)
	if !ok {
		return nil, fmt.Errorf("audit: %T cannot reserve room for a record", t.next)
	}
	res, err := rs.Reserve()
	if err != nil {
		return nil, err
	}
	return &tallyReservation{t: t, next: res}, nil
}

type tallyReservation struct {
	t    *Tally
	next Reservation
}

func (r *tallyReservation) Log(rec *Record) error {
	if rec != nil {
		r.t.count(rec)
	}
	return r.next.Log(rec)
}

func (r *tallyReservation) Cancel() { r.next.Cancel() }

// count adds r to the counts if it is an egress decision.
func (t *Tally) count(r *Record) {
	if r == nil {
		return
	}
	if r.Decision != "" && r.Kind != KindClose && r.Kind != KindExec && r.Kind != KindCheckpoint {
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
		k := tallyKey{kind: r.Kind, decision: r.Decision, host: host, port: r.Port}
		t.mu.Lock()
		if _, ok := t.counts[k]; !ok && len(t.counts) >= MaxTallyKeys {
			k.host, k.port = "(other)", 0
		}
		t.counts[k] += n
		t.mu.Unlock()
	}
}

// Summarized returns how many events a summary record stands for (the DNS
// filter's over-budget queries, netns's rate-limited drops, a Budget's refused
// requests), or 0 for an ordinary record.
func Summarized(r *Record) int {
	if len(r.Extra) == 0 {
		return 0
	}
	for _, k := range [...]string{SummaryQueriesKey, SummarySuppressedKey, SummaryRequestsKey} {
		if raw, ok := r.Extra[k]; ok {
			var n int
			if json.Unmarshal(raw, &n) == nil && n > 0 {
				return n
			}
		}
	}
	return 0
}

// Err passes on the wrapped logger's health (see Writer.Err); a logger that
// cannot tell is taken as healthy, its Log errors still deny.
func (t *Tally) Err() error {
	if h, ok := t.next.(Health); ok {
		return h.Err()
	}
	return nil
}

// TallyRow is one line of a summary.
type TallyRow struct {
	Decision string
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
	rank := map[string]int{DecisionError: 0, DecisionDeny: 1, DecisionAllow: 2}
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
	return rows
}

// WriteSummary prints at most maxRows rows (and how many were left out) as a
// short table an operator reads at a glance.
func (t *Tally) WriteSummary(w io.Writer, maxRows int) {
	rows := t.Rows()
	allowed, denied := 0, 0
	for _, r := range rows {
		if r.Decision == DecisionAllow {
			allowed += r.Count
		} else {
			denied += r.Count
		}
	}
	fmt.Fprintf(w, "airlock: egress summary: %d allowed, %d denied\n", allowed, denied)
	for i, r := range rows {
		if i == maxRows {
			fmt.Fprintf(w, "  ... %d more destinations (airlock audit query)\n", len(rows)-maxRows)
			break
		}
		dest := r.Host
		if r.Port != 0 && r.Kind != KindDNS {
			dest = fmt.Sprintf("%s:%d", r.Host, r.Port)
		}
		// A host is the sandbox's choice: escaped, it cannot drive the terminal.
		fmt.Fprintf(w, "  %-5s %-7s %-40s x%d\n", termtext.Escape(r.Decision), termtext.Escape(r.Kind), termtext.Escape(dest), r.Count)
	}
}
