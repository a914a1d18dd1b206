package dnsfilter

import (
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/airlock-dev/airlock/policy"
)

// Changing one sandbox's own rules at run time (PATCH /v1/sandboxes/{id}):
// its labels, mode and allow list are part of every DNS input, and its
// decision cache holds what the old ones decided. UpdateSandbox swaps them
// at once; the cache's revision carries a generation that every update
// moves, so nothing the old rules decided is answered again.

// liveRules is a served sandbox's rules as they are now.
type liveRules struct {
	sb  policy.Sandbox
	gen string // "" as served; "#n" after the nth update (decision cache revision)
}

// updates counts a sandbox server's rule changes.
type updates struct {
	n    atomic.Uint64
	live atomic.Pointer[liveRules]
}

// rules is the sandbox as its questions are decided now.
func (s *sandboxServer) rules() *liveRules {
	if r := s.upd.live.Load(); r != nil {
		return r
	}
	return &liveRules{sb: s.sb}
}

// UpdateSandbox replaces the labels, mode and allow list of the served
// sandbox sb.ID with sb's (its id and pod stay): the next question is
// decided under them. An unknown id is an error.
func (f *Filter) UpdateSandbox(sb policy.Sandbox) error {
	f.mu.Lock()
	s := f.sandboxes[sb.ID]
	f.mu.Unlock()
	if s == nil {
		return fmt.Errorf("dnsfilter: update sandbox %q: not served", sb.ID)
	}
	sb.Pod = s.sb.Pod
	gen := "#" + strconv.FormatUint(s.upd.n.Add(1), 10)
	s.upd.live.Store(&liveRules{sb: sb, gen: gen})
	return nil
}
