package main

import (
	"fmt"
	"strings"
)

// goal is one target of a subject, as data so the status is computed from
// the numbers (and again by -render): the subject's median of Metric
// compared by Op with Factor times the median of Ref (a subject of the same
// measure, or of RefMeasure), or with Value when Ref is empty.
type goal struct {
	Metric     string  `json:"metric"`
	Op         string  `json:"op"` // ">=", "<=", ">", "<", "="
	Factor     float64 `json:"factor,omitempty"`
	Ref        string  `json:"ref,omitempty"`
	RefMeasure string  `json:"ref_measure,omitempty"`
	Value      float64 `json:"value,omitempty"`
}

// atLeast and atMost build the usual goals: Metric against factor times a
// reference subject's.
func atLeast(metric string, factor float64, ref string) goal {
	return goal{Metric: metric, Op: ">=", Factor: factor, Ref: ref}
}

func atMost(metric string, factor float64, ref string) goal {
	return goal{Metric: metric, Op: "<=", Factor: factor, Ref: ref}
}

// under and over compare with a constant.
func under(metric string, v float64) goal { return goal{Metric: metric, Op: "<", Value: v} }
func over(metric string, v float64) goal  { return goal{Metric: metric, Op: ">=", Value: v} }
func equal(metric string, v float64) goal { return goal{Metric: metric, Op: "=", Value: v} }

var opText = map[string]string{">=": "≥", "<=": "≤", ">": ">", "<": "<", "=": "="}

// text is the goal as the table says it: "req/s ≥ 1.5x squid", "p50 ms < 10".
func (g goal) text() string {
	if g.Ref == "" {
		return fmt.Sprintf("%s %s %s", g.Metric, opText[g.Op], fmtGoalNum(g.Value))
	}
	ref := g.Ref
	if g.Factor != 1 {
		ref = fmtGoalNum(g.Factor) + "x " + ref
	}
	return fmt.Sprintf("%s %s %s", g.Metric, opText[g.Op], ref)
}

func fmtGoalNum(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// goalStatus is the outcome of one goal.
type goalStatus int

const (
	goalUnknown goalStatus = iota // a number is missing (not measured, n/a)
	goalMet
	goalMissed
)

// eval compares s's median with the goal's reference among ms (m is s's
// measure). got is what the table shows beside the goal: the ratio to the
// reference, or the value.
func (g goal) eval(ms []measure, m *measure, s *subject) (st goalStatus, got string) {
	v, ok := s.median(g.Metric)
	if !ok {
		return goalUnknown, "not measured"
	}
	want := g.Value
	if g.Ref != "" {
		in := m
		if g.RefMeasure != "" {
			in = findMeasure(ms, g.RefMeasure)
		}
		var ref *subject
		if in != nil {
			ref = in.subject(g.Ref)
		}
		if ref == nil {
			return goalUnknown, g.Ref + " not measured"
		}
		r, ok := ref.median(g.Metric)
		if !ok || r == 0 {
			return goalUnknown, g.Ref + " not measured"
		}
		want = g.Factor * r
		got = fmt.Sprintf("%.2fx", v/r)
	} else {
		got = fmtNum(v)
	}
	var met bool
	switch g.Op {
	case ">=":
		met = v >= want
	case "<=":
		met = v <= want
	case ">":
		met = v > want
	case "<":
		met = v < want
	case "=":
		met = v == want
	default:
		return goalUnknown, "bad op " + g.Op
	}
	if met {
		return goalMet, got
	}
	return goalMissed, got
}

// findMeasure is the measure whose name starts with name (names may carry
// sizes: "TLS interception bulk (1024 MiB)").
func findMeasure(ms []measure, name string) *measure {
	for i := range ms {
		if ms[i].Name == name {
			return &ms[i]
		}
	}
	for i := range ms {
		if strings.HasPrefix(ms[i].Name, name) {
			return &ms[i]
		}
	}
	return nil
}

// targetCells are a subject's target and status cells: each goal with what
// was measured against it ("req/s ≥ 1.5x squid: 1.12x"), and "**met**" when
// every goal is met, "**missed**" when one is, "n/a" when a number is
// missing. A subject without goals has empty cells.
func targetCells(ms []measure, m *measure, s *subject) (target, status string) {
	if len(s.Goals) == 0 {
		return "", ""
	}
	var parts []string
	all := goalMet
	for _, g := range s.Goals {
		st, got := g.eval(ms, m, s)
		parts = append(parts, g.text()+": "+got)
		switch {
		case st == goalMissed:
			all = goalMissed
		case st == goalUnknown && all == goalMet:
			all = goalUnknown
		}
	}
	status = map[goalStatus]string{goalMet: "**met**", goalMissed: "**missed**", goalUnknown: "n/a"}[all]
	return strings.Join(parts, "; "), status
}
