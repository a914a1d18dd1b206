package daemon

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/sandboxd"
)

// Why a sandbox ended (api.Sandbox.EndReason and the reason of its audit
// record of kind sandbox).
const (
	ReasonCreated       = "created"
	ReasonDeleted       = "deleted"
	ReasonIdleTimeout   = "idle_timeout"
	ReasonMaxLifetime   = "max_lifetime"
	ReasonDaemonStopped = "daemon_stopped"
	// ReasonFailed: the sandbox's init died on its own, or it could not be
	// started.
	ReasonFailed = "failed"
)

// keptExecs is how many finished execs a sandbox lists (GET .../execs).
const keptExecs = 64

// maxRunningExecs bounds the execs running at once in one sandbox (its pids
// limit bounds their processes; this bounds the daemon's work for them).
const maxRunningExecs = 64

// sandbox is one of the daemon's long-lived sandboxes: who owns it, what it
// was created with, its executor sandbox, its execs and its timers.
type sandbox struct {
	id          string
	owner       int
	labels      map[string]string
	params      *createParams
	workDir     string
	created     time.Time
	box         box
	acct        *account
	idleTimeout time.Duration
	maxLifetime time.Duration

	// updating serializes PATCHes of the sandbox (update.go); updates
	// counts them (under mu).
	updating sync.Mutex
	updates  int64

	mu         sync.Mutex
	state      string
	endReason  string
	lastActive time.Time
	running    int
	streams    int // events streams open
	execsTotal int64
	execs      map[string]*execEntry // running, and finished ones still listed
	finished   []string              // ids of finished execs, oldest first
	idle, life *time.Timer
	final      *api.Usage
	finalRaw   usage
	watchers   map[chan api.Sandbox]struct{}
	ended      chan struct{} // closed once stopped
}

func newSandbox(id string, owner int, p *createParams, now time.Time) *sandbox {
	return &sandbox{
		id: id, owner: owner, labels: p.labels, params: p, created: now,
		idleTimeout: p.idleTimeout, maxLifetime: p.maxLifetime,
		state: api.StateRunning, lastActive: now,
		execs: map[string]*execEntry{}, watchers: map[chan api.Sandbox]struct{}{},
		ended: make(chan struct{}),
	}
}

// armTimers starts the idle and lifetime timers; expire is called (on its
// own goroutine) with the reason when one fires.
func (s *sandbox) armTimers(expire func(reason string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.life = time.AfterFunc(s.maxLifetime, func() { expire(ReasonMaxLifetime) })
	s.idle = time.AfterFunc(s.idleTimeout, func() {
		if s.idleNow() {
			expire(ReasonIdleTimeout)
		}
	})
}

// idleNow reports whether the idle timeout has really passed: a timer that
// fired while an exec started or an API call came is stale.
func (s *sandbox) idleNow() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == api.StateRunning && s.running == 0 && time.Since(s.lastActive) >= s.idleTimeout
}

// touch records an API call for the sandbox: the idle timeout starts again.
func (s *sandbox) touch() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastActive = time.Now()
	if s.running == 0 && s.idle != nil && s.state == api.StateRunning {
		s.idle.Reset(s.idleTimeout)
	}
}

// beginExec counts an exec about to start, or says why none may.
func (s *sandbox) beginExec() *api.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != api.StateRunning {
		return apiErr(api.CodeConflict, "", "sandbox %s is %s", s.id, s.state)
	}
	if s.running >= maxRunningExecs {
		return apiErr(api.CodeLimit, "", "sandbox %s runs %d execs already, at most %d at once", s.id, s.running, maxRunningExecs)
	}
	s.running++
	s.execsTotal++
	if s.idle != nil {
		s.idle.Stop()
	}
	return nil
}

// beginStream counts an events stream about to subscribe, or refuses one
// past maxEventStreams.
func (s *sandbox) beginStream() *api.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streams >= maxEventStreams {
		return apiErr(api.CodeLimit, "", "sandbox %s has %d events streams open, at most %d at once", s.id, s.streams, maxEventStreams)
	}
	s.streams++
	return nil
}

func (s *sandbox) endStream() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streams--
}

// endExec counts an exec that is over (or never started); the idle timeout
// starts when the last one ends.
func (s *sandbox) endExec() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running--
	s.lastActive = time.Now()
	if s.running == 0 && s.idle != nil && s.state == api.StateRunning {
		s.idle.Reset(s.idleTimeout)
	}
}

// addExec lists a started exec.
func (s *sandbox) addExec(x *execEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.execs[x.id] = x
}

