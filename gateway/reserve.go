package gateway

import (
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// reserve takes room in the audit log for the record of an allowed HTTP
// request before anything of it leaves, when the log can hold room
// (audit.Reserver, audit.overflow deny): that record is written after the
// exchange, by finish, through the reservation, and must not be refused
// then. A tunnel's decision record is written before its bytes flow
// (openTunnel), so it needs none here.
func (g *Gateway) reserve(rc *reqCtx) error {
	r, ok := g.log.(audit.Reserver)
	if !ok || rc.kind != policy.KindHTTP {
		return nil
	}
	res, err := r.Reserve()
	if err != nil {
		return deny(ReasonAuditUnavailable, "audit log cannot take the record: %v", err)
	}
	rc.res = res
	return nil
}

// openTunnel writes a tunnel's decision record before its bytes flow, so a
// long-lived tunnel is visible at once; finish writes the close record, into
// room reserved here when the log can hold room.
func (g *Gateway) openTunnel(rc *reqCtx) error {
	var closeRes audit.Reservation
	if r, ok := g.log.(audit.Reserver); ok {
		var err error
		if closeRes, err = r.Reserve(); err != nil {
			return deny(ReasonAuditUnavailable, "audit log cannot take the tunnel's close record: %v", err)
		}
	}
	if err := g.writeRecord(rc, decisionRecord(rc)); err != nil {
		if closeRes != nil {
			closeRes.Cancel()
		}
		g.auditFailed(err)
		return deny(ReasonAuditUnavailable, "audit log refused the record")
	}
	rc.opened, rc.res = true, closeRes
	g.holdOpen(rc)
	return nil
}

// writeRecord writes r through rc's reservation, if it holds one, else
// straight to the log.
func (g *Gateway) writeRecord(rc *reqCtx, r *audit.Record) error {
	if res := rc.res; res != nil {
		rc.res = nil
		return res.Log(r)
	}
	return g.log.Log(r)
}
