package airlock.egress_test

import data.airlock

req(host, method, path) := {
	"kind": "http",
	"sandbox": {"id": "sb-1"},
	"destination": {"host": host, "port": 443},
	"http": {"method": method, "scheme": "https", "path": path},
}

conn(kind, host, port) := {"kind": kind, "sandbox": {"id": "sb-1"}, "destination": {"host": host, "port": port}}

# airlock-policy.yaml says presets: [none], so these tests see exactly what
# run and serve load: no preset registry adds reads of api.github.com.
decide(x) := d if {
	d := airlock.decision with input as x
}

test_allowed_calls if {
	decide(req("api.github.com", "GET", "/repos/acme/widget/pulls")).allowed
	decide(req("api.openai.com", "POST", "/v1/chat/completions")).allowed
}

test_everything_else_refused if {
	not decide(req("api.github.com", "DELETE", "/repos/acme/widget")).allowed
	not decide(req("api.github.com", "GET", "/repos/other/widget")).allowed
	not decide(req("api.github.com", "GET", "/repos/acmeevil/widget")).allowed
	not decide(req("api.github.com", "GET", "/repos/acme")).allowed
	not decide(req("api.openai.com", "POST", "/v1/embeddings")).allowed
	not decide(req("api.openai.com", "GET", "/v1/chat/completions")).allowed
	not decide(req("example.com", "GET", "/repos/acme/x")).allowed
}

test_paths_cannot_walk_out if {
	not decide(req("api.github.com", "GET", "/repos/acme/../other/x")).allowed
	not decide(req("api.github.com", "GET", "/repos/acme/%2e%2e/other/x")).allowed
	not decide(req("api.github.com", "GET", "/repos/acme/x%2F..%2F..%2Fother")).allowed
	not decide(req("api.github.com", "GET", "/repos/acme//x")).allowed
	not decide(req("api.github.com", "GET", "/repos/acme/x\\..\\other")).allowed
}

# The table derives the tunnel, the TLS allow and interception: without mitm
# the method and path rules would never run.
test_connect_and_tls_allowed_and_intercepted if {
	every k in ["connect", "tls"] {
		d := decide(conn(k, "api.github.com", 443))
		d.allowed
		d.mitm
	}
	decide(conn("connect", "api.openai.com", 443)).mitm
	not decide(conn("connect", "api.github.com", 8443)).allowed
	not decide(conn("connect", "example.com", 443)).allowed
}

test_dns_derived if {
	decide(conn("dns", "api.github.com", 0)).allowed
	decide(conn("dns", "api.openai.com", 0)).allowed
	not decide(conn("dns", "example.com", 0)).allowed
}
