package gateway

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/policy"
)

// decide asks policy. It fails closed: a policy error is never permitted.
func (g *Gateway) decide(rc *reqCtx) error {
	if until := g.auditBlockedUntil.Load(); until != 0 && time.Now().UnixNano() < until {
		return deny(ReasonAuditUnavailable, "audit log is not accepting records")
	}
	// A plain request's record is written after its exchange; ask the log first,
	// so a broken log lets no request out at all (not one per blocked second).
	if h, ok := g.log.(audit.Health); ok {
		if err := h.Err(); err != nil {
			g.auditFailed(err)
			return deny(ReasonAuditUnavailable, "audit log is not accepting records")
		}
	}
	g.buildInput(rc)
	d := g.ask(rc)
	rc.dec, rc.decided = d, true
	if err := denialOf(d); err != nil {
		return err
	}
	defer func() { rc.adm = rc.admit(admitted{opening: rc.in, mitm: rc.mitm}) }()
	if rc.kind == policy.KindConnect || rc.kind == policy.KindTLS {
		rc.mitm = g.intercepts(rc, &rc.in, d)
		if rc.mitm && g.leaves == nil {
			return deny(ReasonMITMUnavailable, "interception of %s requested but no CA is configured", rc.host)
		}
	}
	return nil
}

// intercepts reports whether an allowed CONNECT or TLS connection (opening
// input in, decision d) is intercepted: policy asks for it (mitm), a secret
// bound to the destination needs it, or report mode learns what it carries
// (reportIntercepts). Passthrough wins over all of them, placeholders
// included (policy.Decision.Passthrough).
func (g *Gateway) intercepts(rc *reqCtx, in *policy.Input, d policy.Decision) bool {
	switch {
	case d.Passthrough:
		return false
	case d.MITM:
		return true
	case g.cfg.Injector != nil && g.cfg.Injector.NeedsMITM(sandboxOf(rc), in.Destination.Host, in.Destination.Port):
		return true
	}
	return g.reportIntercepts(in, d)
}

// reportIntercepts: in report mode, a TLS connection (kind tls, or a CONNECT
// to port 443) that policy would refuse, and lets through only because it is
// reported, is intercepted, so that its records carry each request's method
// and path (what policy suggest learns HTTP rules from, and replay checks
// method and path rules against). Only where the gateway has a CA and the
// sandbox trusts it: sandboxes of airlock run and the daemon always do; an
// attached pod (input.sandbox.pod) may not, and stays tunnelled.
func (g *Gateway) reportIntercepts(in *policy.Input, d policy.Decision) bool {
	return g.leaves != nil && d.Mode == policy.ModeReport && !d.Allowed && d.Err == nil &&
		in.Sandbox.Pod == nil && (in.Kind == policy.KindTLS || in.Destination.Port == 443)
}

// ask runs one policy decision on rc.in, bounded by PolicyTimeout.
func (g *Gateway) ask(rc *reqCtx) policy.Decision {
	t0 := time.Now()
	ctx := rc.decisionCtx(g.cfg.PolicyTimeout) // no timer unless the decider waits on it
	d := g.dec.Decide(ctx, &rc.in)
	ctx.stop()
	dur := time.Since(t0)
	rc.policyDur += dur
	g.metrics.policyEval.Observe(dur.Seconds())
	return g.approve(rc, d) // a question the policy asks waits for its answer (approval.go)
}

// denialOf is the denial a decision that does not permit stands for (nil when
// it permits): its first reason, or policy_error, with the policy's status.
func denialOf(d policy.Decision) error {
	if d.Permit() {
		return nil
	}
	reason, msg := policy.ReasonPolicyError, "policy error"
	if d.Err == nil {
		reason, msg = "denied", "denied by policy"
		if len(d.Reasons) > 0 {
			reason, msg = d.Reasons[0].ID, d.Reasons[0].Msg
		}
	}
	status := http.StatusForbidden
	if d.HTTPStatus >= 400 && d.HTTPStatus <= 599 {
		status = d.HTTPStatus
	}
	return &denial{reason: reason, msg: msg, status: status}
}

// decideCarried decides what an allowed CONNECT turned out to carry, a second
// time and for the same destination: kind tcp for opaque bytes (or none, a
// server-first protocol), kind tls with an empty sni for a ClientHello without
// a server name. A CONNECT allows a destination, not every protocol to it. The
// second decision is the one the tunnel's record carries.
func (g *Gateway) decideCarried(rc *reqCtx, kind policy.Kind) error {
	in := &rc.in
	in.Kind, in.HTTP, in.TLS, in.Destination.Protocol = kind, nil, nil, ""
	switch kind {
	case policy.KindTCP:
		in.Destination.Protocol = "tcp"
	case policy.KindTLS:
		in.TLS = &policy.TLS{}
	}
	first := rc.dec
	rc.dec = g.ask(rc)
	rc.carriedDecided = true
	if rc.adm != nil {
		carried := *in
		rc.adm.carried = &carried
	}
	if !first.Allowed && first.Err == nil && rc.dec.Err == nil && rc.dec.Mode == policy.ModeReport {
		// Report mode let the CONNECT through although enforce would have
		// refused it: the record keeps that, whatever the second decision.
		rc.dec.Allowed = false
		rc.dec.Reasons = append(slices.Clip(first.Reasons), rc.dec.Reasons...)
	}
	return denialOf(rc.dec)
}

// buildInput fills rc.in from the normalized request.
func (g *Gateway) buildInput(rc *reqCtx) {
	in := &rc.in
	in.Kind = rc.kind
	in.Sandbox = rc.cc.sb.current()
	in.Destination = policy.Destination{Host: rc.host, Port: rc.port}
	if rc.sess != nil {
		in.Destination.Suffixes = rc.sess.suffixes(rc.host)
	} else {
		in.Destination.Suffixes = hostname.Suffixes(rc.host)
	}
	if rc.ip.IsValid() {
		in.Destination.IP = rc.ip.String()
	}
	if rc.kind == policy.KindTCP {
		in.Destination.Protocol = "tcp"
	}
	if rc.kind == policy.KindTLS {
		in.TLS = &policy.TLS{SNI: rc.host}
		if rc.sni == "" {
			in.TLS.SNI = ""
		}
	}
	if rc.kind == policy.KindHTTP {
		r := rc.req
		h := &rc.inHTTP // held by rc: no allocation of its own
		*h = policy.HTTP{Method: r.Method, Scheme: rc.scheme, Path: r.URL.Path}
		if h.Path == "" {
			h.Path = "/"
		}
		if r.URL.RawQuery != "" {
			h.Query = r.URL.Query()
		}
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			h.BodySize = max(r.ContentLength, -1) // -1: chunked, length unknown
		}
		if len(r.Header) > 0 {
			h.Headers = make(map[string]string, len(r.Header))
			for k, v := range r.Header {
				h.Headers[lowerHeader(k)] = strings.Join(v, ", ")
			}
		}
		in.HTTP = h
		contentInput(in, rc, rc.body != nil)
		if rc.sess.intercepted {
			in.TLS = &policy.TLS{SNI: rc.sess.sni, Intercepted: true}
		}
	}
}

// lowerHeader lowercases a canonical header name without allocating for the
// common names.
func lowerHeader(k string) string {
	switch k {
	case "Accept":
		return "accept"
	case "User-Agent":
		return "user-agent"
	case "Accept-Encoding":
		return "accept-encoding"
	case "Content-Type":
		return "content-type"
	case "Content-Length":
		return "content-length"
	case "Authorization":
		return "authorization"
	case "Connection":
		return "connection"
	}
	return strings.ToLower(k)
}
