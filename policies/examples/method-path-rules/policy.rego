# Method and path rules for an internal API: reads anywhere under /v1/, writes
# only to /v1/jobs and /v1/search, DELETE never (answered 405), and nothing
# outside /v1/. Requests must carry a JSON content type when they have a body.
package airlock.egress

api := "api.corp.example"

read_methods := {"GET", "HEAD"}

write_paths := {"/v1/jobs", "/v1/search"}

allow if {
	input.kind == "http"
	input.destination.host == api
	input.http.method in read_methods
	startswith(input.http.path, "/v1/")
}

allow if {
	input.kind == "http"
	input.destination.host == api
	input.http.method == "POST"
	input.http.path in write_paths
	startswith(input.http.headers["content-type"], "application/json")
}

# CONNECT and TLS on 443 only; a DNS question has no port.
allow if {
	input.kind in {"connect", "tls"}
	input.destination.host == api
	input.destination.port == 443
}

allow if {
	input.kind == "dns"
	input.destination.host == api
}

mitm if {
	input.kind in {"connect", "tls"}
	input.destination.host == api
}

deny contains {"id": "api_no_delete", "msg": "DELETE is not allowed on the internal API"} if {
	input.kind == "http"
	input.destination.host == api
	input.http.method == "DELETE"
}

http_status := 405 if {
	input.kind == "http"
	input.destination.host == api
	input.http.method == "DELETE"
}
