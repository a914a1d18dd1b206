# Content rules (always loaded; embedded in the binary): what content
# inspection found in a request (input.content.findings, written by the
# gateway and the DNS filter) becomes deny entries of package airlock.egress,
# so they hold under every policy, one that allows every destination
# included: a deny always wins over every allow.
#
# Denied by default, to every destination:
#   - a credential finding of high confidence (a known credential format:
#     cloud keys, VCS and CI tokens, private keys, ...), reason
#     content_credential;
#   - every canary (a decoy credential airlock planted in the sandbox, bound
#     to no host: certain exfiltration), reason content_canary.
# A secret airlock itself injects for its bound host is never a finding: it is
# put into the request after inspection, on the verified connection to that
# host only.
# Everything else (encoded, entropy, injection, malformed, oversize, lower
# confidence) is recorded on the audit record and left to the policy.
#
# A policy turns a detector off by name, in package airlock.content:
#
#   disabled := {"generic-api-key", "canary"}
#
# (a set or an array of detector names: gitleaks rule ids or inspect's own
# names). The daemon's config inspect.disable turns a detector off before it
# runs at all. A policy adds its own rules over input.content.findings in
# package airlock.egress as usual, for example "flag, do not block, on this
# host" is an allow_reasons entry, and "block oversize bodies" a deny.
#
# Responses. When what comes back to the agent has findings, the gateway asks
# policy again with the request's input, input.content.findings now holding
# the response's too: class "injection" (detectors prompt-injection,
# hidden-text, tool-description) where "response.body", "response.hidden",
# "response.tool_description", "response.agent_card", or "sse.event" for an
# event of an SSE stream; input.content.partial is true while a stream goes
# on. A body of up to 1 MiB is decided whole (gzip or deflate decoded), an
# SSE stream event by event, any longer body piece by piece as it arrives
# (a longer compressed one is not read). The answer, per host:
#
#   flag    an allow (the default: nothing here denies a response finding):
#           the response passes, the record carries the findings;
#   strip   an allow with a strip rule in package airlock.egress: hidden text
#           (zero-width and tag characters, bidi controls, HTML comments and
#           hidden elements) and the medium and high confidence injected
#           instructions are removed (Content-Length fixed, ETag and
#           Content-MD5 dropped; an SSE event rewritten); the record's extra
#           "response_stripped" lists [{detector, offset, length}], never
#           the text;
#   block   a deny: a whole body is refused before a byte reaches the agent;
#           an SSE stream ends before the event, with a final "error" event
#           naming the reason and decision id; a longer body is cut there
#           (the client sees it truncated).
#
#   strip if {
#   	input.destination.host == "docs.corp.example"
#   	some f in input.content.findings
#   	f.class == "injection"
#   }
#
#   deny contains {"id": "response_injection", "msg": "instructions injected into a response"} if {
#   	input.destination.host == "mcp.corp.example"
#   	some f in input.content.findings
#   	f.class == "injection"
#   	f.confidence != "low"
#   }
#
# (policies/examples/response-content). A deny wins over strip.
package airlock.egress



# content_disabled holds the detectors a policy turned off.
content_disabled contains d if some d in data.airlock.content.disabled

_content_blocking(f) if {
	f.class == "credential"
	f.confidence == "high"
}

_content_blocking(f) if f.class == "canary"

_content_reason(f) := "content_canary" if f.class == "canary"

_content_reason(f) := "content_credential" if f.class == "credential"

_content_how(f) := "" if {
	object.get(f, "encoding", "") == ""
} else := sprintf(", encoded %s", [f.encoding])

_content_split(f) := ", split across pieces" if {
	object.get(f, "split", false) == true
} else := ""

deny contains {
	"id": _content_reason(f),
	"msg": sprintf("%s found in %s%s%s (fingerprint %s)", [
		f.detector, f.where, _content_how(f), _content_split(f),
		object.get(f, "fingerprint", ""),
	]),
} if {
	some f in input.content.findings
	_content_blocking(f)
	not content_disabled[f.detector]
}
