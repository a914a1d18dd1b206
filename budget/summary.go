package budget

import (
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
	"time"
)

// Bounds on one summary window's memory, whatever a sandbox sends.
const (
	// MaxNames bounds the distinct names a window counts by name; further
	// names are counted but not by name, and the summary says it was capped.
	MaxNames = 2048
	// MaxKeys bounds the distinct values of each count (Summary.Count);
	// further values are counted under OtherKey.
	MaxKeys = 64
	// OtherKey is where a count past MaxKeys values goes.
	OtherKey = "other"
)

// Extra field keys every summary carries.
const (
	WindowStartKey = "window_start" // RFC 3339, UTC
	WindowEndKey   = "window_end"
	WindowMSKey    = "window_ms"
	FinalKey       = "final" // true on the summary written when its sandbox stopped
)

// Summary is one window's counts for one sandbox: how many events (N), each
// counted by value under named counts (By, keyed by the extra field they are
// written as, e.g. "by_decision"), plain totals, and by name (host or DNS
// name). Not safe for concurrent use; a Meter guards its own.
type Summary struct {
	Start, End  time.Time
	N           int
	By          map[string]map[string]int
	Totals      map[string]int
	Names       map[string]int
	NamesCapped bool
}

// NewSummary returns an empty window opened at start.
func NewSummary(start time.Time) *Summary {
	return &Summary{Start: start, By: map[string]map[string]int{}, Totals: map[string]int{}, Names: map[string]int{}}
}

// Count adds n to value key of the count named by.
func (s *Summary) Count(by, key string, n int) {
	m := s.By[by]
	if m == nil {
		m = make(map[string]int, 4)
		s.By[by] = m
	}
	if _, ok := m[key]; !ok && len(m) >= MaxKeys {
		key = OtherKey
	}
	m[key] += n
}

// Total adds n to the plain total named key.
func (s *Summary) Total(key string, n int) { s.Totals[key] += n }

// AddName counts name n times; "" is not counted.
func (s *Summary) AddName(name string, n int) {
	if name == "" {
		return
	}
	if _, ok := s.Names[name]; !ok && len(s.Names) >= MaxNames {
		s.NamesCapped = true
		return
	}
	s.Names[name] += n
}

// Merge adds o's counts to s (a summary whose write failed, carried on).
func (s *Summary) Merge(o *Summary) {
	if o.Start.Before(s.Start) {
		s.Start = o.Start
	}
	s.N += o.N
	for by, m := range o.By {
		for k, v := range m {
			s.Count(by, k, v)
		}
	}
	for k, v := range o.Totals {
		s.Totals[k] += v
	}
	for k, v := range o.Names {
		s.AddName(k, v)
	}
	s.NamesCapped = s.NamesCapped || o.NamesCapped
}

// NameCount is one entry of a summary's most frequent names.
type NameCount struct {
	Name  string
	Count int
}

// Top returns at most n names, most frequent first, ties by name.
func (s *Summary) Top(n int) []NameCount {
	top := make([]NameCount, 0, len(s.Names))
	for k, c := range s.Names {
		top = append(top, NameCount{k, c})
	}
	slices.SortFunc(top, func(a, b NameCount) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return top[:min(len(top), max(n, 0))]
}

// Fields names a summary's own extra fields: Count for N ("requests"),
// Distinct for the number of names ("distinct_hosts", with "_capped"
// appended when capped), Top for the most frequent ("top_hosts"), each entry
// an object {Item: name, "count": n}.
type Fields struct {
	Count, Distinct, Top, Item string
}

// Extra renders s as a record's extra fields: N under f.Count, every
// non-empty count under its name, the totals, the distinct and topN most
// frequent names, the window's start, end and length, and final when the
// sandbox stopped. The one place a summary's fields are written.
func (s *Summary) Extra(f Fields, topN int, final bool) map[string]json.RawMessage {
	extra := make(map[string]json.RawMessage, 8+len(s.By)+len(s.Totals))
	put := func(k string, v any) { extra[k], _ = json.Marshal(v) }
	put(f.Count, s.N)
	for by, m := range s.By {
		if len(m) > 0 {
			put(by, m)
		}
	}
	for k, v := range s.Totals {
		put(k, v)
	}
	put(f.Distinct, len(s.Names))
	if s.NamesCapped {
		put(f.Distinct+"_capped", true)
	}
	top := []byte{'['}
	item := strconv.Quote(f.Item)
	for i, e := range s.Top(topN) {
		if i > 0 {
			top = append(top, ',')
		}
		name, _ := json.Marshal(e.Name)
		top = append(top, '{')
		top = append(top, item...)
		top = append(top, ':')
		top = append(top, name...)
		top = append(top, `,"count":`...)
		top = strconv.AppendInt(top, int64(e.Count), 10)
		top = append(top, '}')
	}
	extra[f.Top] = append(top, ']')
	put(WindowStartKey, s.Start.UTC().Format(time.RFC3339Nano))
	put(WindowEndKey, s.End.UTC().Format(time.RFC3339Nano))
	put(WindowMSKey, s.End.Sub(s.Start).Milliseconds())
	if final {
		put(FinalKey, true)
	}
	return extra
}
