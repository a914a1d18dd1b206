package airlock.egress_test

import data.airlock

resp(host, fs) := {
	"kind": "http",
	"sandbox": {"id": "sb-1"},
	"destination": {"host": host, "port": 443},
	"http": {"method": "POST", "scheme": "https", "path": "/mcp"},
	"content": {"findings": fs},
}

injection(where, confidence) := {"detector": "prompt-injection", "class": "injection", "where": where, "confidence": confidence}

test_docs_stripped if {
	d := airlock.decision with input as resp("docs.corp.example", [injection("response.body", "high")])
	d.allowed
	d.strip == true
}

test_mcp_event_blocked if {
	d := airlock.decision with input as resp("mcp.corp.example", [injection("sse.event", "medium")])
	not d.allowed
	d.reasons[0].id == "response_injection"
	not d.strip
}

test_mcp_low_confidence_flagged_only if {
	d := airlock.decision with input as resp("mcp.corp.example", [injection("response.body", "low")])
	d.allowed
	not d.strip
}

test_no_findings_neither_stripped_nor_blocked if {
	d := airlock.decision with input as resp("docs.corp.example", [])
	d.allowed
	not d.strip
}

test_a_credential_in_the_request_still_denied if {
	f := {"detector": "aws-access-token", "class": "credential", "where": "body", "confidence": "high"}
	d := airlock.decision with input as resp("docs.corp.example", [f])
	not d.allowed
	d.reasons[0].id == "content_credential"
	not d.strip
}
