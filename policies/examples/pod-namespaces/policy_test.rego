package airlock.egress_test

import data.airlock

req(pod, method, host) := {
	"kind": "http",
	"sandbox": {"id": "alk-pod-1", "pod": pod},
	"destination": {"host": host, "port": 443},
	"http": {"method": method, "scheme": "https", "path": "/"},
}

allowed(x) if airlock.decision.allowed with input as x

test_namespace_reaches_its_hosts if {
	allowed(req({"namespace": "ci", "name": "build-1"}, "GET", "ghcr.io"))
	allowed(req({"namespace": "ci"}, "POST", "objects.githubusercontent.com"))
	allowed(req({"namespace": "sandbox"}, "GET", "api.openai.com"))
}

test_namespaces_do_not_share if {
	not allowed(req({"namespace": "sandbox"}, "GET", "ghcr.io"))
	not allowed(req({"namespace": "ci"}, "GET", "api.openai.com"))
	not allowed(req({"namespace": "other"}, "GET", "ghcr.io"))
}

test_sandbox_namespace_reads_only if {
	not allowed(req({"namespace": "sandbox"}, "POST", "api.openai.com"))
	d := airlock.decision with input as req({"namespace": "sandbox"}, "POST", "api.openai.com")
	some r in d.reasons
	r.id == "sandbox_namespace_read_only"
}

test_not_a_pod_gets_defaults_only if {
	base := {
		"kind": "http",
		"sandbox": {"id": "sb-2"},
		"destination": {"host": "ghcr.io", "port": 443},
		"http": {"method": "GET", "scheme": "https", "path": "/"},
	}
	not allowed(base)
	allowed(object.union(base, {"destination": {"host": "pypi.org", "port": 443}}))
}
