package learn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// Defaults of ReplayConfig.
const (
	// DefaultExamples is how many example records a change lists per destination.
	DefaultExamples = 3
	// DefaultCacheEntries bounds the distinct inputs whose outcome Replay keeps:
	// a log repeats the same requests, so most records cost one map lookup.
	DefaultCacheEntries = 1 << 20
)

// ReplayConfig says what Replay compares.
type ReplayConfig struct {
	// New decides the "after" side. Required.
	New policy.Decider
	// Old decides the "before" side; nil means what each record says the
	// policy that decided it did (PolicyAllowed).
	Old policy.Decider
	// Filter selects records (sandbox, kind, time ...). Sandbox creation
	// records are read whatever it says, for the labels they carry.
	Filter audit.Filter
	// Labels keeps only records of sandboxes carrying every label given.
	Labels map[string]string
	// Examples per destination and direction (default DefaultExamples).
	Examples int
	// CacheEntries bounds the outcome cache (default DefaultCacheEntries;
	// negative: no cache).
	CacheEntries int
}

// Report is what Replay found. Counts are of records.
type Report struct {
	Records      int `json:"records"`
	Replayed     int `json:"replayed"`
	Unchanged    int `json:"unchanged"`
	NewlyAllowed int `json:"newly_allowed"`
	NewlyDenied  int `json:"newly_denied"`
	// Skipped counts the records that have no replayable input, by reason
	// (the Skip* constants) and kind.
	Skipped map[string]map[string]int `json:"skipped,omitempty"`
	// Evaluations is how many distinct inputs were evaluated (per side).
	Evaluations int `json:"evaluations"`
	// PolicyErrors counts evaluations that failed closed (policy_error).
	PolicyErrors int      `json:"policy_errors,omitempty"`
	Allowed      []Change `json:"newly_allowed_by_destination"`
	Denied       []Change `json:"newly_denied_by_destination"`
}

// Change is one destination whose decision changed, in one direction.
type Change struct {
	Kind     string    `json:"kind"`
	Host     string    `json:"host"`
	Port     int       `json:"port,omitempty"`
	Count    int       `json:"count"`
	Examples []Example `json:"examples"`
}

// Destination is the change's "kind host:port".
func (c *Change) Destination() string {
	if c.Port == 0 {
		return c.Kind + " " + c.Host
	}
	return c.Kind + " " + c.Host + ":" + strconv.Itoa(c.Port)
}

// Example is one record whose decision changed.
type Example struct {
	Seq     uint64   `json:"seq"`
	ID      string   `json:"id"`
	Sandbox string   `json:"sandbox,omitempty"`
	Method  string   `json:"method,omitempty"`
	Path    string   `json:"path,omitempty"`
	QType   string   `json:"qtype,omitempty"`
	Before  []string `json:"before_reasons,omitempty"`
	After   []string `json:"after_reasons,omitempty"`
}

// outcome is one side's answer for an input.
type outcome struct {
	allowed bool
	reasons []string
	err     bool
}

// side evaluates one policy with a bounded cache keyed by the whole input.
type side struct {
	dec   policy.Decider
	cache map[string]outcome
	max   int
	evals int
	errs  int
}

func (s *side) decide(ctx context.Context, in *policy.Input, key string) outcome {
	if o, ok := s.cache[key]; ok {
		return o
	}
	d := s.dec.Decide(ctx, in)
	s.evals++
	o := outcome{allowed: d.Allowed && d.Err == nil, err: d.Err != nil}
	if o.err {
		s.errs++
	}
	for _, r := range d.Reasons {
		o.reasons = append(o.reasons, r.ID)
	}
	if len(s.cache) < s.max {
		s.cache[key] = o
	}
	return o
}

