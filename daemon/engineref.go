package daemon

import (
	"context"
	"errors"

	"github.com/airlock-dev/airlock/dnsfilter"
	"github.com/airlock-dev/airlock/gateway"
	"github.com/airlock-dev/airlock/policy"
)

// engineRef is the Decider the DNS filter and the gateway are built with while
// the policy still compiles. New sets it before anything serves; a decision
// asked before that waits for it, and one asked of a compile that failed (or
// after ctx ends) is the fail-closed deny.
type engineRef struct {
	ready chan struct{}
	e     *policy.Engine
	// kick starts a lazy compile (compileEngine) before a decision waits
	// for it; nil or a no-op once started.
	kick func()
}

var (
	_ policy.Decider         = (*engineRef)(nil)
	_ dnsfilter.Revisioner   = (*engineRef)(nil)
	_ gateway.ChangeNotifier = (*engineRef)(nil)
)

func newEngineRef() *engineRef { return &engineRef{ready: make(chan struct{})} }

// set publishes the engine (nil for a failed compile). It is called once.
func (r *engineRef) set(e *policy.Engine) {
	r.e = e
	close(r.ready)
}

func (r *engineRef) Decide(ctx context.Context, in *policy.Input) policy.Decision {
	// Once the engine is set (every decision but the first few), ctx.Done is
	// never asked for: the gateway's decision context arms its timer only
	// when something waits on it.
	select {
	case <-r.ready:
	default:
		if r.kick != nil {
			r.kick()
		}
		select {
		case <-r.ready:
		case <-ctx.Done():
			return policyError(ctx.Err())
		}
	}
	if r.e == nil {
		return policyError(errors.New("policy engine unavailable"))
	}
	return r.e.Decide(ctx, in)
}

// Rev names the engine's policy revision, so the DNS filter caches decisions
// per revision (without it the filter evaluated Rego for every query). Before the
// engine is set it is "", which no decision carries, so nothing is cached then.
func (r *engineRef) Rev() string {
	select {
	case <-r.ready:
		if r.e != nil {
			return r.e.Rev()
		}
	default:
	}
	return ""
}

// Changed is closed when the policy changes, so the gateway re-decides the
// connections it holds open: before the engine is set, when it is set; then
// on each reload or bundle activation of the engine. A failed compile never
// changes (every decision is the fail-closed deny already).
func (r *engineRef) Changed() <-chan struct{} {
	select {
	case <-r.ready:
		if r.e != nil {
			return r.e.Changed()
		}
		return nil
	default:
		return r.ready
	}
}

func policyError(err error) policy.Decision {
	return policy.Decision{
		Reasons: []policy.Reason{{ID: policy.ReasonPolicyError, Msg: "policy unavailable"}},
		Err:     err,
	}
}
