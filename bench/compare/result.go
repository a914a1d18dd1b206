package main

import (
	"slices"
	"strings"
)

// metric is one named value of one round.
type metric struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
}

// measure is one row group of the table: what is measured and its subjects.
type measure struct {
	Name string `json:"name"`
	// Primary names the metric ratios are taken on; Higher says bigger is better.
	Primary string `json:"primary"`
	Higher  bool   `json:"higher_is_better"`
	// Target is free text shown beside airlock rows without goals (older
	// raw files); the targets are the subjects' Goals.
	Target   string    `json:"target,omitempty"`
	Subjects []subject `json:"subjects"`
}

// subject is one contender of a measure: direct, airlock or a peer.
type subject struct {
	Name string `json:"name"`
	// Peer marks the tools users would pick instead (the best one is the
	// "vs best peer" reference).
	Peer    bool       `json:"peer"`
	Command string     `json:"command"`
	Rounds  [][]metric `json:"rounds"`
	Note    string     `json:"note,omitempty"`
	// Goals are the subject's targets (reported, never asserted).
	Goals []goal `json:"goals,omitempty"`
	// Before is the same command with the before build (BENCH_BEFORE),
	// measured in the same rounds, alternating with this one; its Note says
	// "n/a: ..." when that build lacks the feature.
	Before *subject `json:"before,omitempty"`
	run    func() ([]metric, string, error)
}

// median of name over the rounds; ok is false when no round has it.
func (s *subject) median(name string) (float64, bool) {
	var v []float64
	for _, r := range s.Rounds {
		for _, m := range r {
			if m.Name == name {
				v = append(v, m.Value)
			}
		}
	}
	if len(v) == 0 {
		return 0, false
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2], true
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2, true
}

// metricNames lists the metric names the subjects reported, primary first.
func (m *measure) metricNames() []string {
	names := []string{m.Primary}
	for _, s := range m.Subjects {
		for _, r := range s.Rounds {
			for _, x := range r {
				if !slices.Contains(names, x.Name) {
					names = append(names, x.Name)
				}
			}
		}
	}
	return names
}

func (m *measure) subject(name string) *subject {
	for i := range m.Subjects {
		if m.Subjects[i].Name == name {
			return &m.Subjects[i]
		}
	}
	return nil
}

// bestPeer is the peer with the best primary median.
func (m *measure) bestPeer() *subject {
	var best *subject
	var bv float64
	for i := range m.Subjects {
		s := &m.Subjects[i]
		v, ok := s.median(m.Primary)
		if !s.Peer || !ok {
			continue
		}
		if best == nil || (m.Higher && v > bv) || (!m.Higher && v < bv) {
			best, bv = s, v
		}
	}
	return best
}

func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t'\"$|&;<>(){}*?") {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		} else {
			q[i] = a
		}
	}
	return strings.Join(q, " ")
}
