package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/topdown"

	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/oplog"
)

var _ Decider = (*Engine)(nil)

// ErrPolicy wraps every fail-closed evaluation failure (Decision.Err).
var ErrPolicy = errors.New("policy error")

// decisionQuery is the one query the engine prepares.
var decisionQuery = ast.MustParseBody("data.airlock.decision")

// Log field names of the engine's own (see oplog for the shared ones).
const (
	logDir    = "dir"
	logCached = "cache"
)

// snapshot is one immutable policy revision.
type snapshot struct {
	rev string
	// unavailable is set on the snapshot of an engine that has no policy yet
	// (a bundle source with nothing downloaded or persisted): every decision
	// is the fail-closed deny with this error.
	unavailable error
	pq          rego.PreparedEvalQuery
	txn         storage.Transaction // one read transaction for the snapshot's life (nothing writes)
	used        inputFields
	cache       *decisionCache // nil when off or the policy is nondeterministic
	// flights are the evaluations under way on this snapshot, by cache key
	// (flight.go): a snapshot's, so a Decide after a swap never waits for
	// the old revision's answer.
	flights flights
}

// Engine is the Rego policy engine behind the Decider seam. It is safe for
// concurrent use; Reload swaps the snapshot atomically.
type Engine struct {
	cfg Config
	log *slog.Logger
	cur atomic.Pointer[snapshot]
	// changed is closed, and replaced, each time a new snapshot is swapped
	// in (Changed).
	changed atomic.Pointer[chan struct{}]
	mu      sync.Mutex // serializes Reload and bundle activations
	stopMu  sync.Mutex
	stop    func()
	// bundle is the bundle source when Config.Bundle is set (bundle.go).
	bundle *bundleSource
	// reloadErr is the last Reload's failure, nil once one succeeds
	// (ReloadErr).
	reloadErr atomic.Pointer[error]
	// keyBufs holds *[]byte buffers Decide builds cache keys in (at most
	// maxPooledKey bytes are kept).
	keyBufs sync.Pool
	// evalHook, when set (tests), runs at the start of every evaluation.
	evalHook func()
}

// maxPooledKey bounds a cache-key buffer kept for reuse.
const maxPooledKey = 4 << 10

