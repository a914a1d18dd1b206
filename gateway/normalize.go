package gateway

import (
	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/policy"
)

// normalizeOrScreen is the normalize stage: a request whose destination does
// not normalize is refused, and flagged when it carries a placeholder.
func (g *Gateway) normalizeOrScreen(rc *reqCtx) error {
	if err := g.normalize(rc); err != nil {
		if serr := g.screenRaw(rc); serr != nil {
			return serr // a placeholder in a malformed request is flagged too
		}
		return err
	}
	return nil
}

// normalize fills host and port and enforces one destination per connection.
func (g *Gateway) normalize(rc *reqCtx) error {
	switch rc.kind {
	case policy.KindHTTP:
		return rc.sess.normalizeRequest(rc)
	case policy.KindConnect:
		return rc.sess.normalizeConnect(rc)
	case policy.KindTLS:
		if rc.sni != "" {
			h, err := hostname.Normalize(rc.sni)
			if err != nil {
				return deny(ReasonBadDestination, "tls server name: %v", err)
			}
			rc.host = h
		} else {
			rc.host = rc.origDst.Addr().Unmap().String()
			rc.ip = rc.origDst.Addr().Unmap()
		}
		rc.port = int(rc.origDst.Port())
		return g.claimTunnel(rc)
	case policy.KindTCP:
		// Decided by the name the sandbox resolved to the address, if the DNS
		// filter answered it one (dial then resolves the name again); else as
		// the bare address.
		rc.ip = rc.origDst.Addr().Unmap()
		rc.host = rc.ip.String()
		if name, ok := g.dialer.nameFor(rc.cc.sb.info.ID, rc.ip); ok {
			rc.host, rc.named = name, true
		}
		rc.port = int(rc.origDst.Port())
		return g.claimTunnel(rc)
	}
	return deny(ReasonBadRequest, "unknown kind %q", rc.kind)
}

// claimTunnel enforces max_tunnels_per_sandbox; finish releases the slot.
func (g *Gateway) claimTunnel(rc *reqCtx) error {
	rc.tunnel = true
	if rc.cc.sb.tunnels.Add(1) > int64(g.cfg.MaxTunnelsPerSandbox) {
		rc.cc.sb.tunnels.Add(-1)
		rc.tunnel = false
		return deny(ReasonTunnelLimit, "sandbox %s has %d tunnels open (max_tunnels_per_sandbox)", rc.cc.sb.info.ID, g.cfg.MaxTunnelsPerSandbox)
	}
	g.metrics.activeTunnels.Inc()
	return nil
}
