package gateway

import (
	"fmt"

	"github.com/airlock-dev/airlock/oplog"
	"github.com/airlock-dev/airlock/policy"
)

// Changing one sandbox's own rules at run time (the daemon's PATCH
// /v1/sandboxes/{id}). A served sandbox's labels, mode and allow list are
// read by every decision through current(); UpdateSandbox swaps them in one
// store, so a request decided after it returns sees the new rules (a
// keep-alive connection's next request, an HTTP/2 connection's next stream),
// then re-decides the sandbox's long-lived connections (Redecide): a tunnel
// or websocket the new rules refuse is closed with policy_changed.

// current is the sandbox as decisions see it now: info as served, or as
// UpdateSandbox last set it.
func (s *sandbox) current() policy.Sandbox {
	if p := s.rules.Load(); p != nil {
		return *p
	}
	return s.info
}

// UpdateSandbox replaces the labels, mode and allow list of the served
// sandbox sb.ID with sb's (its id and pod stay), then re-decides its open
// tunnels and websockets. It returns how many of them it closed; an
// unknown id is an error.
func (g *Gateway) UpdateSandbox(sb policy.Sandbox) (closed int, err error) {
	g.mu.Lock()
	s := g.sandboxes[sb.ID]
	g.mu.Unlock()
	if s == nil {
		return 0, fmt.Errorf("gateway: update sandbox %q: not served", sb.ID)
	}
	sb.Pod = s.info.Pod
	s.rules.Store(&sb)
	g.logger.Info("sandbox rules changed", oplog.SandboxKey, sb.ID)
	return g.Redecide(sb.ID), nil
}