// Replay streams the records of files (oldest first), rebuilds the input of
// each decision, and compares the two sides' verdicts. It reads each record
// once and keeps only the changed destinations and the cache.
func Replay(ctx context.Context, files []string, cfg ReplayConfig) (*Report, error) {
	if cfg.New == nil {
		return nil, errors.New("learn: replay: no policy to replay against")
	}
	if cfg.Examples <= 0 {
		cfg.Examples = DefaultExamples
	}
	if cfg.CacheEntries == 0 {
		cfg.CacheEntries = DefaultCacheEntries
	}
	rp := &replayer{
		cfg:     cfg,
		rb:      NewRebuilder(),
		rep:     &Report{Skipped: map[string]map[string]int{}},
		after:   &side{dec: cfg.New, cache: map[string]outcome{}, max: cfg.CacheEntries},
		allowed: map[string]*Change{},
		denied:  map[string]*Change{},
	}
	if cfg.Old != nil {
		rp.before = &side{dec: cfg.Old, cache: map[string]outcome{}, max: cfg.CacheEntries}
	}
	filter := cfg.Filter
	sandboxFilter := filter.Sandbox
	filter.Sandbox = "" // creation records of every sandbox feed the Rebuilder; filtered below
	err := audit.Query(ctx, files, filter, func(r *audit.Record) error {
		if sandboxFilter != "" && r.Sandbox != sandboxFilter {
			rp.rb.Observe(r)
			return nil
		}
		return rp.record(ctx, r)
	})
	if err != nil {
		return nil, fmt.Errorf("learn: replay: %w", err)
	}
	return rp.report(), nil
}

type replayer struct {
	cfg             ReplayConfig
	rb              *Rebuilder
	rep             *Report
	before, after   *side
	allowed, denied map[string]*Change
}

func (rp *replayer) record(ctx context.Context, r *audit.Record) error {
	rp.rep.Records++
	ins, skip := rp.rb.Inputs(r)
	if skip != "" {
		if rp.rep.Skipped[skip] == nil {
			rp.rep.Skipped[skip] = map[string]int{}
		}
		rp.rep.Skipped[skip][r.Kind]++
		return nil
	}
	if !hasLabels(ins[0].Sandbox.Labels, rp.cfg.Labels) {
		return nil
	}
	rp.rep.Replayed++
	keys := make([]string, len(ins))
	for i := range ins {
		b, err := json.Marshal(&ins[i])
		if err != nil {
			return fmt.Errorf("record %d: %w", r.Seq, err)
		}
		keys[i] = string(b)
	}
	// A CONNECT with a second decision passes only if both allow.
	decideAll := func(sd *side) outcome {
		var o outcome
		for i := range ins {
			if o = sd.decide(ctx, &ins[i], keys[i]); !o.allowed {
				break
			}
		}
		return o
	}
	in := ins[len(ins)-1]
	now := decideAll(rp.after)
	was := outcome{allowed: PolicyAllowed(r), reasons: reasonIDs(r.Reasons)}
	if rp.before != nil {
		was = decideAll(rp.before)
	}
	switch {
	case was.allowed == now.allowed:
		rp.rep.Unchanged++
	case now.allowed:
		rp.rep.NewlyAllowed++
		rp.note(rp.allowed, r, &in, was, now)
	default:
		rp.rep.NewlyDenied++
		rp.note(rp.denied, r, &in, was, now)
	}
	return nil
}

func (rp *replayer) note(m map[string]*Change, r *audit.Record, in *policy.Input, was, now outcome) {
	c := &Change{Kind: string(in.Kind), Host: in.Destination.Host, Port: in.Destination.Port}
	if in.Kind == policy.KindDNS {
		c.Port = 0
	}
	k := c.Destination()
	if old, ok := m[k]; ok {
		c = old
	} else {
		m[k] = c
	}
	c.Count++
	if len(c.Examples) < rp.cfg.Examples {
		c.Examples = append(c.Examples, Example{
			Seq: r.Seq, ID: r.ID, Sandbox: r.Sandbox, Method: r.Method, Path: r.Path, QType: r.QType,
			Before: was.reasons, After: now.reasons,
		})
	}
}

func (rp *replayer) report() *Report {
	rep := rp.rep
	rep.Evaluations = rp.after.evals
	rep.PolicyErrors = rp.after.errs
	if rp.before != nil {
		rep.Evaluations += rp.before.evals
		rep.PolicyErrors += rp.before.errs
	}
	rep.Allowed = sortedChanges(rp.allowed)
	rep.Denied = sortedChanges(rp.denied)
	return rep
}

// sortedChanges orders changes by count, most first, then by destination.
func sortedChanges(m map[string]*Change) []Change {
	out := make([]Change, 0, len(m))
	for _, c := range m {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Destination() < out[j].Destination()
	})
	return out
}

func reasonIDs(rs []audit.Reason) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}
