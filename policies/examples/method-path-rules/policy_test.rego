package airlock.egress_test

import data.airlock

call(method, path, ctype) := {
	"kind": "http",
	"sandbox": {"id": "sb-1"},
	"destination": {"host": "api.corp.example", "port": 443},
	"http": {"method": method, "scheme": "https", "path": path, "headers": {"content-type": ctype}},
}

allowed(x) if airlock.decision.allowed with input as x

test_reads_under_v1 if {
	allowed(call("GET", "/v1/jobs/42", ""))
	allowed(call("HEAD", "/v1/", ""))
	not allowed(call("GET", "/admin", ""))
	not allowed(call("GET", "/v2/jobs", ""))
}

test_writes_only_to_listed_paths_with_json if {
	allowed(call("POST", "/v1/jobs", "application/json"))
	allowed(call("POST", "/v1/search", "application/json; charset=utf-8"))
	not allowed(call("POST", "/v1/jobs", "text/plain"))
	not allowed(call("POST", "/v1/users", "application/json"))
	not allowed(call("PUT", "/v1/jobs", "application/json"))
}

test_delete_denied_with_405 if {
	d := airlock.decision with input as call("DELETE", "/v1/jobs/42", "")
	not d.allowed
	d.http_status == 405
	d.reasons == [{"id": "api_no_delete", "msg": "DELETE is not allowed on the internal API"}]
}

test_other_denials_keep_403 if {
	d := airlock.decision with input as call("PATCH", "/v1/jobs", "")
	d.http_status == 403
}

test_connect_intercepted if {
	d := airlock.decision with input as {"kind": "connect", "sandbox": {"id": "sb-1"}, "destination": {"host": "api.corp.example", "port": 443}}
	d.allowed
	d.mitm
}

test_connect_other_port_denied if {
	not allowed({"kind": "connect", "sandbox": {"id": "sb-1"}, "destination": {"host": "api.corp.example", "port": 8443}})
	allowed({"kind": "dns", "sandbox": {"id": "sb-1"}, "destination": {"host": "api.corp.example", "port": 53}, "dns": {"qname": "api.corp.example", "qtype": "A"}})
}