// execDone is the one place an exec ends: it records r on x (closing a
// streamed stdin) and moves x to the finished list, forgetting the oldest
// past keptExecs.
func (s *sandbox) execDone(x *execEntry, r *api.ExecResult) {
	x.finish(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished = append(s.finished, x.id)
	for len(s.finished) > keptExecs {
		delete(s.execs, s.finished[0])
		s.finished = s.finished[1:]
	}
}

func (s *sandbox) exec(id string) (*execEntry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x, ok := s.execs[id]
	return x, ok
}

// execList is GET .../execs: running first (by start), then finished.
func (s *sandbox) execList() []api.Exec {
	s.mu.Lock()
	xs := slices.Collect(maps.Values(s.execs))
	s.mu.Unlock()
	out := make([]api.Exec, 0, len(xs))
	for _, x := range xs {
		out = append(out, x.view())
	}
	slices.SortFunc(out, func(a, b api.Exec) int {
		if a.Running != b.Running {
			if a.Running {
				return -1
			}
			return 1
		}
		return a.StartedAt.Compare(b.StartedAt)
	})
	return out
}

// beginEnd moves a running sandbox to stopping with reason; false when it
// was not running (another end is under way or done).
func (s *sandbox) beginEnd(reason string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != api.StateRunning {
		return false
	}
	s.state, s.endReason = api.StateStopping, reason
	if s.idle != nil {
		s.idle.Stop()
	}
	if s.life != nil {
		s.life.Stop()
	}
	return true
}

// stopped records the end and wakes whoever waits for it.
func (s *sandbox) stopped(raw usage, final api.Usage) {
	s.mu.Lock()
	s.state, s.final, s.finalRaw = api.StateStopped, &final, raw
	s.mu.Unlock()
	close(s.ended)
}

// view is the API's picture of the sandbox; u is its usage now.
func (s *sandbox) view(u api.Usage) api.Sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	v := api.Sandbox{
		ID: s.id, State: s.state, Owner: s.owner, Labels: s.labels, Limits: s.params.resolved,
		Workspace: s.params.workspace, WorkDir: s.workDir, Mode: s.params.shownMode, Allow: s.params.allow,
		SecretBindings: s.params.bindings,
		CreatedAt:      s.created, AgeMS: now.Sub(s.created).Milliseconds(),
		IdleTimeoutMS: s.idleTimeout.Milliseconds(), MaxLifetimeMS: s.maxLifetime.Milliseconds(),
		EndReason: s.endReason, ExecsRunning: int64(s.running), ExecsTotal: s.execsTotal, Usage: u,
	}
	if s.running == 0 && s.state == api.StateRunning {
		v.IdleMS = now.Sub(s.lastActive).Milliseconds()
	}
	if s.final != nil {
		v.Usage = *s.final
	}
	if s.acct != nil {
		v.Egress = s.acct.egress()
	}
	if v.Egress.DeniedByKind == nil {
		v.Egress.DeniedByKind = map[string]int64{}
	}
	return v
}

// watch subscribes to the sandbox's lifecycle changes; the channel gets the
// sandbox as it is after each change (a slow reader misses some, never the
// last: stopped is also signalled by ended).
func (s *sandbox) watch() (chan api.Sandbox, func()) {
	c := make(chan api.Sandbox, 4)
	s.mu.Lock()
	s.watchers[c] = struct{}{}
	s.mu.Unlock()
	return c, func() {
		s.mu.Lock()
		delete(s.watchers, c)
		s.mu.Unlock()
	}
}

// watched reports whether an events stream follows s (notify would reach
// someone).
func (s *sandbox) watched() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watchers) > 0
}

func (s *sandbox) notify(v api.Sandbox) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.watchers {
		select {
		case c <- v:
		default:
		}
	}
}

// registry holds the daemon's live sandboxes.
type registry struct {
	mu       sync.Mutex
	byID     map[string]*sandbox
	pending  int             // creates under way
	perOwner map[int]int     // live and pending, by owner
	booked   map[int]booking // their limits summed, by owner
	// tearing holds the ids of ended sandboxes whose teardown (namespace,
	// cgroup, uid) still runs: an id is never reused before it is done.
	tearing  map[string]struct{}
	teardown sync.WaitGroup
}

func newRegistry() *registry {
	return &registry{byID: map[string]*sandbox{}, perOwner: map[int]int{}, booked: map[int]booking{}, tearing: map[string]struct{}{}}
}

// booking is what sandboxes book of the host: their limits, summed.
type booking struct {
	memory int64
	cpus   float64
	pids   int64
}

func (b booking) plus(o booking) booking {
	return booking{memory: b.memory + o.memory, cpus: b.cpus + o.cpus, pids: b.pids + o.pids}
}

