package daemon

import (
	"maps"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
)

// accounts is the audit observer that knows which sandbox belongs to whom:
// it stamps every record of a daemon sandbox with its owner's uid
// (audit.Record.Owner) and, once the record is accepted, counts it into the
// sandbox's egress counters and its owner's tally (the rows GET /v1/summary
// shows a caller who is not root). Gateway, DNS filter, netns and executor
// records all pass the daemon's audit.Observed, so none of them needs to know
// owners.
type accounts struct {
	mu      sync.RWMutex
	sandbox map[string]*account
	pods    map[string]*audit.Pod // attached sandboxes' pods (airlock-cni), by id
	byOwner map[int]*audit.Tally
}

var (
	_ audit.Observer = (*accounts)(nil)
	_ audit.Stamper  = (*accounts)(nil)
)

// account is one sandbox's owner and egress counters.
type account struct {
	owner   int
	tally   *audit.Tally // the owner's
	dests   *audit.Tally // the sandbox's own, by destination (at most audit.MaxTallyKeys)
	allowed atomic.Int64
	denied  atomic.Int64
	would   atomic.Int64 // report mode's would-denials (let through)

	mu     sync.Mutex
	byKind map[string]int64
}

func newAccounts() *accounts {
	return &accounts{sandbox: map[string]*account{}, pods: map[string]*audit.Pod{}, byOwner: map[int]*audit.Tally{}}
}

// open starts accounting sandbox id to owner. Call it before anything can
// log a record of the sandbox.
func (a *accounts) open(id string, owner int) *account {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.byOwner[owner]
	if t == nil {
		t = audit.NewTally()
		a.byOwner[owner] = t
	}
	acc := &account{owner: owner, tally: t, dests: audit.NewTally(), byKind: map[string]int64{}}
	a.sandbox[id] = acc
	return acc
}

// close stops accounting id, once nothing can log a record of it any more
// (its namespace is torn down and its executor sandbox destroyed).
func (a *accounts) close(id string) {
	a.mu.Lock()
	delete(a.sandbox, id)
	a.mu.Unlock()
}

// setPod stamps every later record of sandbox id with pod; a nil pod stops
// stamping. Each record gets its own copy.
func (a *accounts) setPod(id string, pod *audit.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if pod == nil {
		delete(a.pods, id)
		return
	}
	a.pods[id] = pod
}

// claimPod is setPod for an id that has no pod yet; it reports whether it
// set it (a racing attach of the same id must not replace, nor later
// remove, the pod of the one that won).
func (a *accounts) claimPod(id string, pod *audit.Pod) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, taken := a.pods[id]; taken {
		return false
	}
	a.pods[id] = pod
	return true
}

// ownerRows are the summary rows of owner's sandboxes since the daemon
// started.
func (a *accounts) ownerRows(owner int) []audit.TallyRow {
	a.mu.RLock()
	t := a.byOwner[owner]
	a.mu.RUnlock()
	if t == nil {
		return nil
	}
	return t.Rows()
}

// Stamp sets r's owner when it is a record of an accounted sandbox, and its
// pod when it is a record of an attached pod's.
func (a *accounts) Stamp(r *audit.Record) {
	if r.Sandbox == "" {
		return
	}
	a.mu.RLock()
	acc, pod := a.sandbox[r.Sandbox], a.pods[r.Sandbox]
	a.mu.RUnlock()
	if acc != nil {
		r.Owner = strconv.Itoa(acc.owner)
	}
	if pod != nil {
		c := *pod // the record's own: a writer may change what it was given
		r.Pod = &c
	}
}

// Observe counts an accepted record of an accounted sandbox.
func (a *accounts) Observe(r *audit.Record) {
	if r.Sandbox == "" {
		return
	}
	a.mu.RLock()
	acc := a.sandbox[r.Sandbox]
	a.mu.RUnlock()
	if acc != nil {
		acc.count(r)
	}
}

// count adds an accepted record to the counters: one decision for an
// ordinary record, as many as a summary record stands for (the budget's
// refused requests by kind, the DNS filter's queries by decision, netns's
// suppressed drops).
func (acc *account) count(r *audit.Record) {
	if r.Decision == "" || !egressKind(r.Kind) {
		return
	}
	acc.tally.Observe(r)
	acc.dests.Observe(r)
	sum := audit.SummaryOf(r)
	n := sum.N
	if n == 0 {
		switch {
		case r.Decision == audit.DecisionAllow:
			acc.allowed.Add(1)
		case audit.WouldDeny(r):
			acc.would.Add(1)
		default:
			acc.deny(map[string]int64{r.Kind: 1})
		}
		return
	}
	byDecision := sum.ByDecision
	if byDecision == nil {
		byDecision = map[string]int64{r.Decision: n}
	}
	acc.allowed.Add(byDecision[audit.DecisionAllow])
	denied := n - byDecision[audit.DecisionAllow]
	if denied <= 0 {
		return
	}
	byKind := sum.ByKind
	if byKind == nil {
		byKind = map[string]int64{r.Kind: denied}
	}
	acc.deny(byKind)
}

func (acc *account) deny(byKind map[string]int64) {
	acc.mu.Lock()
	defer acc.mu.Unlock()
	for k, v := range byKind {
		acc.denied.Add(v)
		acc.byKind[k] += v
	}
}

// egress reports the counters.
func (acc *account) egress() api.Egress {
	rows := acc.dests.Rows()
	dests := make([]api.SummaryRow, 0, min(len(rows), api.MaxEgressDestinations))
	for _, r := range rows[:min(len(rows), api.MaxEgressDestinations)] {
		dests = append(dests, summaryRow(r))
	}
	acc.mu.Lock()
	defer acc.mu.Unlock()
	return api.Egress{Allowed: acc.allowed.Load(), Denied: acc.denied.Load(), WouldDeny: acc.would.Load(), DeniedByKind: maps.Clone(acc.byKind),
		Destinations: dests, DestinationsOmitted: len(rows) - len(dests)}
}

// summaryRow is a tally row as the API gives it.
func summaryRow(r audit.TallyRow) api.SummaryRow {
	return api.SummaryRow{Decision: r.Decision, Kind: r.Kind, Host: r.Host, Port: r.Port, Count: r.Count}
}

// egressKind: records that are egress decisions (not an exec, a tunnel's
// close, the writer's own, or a sandbox's lifecycle).
func egressKind(kind string) bool {
	switch kind {
	case audit.KindHTTP, audit.KindConnect, audit.KindTLS, audit.KindTCP, audit.KindDNS, audit.KindDrop, audit.KindSummary:
		return true
	}
	return false
}
