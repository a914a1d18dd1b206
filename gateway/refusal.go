package gateway

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/airlock-dev/airlock/policy"
)

// maxShownPath bounds the path a refusal quotes back.
const maxShownPath = 200

// refusalText is what a refusal says to the agent that made the request and
// to the person reading its output: the reason phrase of the status line
// (which clients print: "Tunnel connection failed: 403 airlock denied
// evil.example:443 (default_deny)") and a body naming what was refused, the
// reason id and the rule's message, how to allow it when policy refused it,
// and the decision id to find the audit record by.
func refusalText(rc *reqCtx, status int, reason string) (phrase, body string) {
	target := targetOf(rc)
	var d *denial
	isDenial := errors.As(rc.err, &d)
	var b strings.Builder
	switch {
	case isDenial && !gatewayReason(reason):
		phrase = "airlock denied " + target + " (" + reason + ")"
		b.WriteString("airlock: policy denies " + requestOf(rc, target) + " (" + reason)
		if d.msg != "" {
			b.WriteString(": " + d.msg)
		}
		b.WriteString(").\nTo allow it: add " + allowEntry(rc) + " to the sandbox's allow list (airlock run --allow, or the API's allow), or write a policy rule for it; `airlock policy suggest` writes one from the audit log.\n")
	case isDenial && reason == ReasonForbiddenAddress:
		phrase = "airlock refused " + target + " (" + reason + ")"
		b.WriteString("airlock: " + target + " resolves only to addresses airlock never connects to (private, loopback, link-local, metadata, or airlock's own resolvers and listeners). An internal range is let through by upstream.allow_cidrs in the daemon's config.\n")
	case isDenial && reason == ReasonHostMismatch:
		phrase = "airlock refused " + target + " (" + reason + ")"
		b.WriteString("airlock: the request names another host than the connection it came on (" + d.msg + "): one connection, one destination.\n")
	case isDenial:
		phrase = "airlock refused " + target + " (" + reason + ")"
		b.WriteString("airlock: refused " + requestOf(rc, target) + ": " + reason)
		if d.msg != "" {
			b.WriteString(": " + d.msg)
		}
		b.WriteString(".\n")
	default:
		phrase = "airlock could not reach " + target + " (" + reason + ")"
		b.WriteString("airlock: the policy allowed " + requestOf(rc, target) + ", but it could not be completed: " + reason)
		if f := (*failure)(nil); errors.As(rc.err, &f) && f.note != "" {
			b.WriteString(": " + f.note)
		}
		b.WriteString(".\n")
	}
	b.WriteString("decision " + rc.id + ": " + reason + " (" + strconv.Itoa(status) + " " + http.StatusText(status) + ")\n")
	return phrasable(phrase), b.String()
}

// gatewayReason reports whether reason is one the gateway gives itself
// rather than a policy rule's.
func gatewayReason(reason string) bool {
	switch reason {
	case ReasonHostMismatch, ReasonBadRequest, ReasonBadDestination, ReasonForbiddenAddress,
		ReasonMITMUnavailable, ReasonConnLimit, ReasonTunnelLimit, ReasonAuditUnavailable,
		ReasonInjectFailed, ReasonOriginalDst, ReasonShuttingDown, ReasonTooManyParams,
		ReasonBodyScanTimeout, ReasonStreamLimit, ReasonPolicyChanged, policy.ReasonPolicyError:
		return true
	}
	return strings.HasPrefix(reason, "secret_")
}

// targetOf is the destination as host:port, or "the destination" before
// one is known.
func targetOf(rc *reqCtx) string {
	dst := rc.in.Destination
	if dst.Host == "" {
		return "the destination"
	}
	host := dst.Host
	if strings.IndexByte(host, ':') >= 0 {
		host = "[" + host + "]"
	}
	if dst.Port == 0 {
		return host
	}
	return host + ":" + strconv.Itoa(dst.Port)
}

// requestOf is the refused request as a person would name it: the method
// and path of an HTTP request (never its query), else the destination.
func requestOf(rc *reqCtx, target string) string {
	h := rc.in.HTTP
	if h == nil || h.Method == "" {
		return target
	}
	path := h.Path
	if len(path) > maxShownPath {
		path = path[:maxShownPath] + "..."
	}
	return h.Method + " " + target + path
}

// allowEntry is the --allow entry that would allow the destination.
func allowEntry(rc *reqCtx) string {
	dst := rc.in.Destination
	if dst.Host == "" {
		return "the host"
	}
	if dst.Port == 443 || dst.Port == 80 || dst.Port == 0 {
		return dst.Host
	}
	return dst.Host + ":" + strconv.Itoa(dst.Port)
}

// phrasable keeps what a status line's reason phrase may hold: printable
// ASCII, at most 120 bytes.
func phrasable(s string) string {
	b := []byte(s)
	out := b[:0]
	for _, c := range b {
		if c >= 0x20 && c < 0x7f {
			out = append(out, c)
		}
	}
	if len(out) > 120 {
		out = append(out[:117], "..."...)
	}
	return string(out)
}

// refuse is the one place that answers a refusal to the client: 403 (or the
// policy's status, or 502/504 for a failure) with a reason phrase and a body
// that explain it (refusalText: what, why, how to allow it, the decision id),
// and headers X-Airlock-Decision and X-Airlock-Reason. Where no HTTP answer is
// possible (TLS passthrough, raw TCP, a response already begun) it closes.
func (g *Gateway) refuse(rc *reqCtx) {
	status, reason := refusalOf(rc.err)
	if rc.sess != nil && rc.sess.h2 != nil {
		// One stream of an HTTP/2 connection: the others go on.
		_, body := refusalText(rc, status, reason)
		rc.sess.h2.refuse(rc, status, reason, body)
		return
	}
	if rc.socks {
		if !rc.responded {
			rc.status = status
			writeSOCKSReply(rc.sess.bw, socksReplyOf(rc.err))
			rc.responded = true
		}
		rc.cc.nc.Close()
		return
	}
	if rc.responded || rc.sess == nil {
		rc.cc.nc.Close()
		return
	}
	rc.status = status
	phrase, body := refusalText(rc, status, reason)
	bw := rc.sess.bw
	bw.WriteString("HTTP/1.1 " + strconv.Itoa(status) + " " + phrase + "\r\n")
	bw.WriteString("Content-Type: text/plain; charset=utf-8\r\nX-Airlock-Decision: " + rc.id + "\r\n")
	bw.WriteString("X-Airlock-Reason: " + reason + "\r\n")
	bw.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n")
	if rc.req == nil || rc.req.Method != http.MethodHead {
		bw.WriteString(body)
	}
	bw.Flush()
	rc.responded = true
}
