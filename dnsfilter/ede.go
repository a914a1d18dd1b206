package dnsfilter

import (
	"encoding/binary"
	"slices"
	"strings"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
)

// maxEDEText bounds the explanation so that a reply to a 253-byte name still
// fits a 512-byte UDP buffer with its question and OPT.
const maxEDEText = 200

// explanation is an RFC 8914 extended DNS error: what a person or an agent
// reading `dig`'s output needs to know about a refusal.
type explanation struct {
	code uint16
	text string
}

// explain says why a query was not answered as asked, or returns false for
// an answer that needs no explanation. It is sent only to a client that
// asked with EDNS (an EDE lives in the OPT record).
func (q *query) explain(decision string, reasons []audit.Reason) (explanation, bool) {
	name := q.name
	if name == "" {
		name = "the name"
	}
	var e explanation
	first := audit.Reason{}
	if len(reasons) > 0 {
		first = reasons[0]
	}
	switch {
	case decision == audit.DecisionAllow && slices.Contains(q.flags, FlagRebindingDropped):
		e = explanation{dns.ExtendedErrorCodeBlocked, "airlock: answers for " + name + " were dropped: they point at addresses airlock never connects to (private, loopback, metadata or airlock's own)"}
	case decision == audit.DecisionAllow:
		return e, false
	case first.ID == ReasonUpstream:
		e = explanation{dns.ExtendedErrorCodeNetworkError, "airlock: no upstream resolver answered for " + name}
	case first.ID == ReasonAuditUnavailable:
		e = explanation{dns.ExtendedErrorCodeOther, "airlock: the audit log is not accepting records, so nothing is resolved"}
	case decision == audit.DecisionError:
		e = explanation{dns.ExtendedErrorCodeOther, "airlock: the policy could not decide on " + name + ", so it is refused"}
	case first.ID == ReasonQTypeRefuse:
		e = explanation{dns.ExtendedErrorCodeProhibited, "airlock: " + qtypeString(q.qtype) + " queries for " + name + " are not allowed (a policy rule dns_qtype_optin allows them)"}
	case first.ID == ReasonIPLiteral:
		e = explanation{dns.ExtendedErrorCodeProhibited, "airlock: " + name + " is an IP address, not a name"}
	case first.ID == ReasonMalformed || first.ID == ReasonBadName:
		e = explanation{dns.ExtendedErrorCodeProhibited, "airlock: not a valid query: " + first.Msg}
	case first.ID == ReasonFlagBlocked:
		e = explanation{dns.ExtendedErrorCodeBlocked, "airlock: " + name + " refused: " + first.Msg + " (dns.block_flags)"}
	default:
		why := first.ID
		if first.Msg != "" {
			why += ": " + first.Msg
		}
		if why == "" {
			why = "no rule allows it"
		}
		e = explanation{dns.ExtendedErrorCodeBlocked, "airlock: policy denies " + name + " (" + why + "); to allow it: --allow " + name + " or a policy rule"}
	}
	e.text = clip(e.text, maxEDEText)
	return e, true
}

// clip shortens s to at most n bytes, dropping a rune cut in half, and
// marks the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-3], "") + "..."
}

// appendOPT appends the reply's OPT record: our buffer size, no flags, and
// the explanation as an EDE option when there is one.
func appendOPT(dst []byte, e *explanation) []byte {
	dst = append(dst, 0, 0, 41, byte(DefaultEDNSSize>>8), byte(DefaultEDNSSize&0xff), 0, 0, 0, 0)
	if e == nil {
		return append(dst, 0, 0)
	}
	optLen := 2 + len(e.text)
	dst = binary.BigEndian.AppendUint16(dst, uint16(4+optLen))
	dst = binary.BigEndian.AppendUint16(dst, dns.EDNS0EDE)
	dst = binary.BigEndian.AppendUint16(dst, uint16(optLen))
	dst = binary.BigEndian.AppendUint16(dst, e.code)
	return append(dst, e.text...)
}
