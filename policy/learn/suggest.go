package learn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/policies"
	"github.com/airlock-dev/airlock/policy"
)

// Defaults of SuggestConfig.
const (
	// DefaultWildcardThreshold is how many sibling names (one label under the
	// same parent) must have been seen before their entries become one
	// "*.parent" entry.
	DefaultWildcardThreshold = 5
	// DefaultPrefixPaths is how many distinct paths must share a directory
	// before that directory becomes a path prefix ("/simple/*"); fewer are
	// listed exactly.
	DefaultPrefixPaths = 2
	// DefaultMaxTests bounds the generated tests per side (allowed, denied).
	DefaultMaxTests = 200
)

// SuggestConfig says which records to learn from and how far to generalize.
type SuggestConfig struct {
	Filter audit.Filter
	Labels map[string]string
	// Baseline decides what needs no entry: inputs it allows on a host a
	// preset lists are left to that preset. Required (the embedded default
	// policy with every preset: policy.New(policy.Config{}, nil)).
	Baseline          policy.Decider
	WildcardThreshold int
	PrefixPaths       int
	MaxTests          int
}

// Entry is what a suggested host (or "*.parent") may do: the kinds connect,
// tls and tcp on the ports listed, DNS questions for the name, and HTTP by
// method on ports and paths ("/p/*" a prefix, anything else exact).
type Entry struct {
	Ports map[string][]int     `json:"ports,omitempty"`
	DNS   bool                 `json:"dns"`
	HTTP  map[string]*HTTPRule `json:"http,omitempty"`
}

// HTTPRule is one method's ports and paths.
type HTTPRule struct {
	Ports []int    `json:"ports"`
	Paths []string `json:"paths"`
}

// Sample is one input the log shows, with the record it came from.
type Sample struct {
	Seq   uint64
	Input policy.Input
}

// Suggestion is the policy Suggest derived.
type Suggestion struct {
	// Presets lists, per preset, the hosts seen whose traffic that preset
	// (with the default policy) already allows.
	Presets map[string][]string `json:"presets"`
	// Hosts are the entries of the suggested allowlist.
	Hosts map[string]*Entry `json:"hosts"`
	// Allowed are inputs the run let through that the policy must allow;
	// Denied, inputs refused for a reason other than the allowlist, that it
	// must still deny. Conflicts are denied inputs that no allowlist can tell
	// apart from an allowed one (same host, port, method and path): reported,
	// not tested.
	Allowed, Denied, Conflicts []Sample `json:"-"`
	// Flagged are destinations the log shows reached that look like
	// exfiltration (ExfilSignals: key -> why): left out of Hosts and of
	// Allowed, for a person to decide.
	Flagged map[string][]string `json:"-"`
	// Counts of the records read, by what they were.
	Records, Learned, AllowedAlready, OtherDenied int                       `json:"-"`
	Skipped                                       map[string]map[string]int `json:"-"`
	// Withheld are destinations only ever seen carrying content findings
	// (credentials, canaries, encoded data): never suggested (findings.go).
	Withheld []string `json:"withheld,omitempty"`
	findings findingHosts
}

// Suggest reads the records of files and builds the suggestion. Allowed
// records, and records refused only by the allowlist (Learnable: a
// report-mode run's would-be denials), are what the policy must allow; every
// other decision record is what it must keep denied.
func Suggest(ctx context.Context, files []string, cfg SuggestConfig) (*Suggestion, error) {
	if cfg.Baseline == nil {
		return nil, errors.New("learn: suggest: no baseline policy")
	}
	if cfg.WildcardThreshold <= 1 {
		cfg.WildcardThreshold = DefaultWildcardThreshold
	}
	if cfg.PrefixPaths <= 1 {
		cfg.PrefixPaths = DefaultPrefixPaths
	}
	if cfg.MaxTests <= 0 {
		cfg.MaxTests = DefaultMaxTests
	}
	s := &Suggestion{Presets: map[string][]string{}, Hosts: map[string]*Entry{}, Skipped: map[string]map[string]int{}}
	if err := collect(ctx, files, cfg, s); err != nil {
		return nil, err
	}
	s.withholdFindingsOnly()
	presetHosts, err := presetIndex()
	if err != nil {
		return nil, err
	}
	need := s.groupPresets(ctx, cfg.Baseline, presetHosts)
	s.buildEntries(need, cfg)
	s.flagExfil()
	return s, nil
}