func bookingOf(l sandboxd.Limits) booking {
	return booking{memory: l.Memory, cpus: l.CPUs, pids: l.Pids}
}

// reserve counts a create under way, booking b, against the limits, or
// says which one it is over. ceiling bounds what one owner other than root
// books together (a zero field: none).
func (r *registry) reserve(owner, maxAll, maxOwner int, root bool, b, ceiling booking) *api.Error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.byID)+r.pending >= maxAll {
		return apiErr(api.CodeLimit, "", "the daemon holds %d sandboxes, sandbox.max_sandboxes is %d", len(r.byID)+r.pending, maxAll)
	}
	if !root {
		if r.perOwner[owner] >= maxOwner {
			return apiErr(api.CodeLimit, "", "uid %d holds %d sandboxes, sandbox.max_sandboxes_per_owner is %d", owner, r.perOwner[owner], maxOwner)
		}
		if e := overCeiling(owner, r.booked[owner], b, ceiling); e != nil {
			return e
		}
	}
	r.pending++
	r.perOwner[owner]++
	r.booked[owner] = r.booked[owner].plus(b)
	return nil
}

// overCeiling names the first limit of b that takes what owner has booked
// past ceiling.
func overCeiling(owner int, have, b, ceiling booking) *api.Error {
	sum := have.plus(b)
	switch {
	case ceiling.memory > 0 && sum.memory > ceiling.memory:
		return apiErr(api.CodeLimit, "limits.memory", "limits.memory: uid %d's sandboxes book %s together; with this one's %s that is over api.caller_limits.memory (%s)",
			owner, config.Size(have.memory), config.Size(b.memory), config.Size(ceiling.memory))
	case ceiling.cpus > 0 && sum.cpus > ceiling.cpus+1e-9:
		return apiErr(api.CodeLimit, "limits.cpus", "limits.cpus: uid %d's sandboxes book %g CPUs together; with this one's %g that is over api.caller_limits.cpus (%g)",
			owner, have.cpus, b.cpus, ceiling.cpus)
	case ceiling.pids > 0 && sum.pids > ceiling.pids:
		return apiErr(api.CodeLimit, "limits.pids", "limits.pids: uid %d's sandboxes book %d tasks together; with this one's %d that is over api.caller_limits.pids (%d)",
			owner, have.pids, b.pids, ceiling.pids)
	}
	return nil
}

// unreserve gives back a reservation whose create failed.
func (r *registry) unreserve(owner int, b booking) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending--
	r.dropOwner(owner, b)
}

// add turns a reservation into a live sandbox.
func (r *registry) add(s *sandbox) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending--
	r.byID[s.id] = s
}

func (r *registry) remove(s *sandbox) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID[s.id] == s {
		delete(r.byID, s.id)
		r.dropOwner(s.owner, bookingOf(s.params.limits))
	}
}

// beginTeardown removes an ended sandbox and keeps its id taken until
// endTeardown: the teardown that follows is waited for by waitTeardowns.
func (r *registry) beginTeardown(s *sandbox) {
	r.mu.Lock()
	r.tearing[s.id] = struct{}{}
	r.teardown.Add(1)
	r.mu.Unlock()
	r.remove(s)
}

func (r *registry) endTeardown(id string) {
	r.mu.Lock()
	delete(r.tearing, id)
	r.mu.Unlock()
	r.teardown.Done()
}

// waitTeardowns waits for every teardown under way.
func (r *registry) waitTeardowns() { r.teardown.Wait() }

// taken reports whether id names a sandbox, live or still being torn down.
func (r *registry) taken(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, live := r.byID[id]
	_, tearing := r.tearing[id]
	return live || tearing
}

func (r *registry) dropOwner(owner int, b booking) {
	r.booked[owner] = r.booked[owner].plus(booking{memory: -b.memory, cpus: -b.cpus, pids: -b.pids})
	if r.perOwner[owner]--; r.perOwner[owner] <= 0 {
		delete(r.perOwner, owner)
		delete(r.booked, owner)
	}
}

func (r *registry) get(id string) (*sandbox, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.byID[id]
	return s, ok
}

// all lists the sandboxes, oldest first.
func (r *registry) all() []*sandbox {
	r.mu.Lock()
	out := slices.Collect(maps.Values(r.byID))
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b *sandbox) int {
		if c := a.created.Compare(b.created); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	return out
}

func (r *registry) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID)
}

// runningExecs counts the execs running in every sandbox.
func (r *registry) runningExecs() int {
	n := 0
	for _, s := range r.all() {
		s.mu.Lock()
		n += s.running
		s.mu.Unlock()
	}
	return n
}
