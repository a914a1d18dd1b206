package gateway

import (
	"context"
	"log/slog"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/oplog"
	"github.com/airlock-dev/airlock/policy"
)

// serve runs the pipeline of doc.go for one request, tunnel or connection and
// reports whether the client connection may carry another request.
func (g *Gateway) serve(rc *reqCtx) bool {
	defer g.finish(rc)
	if err := g.stages(rc); err != nil {
		rc.err = err
		g.refuse(rc)
		return false
	}
	return rc.keepAlive
}

// serveRefused audits and answers a refusal decided before the pipeline could
// start (a connection cap, a missing original destination).
func (g *Gateway) serveRefused(rc *reqCtx, err error) {
	defer g.finish(rc)
	rc.err = err
	g.refuse(rc)
}

// admitStages are the stages before relay, in their fixed order: the
// pipeline of doc.go. Each returns an error; the first error ends the request.
// A new stage is one file (its function) and one line here.
var admitStages = [...]func(*Gateway, *reqCtx) error{
	(*Gateway).normalizeOrScreen, // normalize.go: destination, one per connection
	(*Gateway).screen,            // secrets.go: placeholders, before policy
	(*Gateway).inspectStage,      // inspect.go: content findings, policy input
	(*Gateway).decide,            // decide.go: policy
	(*Gateway).reserve,           // reserve.go: room in the audit log
	(*Gateway).inject,            // secrets.go: bound secrets, after policy
	(*Gateway).dial,              // dial.go: resolve, ipguard, connect
}

// stages runs admit, then relay.
func (g *Gateway) stages(rc *reqCtx) error {
	if err := g.admit(rc); err != nil {
		return err
	}
	return g.relay(rc)
}

// admit runs every stage before relay.
func (g *Gateway) admit(rc *reqCtx) error {
	for _, stage := range admitStages {
		if err := stage(g, rc); err != nil {
			return err
		}
	}
	return nil
}

// relay moves the bytes.
func (g *Gateway) relay(rc *reqCtx) error {
	switch rc.kind {
	case policy.KindHTTP:
		if rc.sess.h2 != nil {
			return rc.sess.forwardH2(rc)
		}
		return rc.sess.forward(rc)
	case policy.KindConnect:
		return g.relayConnect(rc)
	case policy.KindTLS, policy.KindTCP:
		if rc.mitm {
			return g.intercept(rc, &prefixConn{Conn: rc.cc.nc, r: rc.br})
		}
		head, _ := rc.br.Peek(rc.br.Buffered())
		return g.tunnel(rc, rc.cc.nc, head, rc.upRaw)
	}
	return nil
}

// finish is the one deferred audit call: the decision record (unless a tunnel
// already wrote it) and, for tunnels, the close record, through the room
// reserved for it when there is one.
func (g *Gateway) finish(rc *reqCtx) {
	g.letGo(rc)
	if r := rc.revoked.Load(); r != nil {
		rc.err = r // closed by Redecide: that is why it ended
	}
	result := resultOf(rc)
	g.metrics.decided(rc.kind, result)
	if rc.upRaw != nil {
		rc.upRaw.Close()
	}
	rec := decisionRecord
	if rc.opened {
		rec = closeRecord // the decision record was written when it opened
	}
	if err := g.writeRecord(rc, rec(rc)); err != nil {
		g.auditFailed(err)
	}
	if rc.tunnel {
		rc.cc.sb.tunnels.Add(-1)
		g.metrics.activeTunnels.Dec()
		g.metrics.bytesUp.Add(float64(rc.bytesUp))
		g.metrics.bytesDown.Add(float64(rc.bytesDown))
	}
	if f := asFailure(rc.err); f != nil {
		g.metrics.upstreamErrors.WithLabelValues(f.reason).Inc()
	}
	g.logDecision(rc, result)
}

func resultOf(rc *reqCtx) string {
	switch {
	case rc.decided && rc.dec.Err != nil:
		return audit.DecisionError
	case asDenial(rc.err) != nil:
		return audit.DecisionDeny
	case rc.decided && !rc.dec.Allowed:
		return audit.DecisionDeny // report mode: what enforce would have done
	}
	return audit.DecisionAllow
}

func (g *Gateway) auditFailed(err error) {
	g.auditBlockedUntil.Store(time.Now().Add(time.Second).UnixNano())
	g.logger.Error("audit record refused; refusing new requests for 1s", oplog.ErrorKey, err)
}

func (g *Gateway) logDecision(rc *reqCtx, result string) {
	switch {
	case result == audit.DecisionAllow && rc.err == nil:
		if g.logger.Enabled(context.Background(), slog.LevelInfo) { // skip building attrs when off
			g.logger.Info("allow", oplog.IDKey, rc.id, oplog.SandboxKey, rc.cc.sb.info.ID, oplog.KindKey, rc.kind, oplog.HostKey, rc.host, oplog.PortKey, rc.port)
		}
	case result == audit.DecisionAllow:
		// The origin's failure (no such host, refused, timed out), answered to
		// the sandbox with a 502 naming it and audited: not airlock's own, so
		// Warn, and `airlock run` does not print it amid the command's output.
		g.logger.Warn("upstream failure", oplog.IDKey, rc.id, oplog.SandboxKey, rc.cc.sb.info.ID, oplog.KindKey, rc.kind, oplog.HostKey, rc.host, oplog.PortKey, rc.port, oplog.ErrorKey, rc.err)
	default:
		g.logger.Warn("deny", oplog.IDKey, rc.id, oplog.SandboxKey, rc.cc.sb.info.ID, oplog.KindKey, rc.kind, oplog.HostKey, rc.host, oplog.PortKey, rc.port, oplog.ErrorKey, rc.err)
	}
}
