package airlock_content_test

import data.airlock

finding(class, confidence) := {
	"detector": "aws-access-token", "class": class, "where": "url.query",
	"confidence": confidence, "fingerprint": "0123456789abcdef",
}

req_with(fs) := {
	"kind": "http",
	"sandbox": {"id": "sb-1"},
	"destination": {"host": "api.example", "port": 443},
	"http": {"method": "GET", "scheme": "https", "path": "/"},
	"content": {"findings": fs},
}

allow_all := {"api.example": true}

test_high_credential_denied_to_an_allowed_host if {
	d := airlock.decision with input as req_with([finding("credential", "high")])
		with data.airlock.hosts.allow as allow_all
	not d.allowed
	d.reasons[0].id == "content_credential"
}

test_canary_denied_whatever_its_confidence if {
	f := object.union(finding("canary", "low"), {"detector": "canary", "encoding": "base64", "split": true})
	d := airlock.decision with input as req_with([f])
		with data.airlock.hosts.allow as allow_all
	not d.allowed
	d.reasons[0].id == "content_canary"
	contains(d.reasons[0].msg, "encoded base64")
}

test_medium_credential_recorded_not_denied if {
	d := airlock.decision with input as req_with([finding("credential", "medium")])
		with data.airlock.hosts.allow as allow_all
	d.allowed
}

test_entropy_and_injection_not_denied if {
	d := airlock.decision with input as req_with([finding("entropy", "high"), finding("injection", "high"), finding("oversize", "high")])
		with data.airlock.hosts.allow as allow_all
	d.allowed
}

test_no_findings_allowed if {
	d := airlock.decision with input as req_with([]) with data.airlock.hosts.allow as allow_all
	d.allowed
}

test_disabled_by_name if {
	d := airlock.decision with input as req_with([finding("credential", "high")])
		with data.airlock.hosts.allow as allow_all
		with data.airlock.content.disabled as {"aws-access-token"}
	d.allowed
}

test_disabled_other_detector_still_denies if {
	d := airlock.decision with input as req_with([finding("credential", "high")])
		with data.airlock.hosts.allow as allow_all
		with data.airlock.content.disabled as ["github-pat"]
	not d.allowed
}

test_never_a_deny_without_content if {
	d := airlock.decision with input as {"kind": "http", "sandbox": {"id": "sb-1"}, "destination": {"host": "api.example", "port": 443}, "http": {"method": "GET", "scheme": "https", "path": "/"}}
		with data.airlock.hosts.allow as allow_all
	d.allowed
}

test_response_injection_flagged_not_stripped_by_default if {
	f := {"detector": "prompt-injection", "class": "injection", "where": "sse.event", "confidence": "high"}
	d := airlock.decision with input as req_with([f])
		with data.airlock.hosts.allow as allow_all
	d.allowed
	not d.strip
}