// collect reads the records into s.Allowed and s.Denied, one sample per
// distinct input.
func collect(ctx context.Context, files []string, cfg SuggestConfig, s *Suggestion) error {
	rb := NewRebuilder()
	seen := map[string]bool{}
	filter := cfg.Filter
	sandboxFilter := filter.Sandbox
	filter.Sandbox = ""
	err := audit.Query(ctx, files, filter, func(r *audit.Record) error {
		if sandboxFilter != "" && r.Sandbox != sandboxFilter {
			rb.Observe(r)
			return nil
		}
		s.Records++
		ins, skip := rb.Inputs(r)
		if skip != "" {
			if s.Skipped[skip] == nil {
				s.Skipped[skip] = map[string]int{}
			}
			s.Skipped[skip][r.Kind]++
			return nil
		}
		if !hasLabels(ins[0].Sandbox.Labels, cfg.Labels) {
			return nil
		}
		allowed := r.Decision == audit.DecisionAllow
		switch {
		case allowed:
			s.AllowedAlready++
		case Learnable(r):
			s.Learned++
			allowed = true
		default:
			s.OtherDenied++
		}
		add := func(in policy.Input, allowed bool) {
			b, _ := json.Marshal(&in)
			k := fmt.Sprint(allowed) + string(b)
			if seen[k] {
				return
			}
			seen[k] = true
			if allowed {
				s.Allowed = append(s.Allowed, Sample{Seq: r.Seq, Input: in})
			} else {
				s.Denied = append(s.Denied, Sample{Seq: r.Seq, Input: in})
			}
		}
		s.noteFindings(r, ins[0].Destination.Host, allowed)
		last := len(ins) - 1
		for i, in := range ins {
			switch {
			case allowed || i < last && r.Mode == string(policy.ModeEnforce):
				// A learned CONNECT opens what it carried too; in enforce
				// mode a CONNECT whose carried bytes were refused was itself
				// allowed.
				add(in, true)
			case i == last:
				add(in, false)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("learn: suggest: %w", err)
	}
	return nil
}

// presetIndex maps each key of the embedded presets to the presets naming it.
func presetIndex() (map[string][]string, error) {
	idx := map[string][]string{}
	names, err := fs.Glob(policies.FS, "presets/*.json")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		b, err := fs.ReadFile(policies.FS, n)
		if err != nil {
			return nil, err
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("learn: preset %s: %w", n, err)
		}
		name := strings.TrimSuffix(path.Base(n), ".json")
		for k := range m {
			idx[k] = append(idx[k], name)
		}
	}
	return idx, nil
}

// keysOf are the host-list keys matching host, as the library builds them.
func keysOf(host string) []string {
	suf := hostname.Suffixes(host)
	if len(suf) < 2 {
		return []string{host}
	}
	keys := []string{host, "*." + suf[1]}
	for _, x := range suf[1:] {
		keys = append(keys, "**."+x)
	}
	return keys
}

// groupPresets puts each host whose every allowed input the baseline allows,
// and that a preset lists, under that preset. It returns the samples that
// still need an entry, by host.
func (s *Suggestion) groupPresets(ctx context.Context, base policy.Decider, idx map[string][]string) map[string][]policy.Input {
	byHost := map[string][]policy.Input{}
	for _, x := range s.Allowed {
		byHost[x.Input.Destination.Host] = append(byHost[x.Input.Destination.Host], x.Input)
	}
	need := map[string][]policy.Input{}
	for host, ins := range byHost {
		var presets []string
		for _, k := range keysOf(host) {
			presets = append(presets, idx[k]...)
		}
		covered := len(presets) > 0
		for i := range ins {
			if covered && !base.Decide(ctx, &ins[i]).Allowed {
				covered = false
			}
		}
		if !covered {
			need[host] = ins
			continue
		}
		for _, p := range dedupe(presets) {
			s.Presets[p] = append(s.Presets[p], host)
		}
	}
	for _, hs := range s.Presets {
		sort.Strings(hs)
	}
	return need
}

// buildEntries makes one entry per host (or per wildcard of many siblings)
// from its inputs.
func (s *Suggestion) buildEntries(need map[string][]policy.Input, cfg SuggestConfig) {
	groups := wildcardGroups(need, s.Denied, cfg.WildcardThreshold)
	for key, hosts := range groups {
		var ins []policy.Input
		for _, h := range hosts {
			ins = append(ins, need[h]...)
		}
		s.Hosts[key] = entryOf(key, ins, s.Denied, cfg.PrefixPaths)
	}
}

// wildcardGroups maps each entry key to the hosts it stands for: "*.parent"
// for WildcardThreshold or more siblings under a parent that may carry a
// wildcard (wildcardOK) and that no denied input's host falls under; the
// host itself otherwise.
func wildcardGroups(need map[string][]policy.Input, denied []Sample, threshold int) map[string][]string {
	byParent := map[string][]string{}
	groups := map[string][]string{}
	for h := range need {
		suf := hostname.Suffixes(h)
		if isIP(h) || len(suf) < 2 {
			groups[h] = []string{h}
			continue
		}
		byParent[suf[1]] = append(byParent[suf[1]], h)
	}
	for parent, hs := range byParent {
		if len(hs) >= threshold && wildcardOK(parent) && !deniedUnder(parent, hs, denied) {
			groups["*."+parent] = hs
			continue
		}
		for _, h := range hs {
			groups[h] = []string{h}
		}
	}
	return groups
}

// wildcardOK: "*.parent" may be suggested only when parent is below a
// registrable domain (hostname.BelowRegistrable: not a public suffix such as
// com, co.uk, github.io, and not directly under one, as example.com and
// user.github.io are) and the wildcard stays inside it
// (hostname.WildcardBounded), so a wildcard never spans names of different
// owners nor all of one owner's names.
func wildcardOK(parent string) bool {
	return hostname.BelowRegistrable(parent) && hostname.WildcardBounded("*."+parent)
}

// deniedUnder reports whether a denied input's host is a name one label under
// parent other than the hosts hs (whose own denials are conflicts anyway).
func deniedUnder(parent string, hs []string, denied []Sample) bool {
	own := map[string]bool{}
	for _, h := range hs {
		own[h] = true
	}
	for _, d := range denied {
		h := d.Input.Destination.Host
		suf := hostname.Suffixes(h)
		if len(suf) >= 2 && suf[1] == parent && !own[h] {
			return true
		}
	}
	return false
}

// entryOf is the entry for key from its inputs: ports by kind, DNS, and per
// HTTP method the ports and the paths (prefixes that avoid every denied path
// of the same method under key).
func entryOf(key string, ins []policy.Input, denied []Sample, prefixPaths int) *Entry {
	e := &Entry{DNS: true} // a host the sandbox may reach it may resolve
	ports := map[string]map[int]bool{}
	type methodSeen struct {
		ports map[int]bool
		paths map[string]bool
	}
	methods := map[string]*methodSeen{}
	for _, in := range ins {
		switch in.Kind {
		case policy.KindConnect, policy.KindTLS, policy.KindTCP:
			k := string(in.Kind)
			if ports[k] == nil {
				ports[k] = map[int]bool{}
			}
			ports[k][in.Destination.Port] = true
		case policy.KindHTTP:
			m := methods[in.HTTP.Method]
			if m == nil {
				m = &methodSeen{ports: map[int]bool{}, paths: map[string]bool{}}
				methods[in.HTTP.Method] = m
			}
			m.ports[in.Destination.Port] = true
			m.paths[in.HTTP.Path] = true
		}
	}
	for k, ps := range ports {
		if e.Ports == nil {
			e.Ports = map[string][]int{}
		}
		e.Ports[k] = sortedInts(ps)
	}
	for method, m := range methods {
		if e.HTTP == nil {
			e.HTTP = map[string]*HTTPRule{}
		}
		var avoid []string
		for _, d := range denied {
			if d.Input.Kind == policy.KindHTTP && d.Input.HTTP.Method == method && keyMatches(key, d.Input.Destination.Host) {
				avoid = append(avoid, d.Input.HTTP.Path)
			}
		}
		e.HTTP[method] = &HTTPRule{Ports: sortedInts(m.ports), Paths: pathPrefixes(sortedKeys(m.paths), avoid, prefixPaths)}
	}
	return e
}

func keyMatches(key, host string) bool {
	if parent, ok := strings.CutPrefix(key, "*."); ok {
		suf := hostname.Suffixes(host)
		return len(suf) >= 2 && suf[1] == parent
	}
	return key == host
}

// pathPrefixes groups paths by their first segment ("/v1/..."); a group of at
// least min distinct paths becomes its longest common directory with "*"
// ("/v1/chat/*"), unless a path to avoid falls under it; everything else is
// listed exactly.
func pathPrefixes(paths, avoid []string, min int) []string {
	groups := map[string][]string{}
	var out []string
	for _, p := range paths {
		seg, _, ok := strings.Cut(strings.TrimPrefix(p, "/"), "/")
		if !ok || seg == "" {
			out = append(out, p) // "/", "/robots.txt": exact
			continue
		}
		groups[seg] = append(groups[seg], p)
	}
	for _, g := range groups {
		dir := commonDir(g)
		if len(g) < min || underAny(dir, avoid) || strings.Contains(dir, "/../") || strings.Contains(dir, "/./") {
			out = append(out, g...)
			continue
		}
		out = append(out, dir+"*")
	}
	sort.Strings(out)
	return out
}

// commonDir is the longest prefix of every path in ps that ends with "/".
func commonDir(ps []string) string {
	pre := ps[0]
	for _, p := range ps[1:] {
		for !strings.HasPrefix(p, pre) {
			pre = pre[:len(pre)-1]
		}
	}
	return pre[:strings.LastIndex(pre, "/")+1]
}

func underAny(dir string, paths []string) bool {
	for _, p := range paths {
		if strings.HasPrefix(p, dir) {
			return true
		}
	}
	return false
}

func sortedInts(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func dedupe(ss []string) []string {
	sort.Strings(ss)
	out := ss[:0]
	for i, s := range ss {
		if i == 0 || s != ss[i-1] {
			out = append(out, s)
		}
	}
	return out
}
