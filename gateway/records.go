package gateway

import (
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// recordOf starts a record of rc with what every record of it carries: id,
// sandbox, kind and destination.
func recordOf(rc *reqCtx) *audit.Record {
	r := &audit.Record{
		ID:      rc.id,
		Sandbox: rc.cc.sb.info.ID,
		Kind:    string(rc.kind),
		Host:    rc.host,
		Port:    rc.port,
	}
	switch {
	case rc.up != nil && rc.up.ip == rc.ip && rc.up.ipText != "":
		r.IP = rc.up.ipText // a kept-alive upstream's, formatted once
	case rc.ip.IsValid():
		r.IP = rc.ip.String()
	}
	return r
}

// closeRecord builds a tunnel's close record: bytes, duration, and the denial
// that cut it off mid-stream, if any.
func closeRecord(rc *reqCtx) *audit.Record {
	r := recordOf(rc)
	r.Kind = audit.KindClose
	r.BytesUp, r.BytesDown = rc.bytesUp, rc.bytesDown
	r.DurationMS = float64(time.Since(rc.start).Microseconds()) / 1000
	parentExtra(r, rc)
	if rc.err != nil {
		r.Error = rc.err.Error()
	}
	var d *denial
	if errors.As(rc.err, &d) {
		// Cut off mid-stream (a placeholder in a tunnel): the reason and
		// flag go on the close record, the decision record being written.
		r.Reasons = []audit.Reason{{ID: d.reason, Msg: d.msg}}
		if d.flag != "" {
			r.Flags = []string{d.flag}
		}
	}
	boundText(r)
	return r
}

// decisionRecord builds the record of a request's, tunnel's or connection's
// decision.
func decisionRecord(rc *reqCtx) *audit.Record {
	r := recordOf(rc)
	r.Decision = resultOf(rc)
	if rc.carries != "" {
		r.Extra = map[string]json.RawMessage{"carries": json.RawMessage(strconv.Quote(string(rc.carries)))}
		if rc.carriedDecided {
			r.Extra["carried_decided"] = json.RawMessage("true")
		}
	}
	if rc.named {
		// The host is the name the sandbox resolved; this is the address it
		// connected to (r.IP is the one dialed).
		extra(r, "original_ip", rc.origDst.Addr().Unmap().String())
	}
	if rc.socks {
		extra(r, "proxy_protocol", "socks5")
	}
	if rc.req != nil && rc.req.ProtoMajor == 2 {
		extra(r, "http_version", "2")
		if n, err := strconv.Atoi(rc.grpcStatus); err == nil {
			r.Extra["grpc_status"] = json.RawMessage(strconv.Itoa(n))
		}
	}
	parentExtra(r, rc)
	strippedExtra(r, rc)
	if rc.decided {
		r.Mode = string(rc.dec.Mode)
		r.PolicyRev = rc.dec.Rev
		for _, x := range rc.dec.Reasons {
			r.Reasons = append(r.Reasons, audit.Reason{ID: x.ID, Msg: x.Msg})
		}
	}
	d := asDenial(rc.err)
	if d != nil && (!rc.decided || rc.dec.Permit()) {
		// The gateway's own denial (fronting, guard, caps): its reason is the record's.
		r.Reasons = append(r.Reasons, audit.Reason{ID: d.reason, Msg: d.msg})
	}
	if d != nil && d.flag != "" {
		r.Flags = append(r.Flags, d.flag)
	}
	if d != nil && rc.decided && rc.dec.Allowed && r.Mode == string(policy.ModeReport) {
		// Policy allowed it; the gateway's own refusal is enforced in every
		// mode. The record must not read as report mode's would-deny
		// (audit.WouldDeny: let through).
		r.Mode = string(policy.ModeEnforce)
	}
	if rc.err != nil {
		if _, isDenial := rc.err.(*denial); !isDenial {
			r.Error = rc.err.Error()
		}
	}
	if rc.dec.Err != nil {
		r.Error = rc.dec.Err.Error()
	}
	if rc.req != nil {
		r.Method = rc.req.Method
		r.Path = clip(rc.req.URL.Path, maxRecordPathBytes)
		if q := rc.req.URL.RawQuery; q != "" {
			r.Query = queryKeys(q)
		}
	}
	r.Status = rc.status
	r.Findings = auditFindings(rc)
	if pathHasFinding(r.Findings) {
		r.Path = redactedPath
	}
	if rc.up != nil {
		// Only a request that had a verified upstream connection carried the secret.
		r.Secrets = rc.applied.Audit()
	}
	if !rc.tunnel {
		r.BytesUp, r.BytesDown = rc.bytesUp, rc.bytesDown
		r.DurationMS = float64(time.Since(rc.start).Microseconds()) / 1000
	}
	boundText(r)
	return r
}

// parentExtra names the parent proxy a connection went through (host:port,
// never its credential) and, when it refused, its status.
func parentExtra(r *audit.Record, rc *reqCtx) {
	if rc.parent == "" {
		return
	}
	extra(r, "parent_proxy", rc.parent)
	var pe *parentError
	if errors.As(rc.err, &pe) {
		r.Extra["parent_status"] = json.RawMessage(strconv.Itoa(pe.status))
	}
}

// extra sets one string field of the record's Extra.
func extra(r *audit.Record, key, val string) {
	if r.Extra == nil {
		r.Extra = map[string]json.RawMessage{}
	}
	r.Extra[key] = json.RawMessage(strconv.Quote(val))
}

// boundText cuts the record's free-text fields: messages and errors can
// quote what the sandbox sent (a request line, a target, a header).
func boundText(r *audit.Record) {
	r.Method = clip(r.Method, maxRecordTextBytes)
	r.Error = clip(r.Error, maxRecordTextBytes)
	for i := range r.Reasons {
		r.Reasons[i].ID = clip(r.Reasons[i].ID, maxRecordTextBytes)
		r.Reasons[i].Msg = clip(r.Reasons[i].Msg, maxRecordTextBytes)
	}
}
