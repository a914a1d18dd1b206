# What content inspection found in a response decides it, per host. The
# gateway asks policy again when a response (a body of up to 1 MiB whole, an
# SSE stream event by event, a longer body piece by piece) has findings:
# input is the request's, with input.content.findings holding the response's
# too (class "injection", where "response.body", "response.hidden",
# "response.tool_description", "response.agent_card" or "sse.event").
#
# The answer: an allow lets it through and flags it on the audit record (the
# default); an allow with strip removes the hidden text and the injected
# instructions the detectors flag, and the record lists what was removed by
# detector and offset; a deny blocks it (a whole body is refused, a stream
# is cut before the piece or event, SSE with a final error event).
#
# Here: the docs site's responses are stripped, the MCP server's blocked.
package airlock.egress

hosts := {"docs.corp.example", "mcp.corp.example"}

allow if input.destination.host in hosts

mitm if input.destination.host in hosts

response_finding(f) if startswith(f.where, "response.")

response_finding(f) if f.where == "sse.event"

strip if {
	input.destination.host == "docs.corp.example"
	some f in input.content.findings
	f.class == "injection"
	response_finding(f)
}

deny contains {"id": "response_injection", "msg": sprintf("instructions injected into a response (%s, %s)", [f.detector, f.where])} if {
	input.destination.host == "mcp.corp.example"
	some f in input.content.findings
	f.class == "injection"
	f.confidence != "low"
	response_finding(f)
}
