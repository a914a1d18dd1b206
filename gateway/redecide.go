package gateway

import (
	"net/http"
	"sync"

	"github.com/airlock-dev/airlock/policy"
)

// Re-deciding open connections. A request on a keep-alive session is decided
// when it comes, so a policy change reaches it by itself; a connection that
// is admitted once and then carries bytes for as long as it stays open (a
// tunnel: CONNECT, SOCKS5, transparent TLS or TCP, an intercepted CONNECT's
// session; a websocket after its 101) is not. Each of those is registered
// with the decisions it was admitted with, and Redecide asks them again
// under the policy now in force: a connection that would now be refused, or
// whose interception choice changed, is closed, and its close record says
// policy_changed.

// ChangeNotifier is implemented by deciders that can say when their policy
// changed (policy.Engine: a reload or a bundle activation). A gateway built
// with one re-decides every open connection after each change.
type ChangeNotifier interface {
	Changed() <-chan struct{}
}

// liveSet is the gateway's registered long-lived connections.
type liveSet struct {
	mu sync.Mutex
	m  map[*reqCtx]struct{}
}

// admitted is what a long-lived connection was admitted with: the decisions
// it must still pass.
type admitted struct {
	opening policy.Input // the CONNECT, upgrade, TLS or TCP input
	carried *policy.Input
	mitm    bool
}

// holdOpen registers rc as a long-lived connection; finish lets it go.
func (g *Gateway) holdOpen(rc *reqCtx) {
	if rc.adm == nil {
		return // nothing decided it (never the case for a connection that carries bytes)
	}
	g.live.mu.Lock()
	if g.live.m == nil {
		g.live.m = make(map[*reqCtx]struct{})
	}
	g.live.m[rc] = struct{}{}
	g.live.mu.Unlock()
}

// letGo unregisters rc.
func (g *Gateway) letGo(rc *reqCtx) {
	g.live.mu.Lock()
	delete(g.live.m, rc)
	g.live.mu.Unlock()
}

// Redecide re-decides every long-lived connection of the sandbox sandboxID
// (every sandbox's when it is "") under the policy in force now and closes
// those it would no longer admit as they are: refused, or intercepted where
// they were passed through (or the reverse). It returns how many it closed.
// The gateway calls it after each change its decider announces
// (ChangeNotifier); a change to one sandbox's own rules calls it with that
// sandbox's id.
func (g *Gateway) Redecide(sandboxID string) int {
	g.live.mu.Lock()
	rcs := make([]*reqCtx, 0, len(g.live.m))
	for rc := range g.live.m {
		if sandboxID == "" || rc.cc.sb.info.ID == sandboxID {
			rcs = append(rcs, rc)
		}
	}
	g.live.mu.Unlock()
	closed := 0
	for _, rc := range rcs {
		if why := g.stillAdmitted(rc); why != "" {
			if rc.revoked.CompareAndSwap(nil, &denial{reason: ReasonPolicyChanged, msg: why, status: http.StatusForbidden}) {
				closed++
			}
			rc.cc.forceClose()
		}
	}
	if closed > 0 {
		g.logger.Warn("closed connections the changed policy no longer allows", "closed", closed, "sandbox", sandboxID)
	}
	return closed
}

// stillAdmitted asks rc's admitting decisions again; it returns why rc must
// close, or "" when it may stay open.
func (g *Gateway) stillAdmitted(rc *reqCtx) string {
	a := rc.adm
	in := a.opening
	in.Sandbox = rc.cc.sb.current() // the sandbox as it is now (its own rules may have changed)
	d := g.redecide(&in)
	if !d.Permit() && !approvedStill(rc, d) {
		return "the policy in force refuses " + string(in.Kind) + " to " + in.Destination.Host
	}
	if in.Kind == policy.KindConnect || in.Kind == policy.KindTLS {
		if g.intercepts(rc, &in, d) != a.mitm {
			return "the policy in force changed interception of " + in.Destination.Host
		}
	}
	if a.carried != nil {
		c := *a.carried
		c.Sandbox = in.Sandbox
		if d := g.redecide(&c); !d.Permit() && !approvedStill(rc, d) {
			return "the policy in force refuses what the tunnel to " + in.Destination.Host + " carries"
		}
	}
	return ""
}

// redecide runs one decision of a re-check, bounded by PolicyTimeout.
func (g *Gateway) redecide(in *policy.Input) policy.Decision {
	ctx := newDecisionCtx(g.cfg.PolicyTimeout)
	defer ctx.stop()
	return g.dec.Decide(ctx, in)
}

// watchChanges re-decides open connections after each change n announces,
// until quit closes.
func (g *Gateway) watchChanges(n ChangeNotifier, quit <-chan struct{}) {
	ch := n.Changed()
	for {
		select {
		case <-quit:
			return
		case <-ch:
		}
		ch = n.Changed() // before re-deciding: a change during it is not lost
		g.Redecide("")
	}
}
