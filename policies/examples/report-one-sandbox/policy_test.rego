package airlock.egress_test

import data.airlock

get(sandbox, host) := {
	"kind": "http",
	"sandbox": sandbox,
	"destination": {"host": host, "port": 443},
	"http": {"method": "GET", "scheme": "https", "path": "/"},
}

test_trial_sandbox_reports if {
	d := airlock.decision with input as get({"id": "sb-trial"}, "evil.example")
	not d.allowed
	d.mode == "report"
}

test_label_reports if {
	d := airlock.decision with input as get({"id": "sb-9", "labels": {"airlock.mode": "report"}}, "evil.example")
	d.mode == "report"
}

test_label_enforces if {
	d := airlock.decision with input as get({"id": "sb-9", "labels": {"airlock.mode": "enforce"}}, "evil.example")
	d.mode == "enforce"
}

test_other_sandboxes_use_global_mode if {
	d := airlock.decision with input as get({"id": "sb-1"}, "evil.example")
	not d.allowed
	not "mode" in object.keys(d)
}

test_report_does_not_change_allowed if {
	d := airlock.decision with input as get({"id": "sb-trial"}, "pypi.org")
	d.allowed
	d.mode == "report"
}
