package daemon

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/netns"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/sandboxd"
)

// PENDING(sandboxd): the executor's long-lived sandbox API (DESIGN-10.md) is
// on branch wt-exec. Until it is on main these mirror its types field for
// field; then each becomes an alias (type execSpec = sandboxd.ExecSpec) and
// this file goes.

type prepareSpec struct {
	NetNS, CABundle    string
	Hidden             []string
	TmpSize, TmpInodes int64
}

type startSpec struct {
	ID                         string
	Limits                     sandboxd.Limits
	Workspace, WorkspaceTarget string
	Env                        []string
	Proxy, NoProxy             string
}

type execSpec struct {
	Argv, Env      []string
	Dir            string
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Timeout        time.Duration
	OutputCap      int64
}

type execResult struct {
	ID                       string
	ExitCode, Signal         int
	TimedOut, OOMKilled      bool
	Wall, CPU                time.Duration
	PeakMemory               int64
	StdoutBytes, StderrBytes int64
	Truncated                bool
	Stdout, Stderr           []byte
}

func (r *execResult) ExitStatus() int {
	switch {
	case r.TimedOut:
		return 124
	case r.OOMKilled:
		return 137
	case r.Signal != 0:
		return 128 + r.Signal
	}
	return r.ExitCode
}

type usage struct {
	CPU                time.Duration
	Memory, PeakMemory int64
	Pids, OOMKills     int64
	PidsLimitHits      int64
}

type filesResult struct{ Files, Bytes int64 }

var (
	errSandboxGone = errors.New("sandboxd: sandbox is gone")
	errPidsLimit   = errors.New("sandboxd: at the pids limit")
	errInvalidPath = errors.New("path refused")
	errTooLarge    = errors.New("too large")
	errNotFound    = errors.New("no such file or directory")
	errBadArchive  = errors.New("bad tar stream")
)

// defaultHome is sandboxd.DefaultHome.
const defaultHome = "/home/sandbox"

// PENDING(audit): audit.Record.Owner (svc-core). Until it exists the owner is
// kept only in the daemon's own accounts.
func setOwner(r *audit.Record, owner string) { _, _ = r, owner }

// newTap puts the events tap in front of next: records go to the returned
// Logger.
func newTap(next audit.Logger) (audit.Logger, tap) {
	t := newLocalTap(next)
	return t, t
}

// PENDING(audit): audit.NewTap (svc-core). localTap is the same contract:
// a Logger that hands every accepted record to the subscribers of its
// sandbox, never blocking Log on a slow one (it loses records, counted).
type localTap struct {
	next audit.Logger
	mu   sync.Mutex
	subs map[string]map[*localSub]struct{}
}

func newLocalTap(next audit.Logger) *localTap {
	return &localTap{next: next, subs: map[string]map[*localSub]struct{}{}}
}

type localSub struct {
	t       *localTap
	id      string
	c       chan audit.Record
	dropped atomic.Int64
	once    sync.Once
}

func (t *localTap) Subscribe(sandboxID string, buffer int) subscription {
	s := &localSub{t: t, id: sandboxID, c: make(chan audit.Record, max(buffer, 1))}
	t.mu.Lock()
	if t.subs[sandboxID] == nil {
		t.subs[sandboxID] = map[*localSub]struct{}{}
	}
	t.subs[sandboxID][s] = struct{}{}
	t.mu.Unlock()
	return s
}

func (s *localSub) C() <-chan audit.Record { return s.c }
func (s *localSub) Dropped() int64         { return s.dropped.Load() }
func (s *localSub) Close() {
	s.once.Do(func() {
		s.t.mu.Lock()
		delete(s.t.subs[s.id], s)
		if len(s.t.subs[s.id]) == 0 {
			delete(s.t.subs, s.id)
		}
		s.t.mu.Unlock()
	})
}

func (t *localTap) publish(r *audit.Record) {
	if r == nil || r.Sandbox == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for s := range t.subs[r.Sandbox] {
		select {
		case s.c <- *r:
		default:
			s.dropped.Add(1)
		}
	}
}

func (t *localTap) Log(r *audit.Record) error {
	err := t.next.Log(r)
	if err == nil {
		t.publish(r)
	}
	return err
}

func (t *localTap) Reserve() (audit.Reservation, error) {
	rs, ok := t.next.(audit.Reserver)
	if !ok {
		return nil, errNoReserve{t.next}
	}
	res, err := rs.Reserve()
	if err != nil {
		return nil, err
	}
	return &tapReservation{t: t, next: res}, nil
}

func (t *localTap) Err() error {
	if h, ok := t.next.(audit.Health); ok {
		return h.Err()
	}
	return nil
}

type tapReservation struct {
	t    *localTap
	next audit.Reservation
}

func (r *tapReservation) Log(rec *audit.Record) error {
	err := r.next.Log(rec)
	if err == nil {
		r.t.publish(rec)
	}
	return err
}

func (r *tapReservation) Cancel() { r.next.Cancel() }

// PENDING(audit): audit.KindSandbox (the audit engineer adds it, or the
// daemon does at the end).
const kindSandbox = "sandbox"

// PENDING(policy): policy.Sandbox.Mode and Allow (svc-core). Until they exist
// a sandbox's own mode and allow entries are recorded and reported but the
// daemon's policy decides.
type allowList = []string

func parseAllow(entries []string) (allowList, error) { return entries, nil }

func setSandboxPolicy(sb *policy.Sandbox, p *createParams) { _, _ = sb, p }

// PENDING(netns): TakePooled and CreateFrom (svc-core). Until they exist the
// pool is off and every sandbox's namespace is made by Create.
type realNetwork struct{ m *netns.Manager }

func (n realNetwork) TakePooled(context.Context) (pooledNet, error) {
	return nil, errors.New("netns: no pooled namespaces yet")
}

func (n realNetwork) CreateFrom(context.Context, policy.Sandbox, pooledNet) (*netns.Sandbox, error) {
	return nil, errors.New("netns: no pooled namespaces yet")
}

func (n realNetwork) Create(ctx context.Context, sb policy.Sandbox) (*netns.Sandbox, error) {
	return n.m.Create(ctx, sb)
}

func (n realNetwork) Teardown(ctx context.Context, id string) error { return n.m.Teardown(ctx, id) }

// seams are the real network and executor (PENDING(sandboxd): none yet),
// and whether the pool can be filled.
func seams(m *netns.Manager, _ *sandboxd.Executor) (network, executor, bool) {
	return realNetwork{m}, nil, false
}

type execError struct {
	Msg  string
	Code int
}

func (e *execError) Error() string { return "sandboxd: " + e.Msg }
