package airlock.defaults_test

import data.airlock

http(method, host, path) := {
	"kind": "http",
	"sandbox": {"id": "sb-1"},
	"destination": {"host": host, "port": 443},
	"http": {"method": method, "scheme": "https", "path": path},
}

req(kind, host) := {"kind": kind, "sandbox": {"id": "sb-1"}, "destination": {"host": host, "port": 443}}

allowed(x) if airlock.decision.allowed with input as x

test_registry_read_methods if {
	allowed(http("GET", "pypi.org", "/simple/requests/"))
	allowed(http("HEAD", "files.pythonhosted.org", "/packages/x.whl"))
	allowed(http("OPTIONS", "registry.npmjs.org", "/"))
}

test_registry_writes_denied if {
	not allowed(http("POST", "pypi.org", "/legacy/"))
	not allowed(http("PUT", "registry.npmjs.org", "/my-package"))
	not allowed(http("DELETE", "crates.io", "/api/v1/crates/x"))
	d := airlock.decision with input as http("PUT", "registry.npmjs.org", "/pkg")
	d.reasons == [{"id": "default_deny", "msg": "no rule allows PUT to registry.npmjs.org"}]
}

get_query(host, path, q) := object.union(http("GET", host, path), {"http": {"query": q}})

test_git_push_discovery_denied if {
	allowed(get_query("github.com", "/o/r.git/info/refs", {"service": ["git-upload-pack"]}))
	not allowed(get_query("github.com", "/o/r.git/info/refs", {"service": ["git-receive-pack"]}))
}

test_git_fetch_allowed_push_denied if {
	allowed(http("GET", "github.com", "/o/r.git/info/refs"))
	allowed(http("POST", "github.com", "/o/r.git/git-upload-pack"))
	not allowed(http("POST", "github.com", "/o/r.git/git-receive-pack"))
}

test_registry_names_allowed_for_connect_tls_dns if {
	allowed(req("connect", "proxy.golang.org"))
	allowed(req("tls", "sum.golang.org"))
	allowed(req("dns", "index.crates.io"))
}

test_registry_tcp_denied if {
	not allowed(req("tcp", "pypi.org"))
	not allowed(req("tcp", "203.0.113.7"))
}

test_unknown_host_denied if {
	not allowed(http("GET", "evil.example", "/"))
	not allowed(req("connect", "evil.example"))
	not allowed(req("dns", "pypi.org.evil.example"))
	not allowed(req("dns", "evilpypi.org"))
}

test_registry_connect_is_intercepted if {
	d := airlock.decision with input as req("connect", "pypi.org")
	d.mitm
	not airlock.decision.mitm with input as req("dns", "pypi.org")
}

test_allow_hosts_every_kind if {
	h := {"registry": {}, "allow": {"api.example.com": true, "**.corp.example": true, "203.0.113.7": true}}
	airlock.decision.allowed with input as http("DELETE", "api.example.com", "/x") with data.airlock.hosts as h
	airlock.decision.allowed with input as req("tcp", "203.0.113.7") with data.airlock.hosts as h
	airlock.decision.allowed with input as req("connect", "a.b.corp.example") with data.airlock.hosts as h
	not airlock.decision.mitm with input as req("connect", "a.b.corp.example") with data.airlock.hosts as h
	not airlock.decision.allowed with input as req("connect", "corp.example") with data.airlock.hosts as h
}

test_no_presets_denies_registries if {
	not airlock.decision.allowed with input as http("GET", "pypi.org", "/") with data.airlock.hosts as {"registry": {}, "allow": {}}
}
