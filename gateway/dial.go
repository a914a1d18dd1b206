package gateway

import (
	"context"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// dial connects to the upstream through the guarded dialer.
func (g *Gateway) dial(rc *reqCtx) error {
	t0 := time.Now()
	defer func() { rc.dialDur = time.Since(t0) }()
	switch rc.kind {
	case policy.KindHTTP:
		return rc.sess.upstream(rc, false)
	case policy.KindConnect, policy.KindTLS:
		if rc.mitm {
			return nil // each inner request dials
		}
	}
	if rc.kind == policy.KindConnect {
		// Resolve and check now, so the CONNECT's answer says whether the
		// destination can be reached; connect only once what the tunnel
		// carries is decided (relayConnect, connectRoute).
		ctx, cancel := context.WithTimeout(context.Background(), g.dialer.timeout)
		defer cancel()
		t, err := g.dialer.plan(ctx, rc.cc.sb.info.ID, rc.host, rc.port)
		rc.dialedAt(t.at)
		rc.route = t
		return err
	}
	c, at, err := g.dialer.dialHost(context.Background(), rc.cc.sb.info.ID, rc.host, rc.port)
	rc.dialedAt(at)
	if err != nil {
		return err
	}
	rc.upRaw = c
	return nil
}

// connectRoute opens the upstream connection of a CONNECT planned by dial,
// once everything that could refuse the tunnel has allowed it.
func (g *Gateway) connectRoute(rc *reqCtx) error {
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), g.dialer.timeout)
	defer cancel()
	c, at, err := g.dialer.connect(ctx, rc.route)
	rc.dialDur += time.Since(t0)
	rc.dialedAt(at)
	if err != nil {
		return err
	}
	rc.upRaw = c
	return nil
}

// dialedAt records where a dial went.
func (rc *reqCtx) dialedAt(at dialed) {
	if at.ip.IsValid() {
		rc.ip = at.ip
	}
	if at.parent != "" {
		rc.parent = at.parent
	}
}
