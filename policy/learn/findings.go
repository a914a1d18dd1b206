package learn

import (
	"slices"

	"github.com/airlock-dev/airlock/audit"
)

// findingHosts tracks, per destination host, whether a request to it that the
// suggestion would allow was ever seen without a content finding.
type findingHosts struct {
	clean, dirty map[string]bool
}

// noteFindings records what r (to host, allowed or learned) carried.
func (s *Suggestion) noteFindings(r *audit.Record, host string, allowed bool) {
	if !allowed || host == "" {
		return
	}
	f := &s.findings
	if f.clean == nil {
		f.clean, f.dirty = map[string]bool{}, map[string]bool{}
	}
	if len(r.Findings) > 0 {
		f.dirty[host] = true
	} else {
		f.clean[host] = true
	}
}

// withholdFindingsOnly keeps a destination only ever seen carrying content
// findings out of the suggestion: its samples become ones the policy must
// still deny (so no wildcard covers it either), and it is listed in Withheld.
func (s *Suggestion) withholdFindingsOnly() {
	f := &s.findings
	if len(f.dirty) == 0 {
		return
	}
	kept := s.Allowed[:0]
	for _, smp := range s.Allowed {
		h := smp.Input.Destination.Host
		if f.dirty[h] && !f.clean[h] {
			s.Denied = append(s.Denied, smp)
			continue
		}
		kept = append(kept, smp)
	}
	s.Allowed = kept
	for h := range f.dirty {
		if !f.clean[h] {
			s.Withheld = append(s.Withheld, h)
		}
	}
	slices.Sort(s.Withheld)
}