// New builds the engine from cfg: the embedded library, default policy and
// presets, overlaid by cfg.Dir. It fails when the policy does not compile, fails
// strict mode or schema checking, or fails its own tests.
func New(cfg Config, logger *slog.Logger) (*Engine, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, log: oplog.For(logger, "policy")}
	ch := make(chan struct{})
	e.changed.Store(&ch)
	if cfg.Bundle != nil {
		if err := e.startBundle(); err != nil {
			return nil, err
		}
		return e, nil
	}
	s, err := e.load(context.Background())
	if err != nil {
		return nil, err
	}
	e.cur.Store(s)
	e.log.Info("policy loaded", oplog.PolicyRevKey, s.rev, logDir, cfg.Dir, logCached, s.cache != nil)
	if cfg.Watch {
		if err := e.watch(); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Rev returns the current policy revision (a content hash of every policy file
// and of the presets/allow-hosts/mode configuration; for a bundle, its
// manifest revision, "@", and that hash; RevNoPolicy while a bundle source
// has no policy).
func (e *Engine) Rev() string { return e.cur.Load().rev }

// ReloadErr is the last Reload's failure (a policy file that no longer
// compiles, on SIGHUP or through the watch): the policy in force is then
// older than its files. Nil once a Reload succeeds.
func (e *Engine) ReloadErr() error {
	if p := e.reloadErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Changed returns a channel closed the next time a new policy revision is
// swapped in (a reload or a bundle activation). Ask again after it closes.
// Connections admitted under the old revision are re-decided by whoever
// watches it (the gateway's Redecide): the decision cache is per revision,
// so no decision after the swap is served from the old one.
func (e *Engine) Changed() <-chan struct{} { return *e.changed.Load() }

// swap puts s in force and wakes whoever waits on Changed.
func (e *Engine) swap(s *snapshot) {
	e.cur.Store(s)
	ch := make(chan struct{})
	close(*e.changed.Swap(&ch))
}

// Mode returns the global mode.
func (e *Engine) Mode() Mode { return e.cfg.Mode }

// Reload rebuilds the policy from its files (with a bundle source: from the
// active bundle's; nothing is downloaded, the poller does that). On any failure (parse, compile,
// strict mode, schema, data, failing *_test.rego) the current snapshot stays in
// force and the error says why. Wire SIGHUP to it.
func (e *Engine) Reload(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var s *snapshot
	var err error
	if e.bundle != nil {
		s, err = e.bundle.reload(ctx)
	} else {
		s, err = e.load(ctx)
	}
	old := e.cur.Load()
	if err != nil {
		e.log.Error("policy reload failed, keeping current policy", oplog.PolicyRevKey, old.rev, oplog.ErrorKey, err)
		err = fmt.Errorf("policy: reload failed, keeping revision %s: %w", old.rev, err)
		e.reloadErr.Store(&err)
		return err
	}
	e.reloadErr.Store(nil)
	if s.rev == old.rev {
		return nil
	}
	e.swap(s)
	e.log.Info("policy reloaded", oplog.PolicyRevKey, s.rev, "previous_rev", old.rev, logCached, s.cache != nil)
	return nil
}

// load builds, compiles, tests and prepares a new snapshot from the files of
// Config.Dir over the embedded tree.
func (e *Engine) load(ctx context.Context) (*snapshot, error) {
	us, err := units(e.cfg.Dir, false)
	if err != nil {
		return nil, err
	}
	return e.compileUnit(ctx, us[0], e.cfg.Dir != "", "")
}

// compileUnit builds, compiles and prepares a snapshot of u, after running u's
// own *_test.rego when ownTests (the embedded ones are checked when airlock
// is built). revPrefix, when set, is put before the content hash with an
// "@" (a bundle's manifest revision). The current snapshot is returned when
// the revision is unchanged.
func (e *Engine) compileUnit(ctx context.Context, u unit, ownTests bool, revPrefix string) (*snapshot, error) {
	b, err := build(u, e.cfg)
	if err != nil {
		return nil, err
	}
	if revPrefix != "" {
		b.Rev = revPrefix + "@" + b.Rev
	}
	if cur := e.cur.Load(); cur != nil && cur.rev == b.Rev {
		return cur, nil
	}
	policyMods := map[string]*ast.Module{}
	for name, m := range b.Modules {
		if !b.Tests[name] {
			policyMods[name] = m
		}
	}
	comp, err := compileModules(policyMods, b.Schema)
	if err != nil {
		return nil, err
	}
	// The directory's (or bundle's) own tests must pass.
	if ownTests && len(b.Tests) > 0 {
		tb, err := build(u, testConfig())
		if err != nil {
			return nil, err
		}
		results, err := runUnitTests(ctx, tb, nil)
		if err != nil {
			return nil, err
		}
		if err := testsFailed(results); err != nil {
			if e.cfg.FailingTests == nil {
				return nil, err
			}
			e.cfg.FailingTests(err)
		}
	}
	store := inmem.NewFromObjectWithOpts(b.Data, inmem.OptRoundTripOnWrite(false), inmem.OptReturnASTValuesOnRead(true))
	pq, err := rego.New(
		rego.ParsedQuery(decisionQuery),
		rego.Compiler(comp),
		rego.Store(store),
		rego.StoreReadAST(true),
	).PrepareForEval(ctx)
	if err != nil {
		return nil, err
	}
	txn, err := store.NewTransaction(ctx)
	if err != nil {
		return nil, err
	}
	s := &snapshot{rev: b.Rev, pq: pq, txn: txn, used: usedInputFields(comp.Modules)}
	if e.cfg.CacheSize > 0 && !nondeterministic(comp) {
		s.cache = newDecisionCache(e.cfg.CacheSize, e.cfg.CacheBytes)
	}
	return s, nil
}

// Decide evaluates data.airlock.decision for in. It never fails open: any
// failure (an unknown Sandbox.Mode too) is a deny with reason policy_error and
// Err set. The decision's mode is the policy's own (report or enforce rules),
// else the sandbox's Mode, else Config.Mode. in is not modified; Suffixes and
// Attributes are filled on a copy.
func (e *Engine) Decide(ctx context.Context, in *Input) Decision {
	s := e.cur.Load()
	if s.unavailable != nil {
		return e.fail(s, s.unavailable)
	}
	if in == nil {
		return e.fail(s, errors.New("nil input"))
	}
	if err := checkMode(in.Sandbox.Mode); err != nil {
		return e.fail(s, err)
	}
	x := prepare(in)
	if s.cache == nil {
		return e.eval(ctx, s, &x, nil)
	}
	kb, _ := e.keyBufs.Get().(*[]byte)
	if kb == nil {
		kb = new([]byte)
	}
	defer e.keyBufs.Put(kb)
	key := appendCacheKey((*kb)[:0], &x)
	if cap(key) <= maxPooledKey {
		*kb = key
	}
	if d, ok := s.cache.getBytes(key); ok {
		return d.clone()
	}
	if len(key) > s.cache.maxKey {
		return e.eval(ctx, s, &x, key) // never cached: nothing to share
	}
	// A miss: the first Decide of this input evaluates it, the ones that
	// come while it does wait for its decision (a burst of connections to
	// one host from one sandbox runs the policy once).
	f, first := s.flights.join(key)
	if !first {
		return e.await(ctx, s, &x, key, f)
	}
	d := e.eval(ctx, s, &x, key)
	s.flights.land(key, f, d)
	return d
}

// eval evaluates x against s, bounded by EvalTimeout and ctx, and caches a
// decision (key non-nil: s has a cache).
func (e *Engine) eval(ctx context.Context, s *snapshot, x *Input, key []byte) Decision {
	if e.evalHook != nil {
		e.evalHook()
	}
	if err := ctx.Err(); err != nil {
		return e.fail(s, err)
	}
	// Cancellation without a goroutine per evaluation: a timer for the deadline
	// and an AfterFunc on the caller's context both cancel the query.
	cancel := topdown.NewCancel()
	var timedOut atomic.Bool
	timer := time.AfterFunc(e.cfg.EvalTimeout, func() {
		timedOut.Store(true)
		cancel.Cancel()
	})
	stop := context.AfterFunc(ctx, cancel.Cancel)
	rs, err := s.pq.Eval(ctx,
		rego.EvalParsedInput(inputValue(x, &s.used)),
		rego.EvalTransaction(s.txn),
		rego.EvalExternalCancel(cancel))
	timer.Stop()
	stop()
	if err != nil {
		switch {
		case timedOut.Load():
			err = fmt.Errorf("evaluation deadline (%v): %w", e.cfg.EvalTimeout, err)
		case ctx.Err() != nil:
			err = fmt.Errorf("%w: %w", ctx.Err(), err)
		}
		return e.fail(s, err)
	}
	d, err := parseResult(rs)
	if err != nil {
		return e.fail(s, err)
	}
	if d.Mode == "" {
		d.Mode = x.Sandbox.Mode // the policy did not say: the sandbox's, else the engine's
	}
	if d.Mode == "" {
		d.Mode = e.cfg.Mode
	}
	d.Rev = s.rev
	if key != nil {
		s.cache.add(string(key), d.clone())
	}
	return d
}

// await waits for f, the evaluation of the same input on the same snapshot
// that another Decide started, and returns a copy of its decision. Only a
// decision is shared, never a failure: when that evaluation failed (its
// deadline, its caller's context), or has not landed within EvalTimeout (a
// starved machine), x is evaluated here, under its own EvalTimeout, as it
// would have been without the flight. The caller's context ends the wait
// with the fail-closed deny.
func (e *Engine) await(ctx context.Context, s *snapshot, x *Input, key []byte, f *flight) Decision {
	timer := time.NewTimer(e.cfg.EvalTimeout)
	defer timer.Stop()
	select {
	case <-f.done:
		if f.d.Err == nil {
			return f.d.clone()
		}
	case <-timer.C:
	case <-ctx.Done():
		return e.fail(s, ctx.Err())
	}
	return e.eval(ctx, s, x, key)
}

// fail is the fail-closed deny.
func (e *Engine) fail(s *snapshot, err error) Decision {
	err = fmt.Errorf("%w: %w", ErrPolicy, err)
	e.log.Error("policy evaluation failed, denying", oplog.PolicyRevKey, s.rev, oplog.ErrorKey, err)
	return Decision{
		Allowed:    false,
		Reasons:    []Reason{{ID: ReasonPolicyError, Msg: "policy evaluation failed"}},
		HTTPStatus: 403,
		Mode:       ModeEnforce,
		Rev:        s.rev,
		Err:        err,
	}
}

func (d Decision) clone() Decision {
	if d.Reasons != nil {
		d.Reasons = append([]Reason(nil), d.Reasons...)
	}
	return d
}

// prepare returns a copy of in with Destination.Suffixes, Destination.Keys and
// Attributes filled.
func prepare(in *Input) Input {
	x := *in
	if len(x.Destination.Suffixes) == 0 && x.Destination.Host != "" {
		x.Destination.Suffixes = hostname.Suffixes(x.Destination.Host)
	}
	x.Destination.Keys = hostKeys(x.Destination.Host, x.Destination.Suffixes)
	x.Attributes = nil
	if x.HTTP != nil {
		x.Attributes = &Attributes{Request: AttributesRequest{HTTP: AttributesHTTP{
			Method:  x.HTTP.Method,
			Host:    authority(x.HTTP.Scheme, x.Destination.Host, x.Destination.Port),
			Path:    pathWithQuery(x.HTTP.Path, x.HTTP.Query),
			Scheme:  x.HTTP.Scheme,
			Headers: x.HTTP.Headers,
		}}}
	}
	return x
}

// hostKeys is what data.airlock.host_keys computes from input.destination.host
// and input.destination.suffixes: the host, then for a host with a parent
// "*.<parent>" and "**.<ancestor>" for every proper ancestor (suffixes[1:]).
func hostKeys(host string, suffixes []string) []string {
	if len(suffixes) < 2 {
		return []string{host}
	}
	keys := make([]string, 0, len(suffixes)+1)
	keys = append(keys, host, "*."+suffixes[1])
	for _, s := range suffixes[1:] {
		keys = append(keys, "**."+s)
	}
	return keys
}

// parseResult checks the decision document's shape; anything else is an error.
func parseResult(rs rego.ResultSet) (Decision, error) {
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return Decision{}, errors.New("data.airlock.decision is undefined")
	}
	if len(rs) > 1 {
		return Decision{}, errors.New("data.airlock.decision has more than one result")
	}
	obj, ok := rs[0].Expressions[0].Value.(map[string]any)
	if !ok {
		return Decision{}, fmt.Errorf("data.airlock.decision is %T, want an object", rs[0].Expressions[0].Value)
	}
	var d Decision
	for k, v := range obj {
		switch k {
		case "allowed":
			b, ok := v.(bool)
			if !ok {
				return Decision{}, fmt.Errorf("decision.allowed is %T, want boolean", v)
			}
			d.Allowed = b
		case "mitm":
			b, ok := v.(bool)
			if !ok {
				return Decision{}, fmt.Errorf("decision.mitm is %T, want boolean", v)
			}
			d.MITM = b
		case "passthrough":
			b, ok := v.(bool)
			if !ok {
				return Decision{}, fmt.Errorf("decision.passthrough is %T, want boolean", v)
			}
			d.Passthrough = b
		case "strip":
			b, ok := v.(bool)
			if !ok {
				return Decision{}, fmt.Errorf("decision.strip is %T, want boolean", v)
			}
			d.Strip = b
		case "ask":
			b, ok := v.(bool)
			if !ok {
				return Decision{}, fmt.Errorf("decision.ask is %T, want boolean", v)
			}
			d.Ask = b
		case "ask_msg":
			m, ok := v.(string)
			if !ok {
				return Decision{}, fmt.Errorf("decision.ask_msg is %T, want string", v)
			}
			d.AskMsg = m
		case "http_status":
			n, ok := v.(json.Number)
			if !ok {
				return Decision{}, fmt.Errorf("decision.http_status is %T, want integer", v)
			}
			i, err := n.Int64()
			if err != nil || i < 0 || i > 599 {
				return Decision{}, fmt.Errorf("decision.http_status %s is not an HTTP status", n)
			}
			d.HTTPStatus = int(i)
		case "mode":
			s, ok := v.(string)
			if !ok || (Mode(s) != ModeEnforce && Mode(s) != ModeReport) {
				return Decision{}, fmt.Errorf("decision.mode %v is not enforce or report", v)
			}
			d.Mode = Mode(s)
		case "reasons":
			arr, ok := v.([]any)
			if !ok {
				return Decision{}, fmt.Errorf("decision.reasons is %T, want array", v)
			}
			d.Reasons = make([]Reason, 0, len(arr))
			for i, r := range arr {
				ro, ok := r.(map[string]any)
				if !ok {
					return Decision{}, fmt.Errorf("decision.reasons[%d] is %T, want object", i, r)
				}
				id, ok1 := ro["id"].(string)
				msg, ok2 := ro["msg"].(string)
				if !ok1 || !ok2 || id == "" {
					return Decision{}, fmt.Errorf("decision.reasons[%d] needs string id and msg", i)
				}
				d.Reasons = append(d.Reasons, Reason{ID: id, Msg: msg})
			}
		default:
			return Decision{}, fmt.Errorf("decision has unknown key %q", k)
		}
	}
	for _, k := range []string{"allowed", "reasons", "mitm", "http_status"} {
		if _, ok := obj[k]; !ok {
			return Decision{}, fmt.Errorf("decision lacks %q", k)
		}
	}
	if !d.Allowed && len(d.Reasons) == 0 {
		return Decision{}, errors.New("decision denies without a reason")
	}
	if d.Ask && d.Allowed {
		return Decision{}, errors.New("decision both allows and asks")
	}
	if d.Passthrough && d.MITM {
		return Decision{}, errors.New("decision has both mitm and passthrough")
	}
	return d, nil
}
