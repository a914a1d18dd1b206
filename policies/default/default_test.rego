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

at(kind, host, port) := {"kind": kind, "sandbox": {"id": "sb-1"}, "destination": {"host": host, "port": port}}

http_at(method, host, port, path) := {
	"kind": "http",
	"sandbox": {"id": "sb-1"},
	"destination": {"host": host, "port": port},
	"http": {"method": method, "scheme": "http", "path": path},
}

reason_ids(x) := ids if {
	d := airlock.decision with input as x
	ids := [r.id | some r in d.reasons]
}

test_registry_ports_443_and_80 if {
	every kind in {"connect", "tls"} {
		allowed(at(kind, "pypi.org", 443))
		allowed(at(kind, "pypi.org", 80))
	}
	allowed(http_at("GET", "pypi.org", 80, "/simple/"))
	allowed(http_at("GET", "pypi.org", 443, "/simple/"))
	allowed(at("dns", "pypi.org", 53))
}

test_registry_other_ports_denied if {
	every kind in {"connect", "tls", "tcp"} {
		every port in {4444, 22, 8443} {
			not allowed(at(kind, "pypi.org", port))
		}
	}
	not allowed(http_at("GET", "pypi.org", 4444, "/simple/"))
	d := airlock.decision with input as at("connect", "pypi.org", 4444)
	d.reasons == [{"id": "port_not_allowed", "msg": "pypi.org is reachable on port(s) 80, 443, not 4444"}]
	not d.mitm
}

test_registry_dns_ports_denied if {
	every kind in {"connect", "tls", "tcp"} {
		every port in {53, 853} {
			not allowed(at(kind, "pypi.org", port))
		}
	}
	reason_ids(at("connect", "pypi.org", 53)) == ["dns_port"]
	reason_ids(http_at("GET", "github.com", 853, "/")) == ["dns_port"]
}

test_preset_declared_port if {
	h := {"registry": {"git.example": {"ports": [443, 9418], "git": true}, "dns-ish.example": {"ports": [53]}}, "allow": {}}
	airlock.decision.allowed with input as at("connect", "git.example", 9418) with data.airlock.hosts as h
	airlock.decision.allowed with input as at("connect", "git.example", 443) with data.airlock.hosts as h
	not airlock.decision.allowed with input as at("connect", "git.example", 80) with data.airlock.hosts as h
	d := airlock.decision with input as at("connect", "git.example", 22) with data.airlock.hosts as h
	d.reasons == [{"id": "port_not_allowed", "msg": "git.example is reachable on port(s) 443, 9418, not 22"}]

	# On 443 and 80 the reason is not looked for (it would cost every deny).
	reason_ids(at("connect", "git.example", 80)) == ["default_deny"] with data.airlock.hosts as h

	# A registry entry can never open a DNS port (the engine refuses one, and
	# the library denies it anyway).
	reason_ids(at("connect", "dns-ish.example", 53)) == ["dns_port"] with data.airlock.hosts as h
}

test_allow_host_port if {
	h := {"registry": {}, "allow": {"api.example.com": {"ports": [8443]}, "db.example.com": {"ports": ["*"]}, "web.example.com": true}}
	airlock.decision.allowed with input as at("tcp", "api.example.com", 8443) with data.airlock.hosts as h
	not airlock.decision.allowed with input as at("tcp", "api.example.com", 443) with data.airlock.hosts as h
	reason_ids(at("tcp", "api.example.com", 4444)) == ["port_not_allowed"] with data.airlock.hosts as h
	airlock.decision.allowed with input as at("tcp", "db.example.com", 5432) with data.airlock.hosts as h
	reason_ids(at("tcp", "db.example.com", 853)) == ["dns_port"] with data.airlock.hosts as h
	airlock.decision.allowed with input as at("connect", "web.example.com", 443) with data.airlock.hosts as h
	not airlock.decision.allowed with input as at("connect", "web.example.com", 22) with data.airlock.hosts as h
	airlock.decision.allowed with input as at("dns", "api.example.com", 53) with data.airlock.hosts as h
}

# Raw TCP by name: the gateway decides a raw TCP connection to an
# address the DNS filter answered the sandbox with the name it resolved as
# destination.host (destination.ip is the address it connected to), so
# --allow HOST:PORT opens raw TCP to that name and port only.
tcp_named(host, ip, port) := {
	"kind": "tcp", "sandbox": {"id": "sb-1"},
	"destination": {"host": host, "port": port, "ip": ip, "protocol": "tcp"},
}

test_tcp_by_resolved_name if {
	h := {"registry": {"github.com": {"ports": [443, 80], "git": true}}, "allow": {"github.com": {"ports": [22]}, "db.corp.example": {"ports": [5432]}, "140.82.112.9": {"ports": [22]}}}
	airlock.decision.allowed with input as tcp_named("github.com", "140.82.112.3", 22) with data.airlock.hosts as h
	airlock.decision.allowed with input as tcp_named("db.corp.example", "198.51.100.20", 5432) with data.airlock.hosts as h

	# Another port of the name: refused, naming the port it is open on.
	d := airlock.decision with input as tcp_named("db.corp.example", "198.51.100.20", 5433) with data.airlock.hosts as h
	d.reasons == [{"id": "port_not_allowed", "msg": "db.corp.example is reachable on port(s) 5432, not 5433"}]

	# A registry is never raw TCP, on its own ports either.
	not airlock.decision.allowed with input as tcp_named("github.com", "140.82.112.3", 443) with data.airlock.hosts as h

	# An address no name was answered for is decided as the address: denied
	# unless an entry names the address itself.
	reason_ids(tcp_named("140.82.112.3", "140.82.112.3", 22)) == ["default_deny"] with data.airlock.hosts as h
	airlock.decision.allowed with input as tcp_named("140.82.112.9", "140.82.112.9", 22) with data.airlock.hosts as h

	# When a name is known it decides: an entry for the address does not
	# open another name's connection to it.
	not airlock.decision.allowed with input as tcp_named("evil.example", "140.82.112.9", 22) with data.airlock.hosts as h
}

test_allow_host_dns_port_named if {
	h := {"registry": {}, "allow": {"resolver.example": {"ports": [53]}}}
	d := airlock.decision with input as at("tcp", "resolver.example", 53) with data.airlock.hosts as h
	d.allowed
	d.reasons == [{"id": "dns_port_optin", "msg": "port 53 opened by a rule that names it"}]
}

test_git_fetch_only_on_git_hosts if {
	allowed(http("POST", "github.com", "/o/r.git/git-upload-pack"))
	not allowed(http("POST", "pypi.org", "/o/r.git/git-upload-pack"))
	not allowed(http("POST", "registry.npmjs.org", "/x/git-upload-pack"))
	d := airlock.decision with input as http("POST", "pypi.org", "/o/r.git/git-upload-pack")
	d.reasons == [{"id": "git_fetch_not_git_host", "msg": "pypi.org is not a git host: git fetch (POST .../git-upload-pack) is allowed only to hosts that serve git"}]
}

test_git_fetch_on_host_a_rule_names if {
	allowed(http("POST", "pypi.org", "/o/r.git/git-upload-pack")) with data.airlock.egress.git_host as true
	not allowed(http("POST", "evil.example", "/o/r.git/git-upload-pack")) with data.airlock.egress.git_host as true
}

with_http(x, extra) := object.union(x, {"http": extra})

test_read_only_refuses_bodies if {
	every method in {"GET", "HEAD", "OPTIONS"} {
		not allowed(with_http(http(method, "pypi.org", "/simple/"), {"body_size": 10}))
		not allowed(with_http(http(method, "pypi.org", "/simple/"), {"body_size": -1}))
		not allowed(with_http(http(method, "pypi.org", "/simple/"), {"headers": {"content-length": "10"}}))
		not allowed(with_http(http(method, "pypi.org", "/simple/"), {"headers": {"transfer-encoding": "chunked"}}))
	}
	d := airlock.decision with input as with_http(http("GET", "pypi.org", "/simple/"), {"body_size": 10})
	d.reasons == [{"id": "read_only_body", "msg": "GET to pypi.org carries a request body: a read-only registry takes none"}]
}

test_read_only_without_body_passes if {
	allowed(with_http(http("GET", "pypi.org", "/simple/"), {"headers": {"content-length": "0"}}))
	allowed(with_http(http("HEAD", "pypi.org", "/simple/"), {"body_size": 0}))
	allowed(with_http(http("POST", "github.com", "/o/r.git/git-upload-pack"), {"body_size": 512}))
}

test_allow_host_takes_bodies if {
	h := {"registry": {}, "allow": {"api.example.com": true}}
	airlock.decision.allowed with input as with_http(http("GET", "api.example.com", "/"), {"body_size": 10}) with data.airlock.hosts as h
	airlock.decision.allowed with input as http("POST", "api.example.com", "/o/r.git/git-upload-pack") with data.airlock.hosts as h
}

test_registry_post_keeps_default_deny if {
	reason_ids(http("POST", "pypi.org", "/legacy/")) == ["default_deny"]
	reason_ids(at("connect", "evil.example", 4444)) == ["default_deny"]
}

own(x, allow) := object.union(x, {"sandbox": {"id": "sb-a", "allow": allow}})

test_sandbox_allow_every_kind_for_that_sandbox_only if {
	a := {"api.example.com": true, "**.corp.example": true, "203.0.113.7": {"ports": [22]}}
	allowed(own(http("DELETE", "api.example.com", "/x"), a))
	allowed(own(with_http(http("POST", "api.example.com", "/"), {"body_size": 10}), a))
	allowed(own(req("connect", "a.b.corp.example"), a))
	not airlock.decision.mitm with input as own(req("connect", "a.b.corp.example"), a)
	allowed(own(at("tcp", "203.0.113.7", 22), a))
	not allowed(own(req("connect", "corp.example"), a))

	# Another sandbox, without the list or with another one, is denied.
	not allowed(http("DELETE", "api.example.com", "/x"))
	not allowed(own(http("DELETE", "api.example.com", "/x"), {"other.example": true}))
	reason_ids(req("connect", "a.b.corp.example")) == ["default_deny"]
}

test_sandbox_allow_ports if {
	a := {"api.example.com": {"ports": [8443]}, "db.example.com": {"ports": ["*"]}, "web.example.com": true}
	allowed(own(at("tcp", "api.example.com", 8443), a))
	not allowed(own(at("tcp", "api.example.com", 443), a))
	d := airlock.decision with input as own(at("tcp", "api.example.com", 4444), a)
	d.reasons == [{"id": "port_not_allowed", "msg": "api.example.com is reachable on port(s) 8443, not 4444"}]
	allowed(own(at("tcp", "db.example.com", 5432), a))
	reason_ids(own(at("tcp", "db.example.com", 53), a)) == ["dns_port"]
	allowed(own(at("connect", "web.example.com", 80), a))
	reason_ids(own(at("connect", "web.example.com", 22), a)) == ["port_not_allowed"]
	allowed(own(at("dns", "api.example.com", 53), a))
}

test_sandbox_allow_opens_a_registry_fully if {
	# pypi.org on the sandbox's list: every method, not intercepted, as --allow.
	a := {"pypi.org": true}
	allowed(own(http("POST", "pypi.org", "/legacy/"), a))
	not airlock.decision.mitm with input as own(req("connect", "pypi.org"), a)
	airlock.decision.mitm with input as req("connect", "pypi.org")
}

test_deny_wins_over_sandbox_allow if {
	d := airlock.decision with input as own(req("connect", "api.example.com"), {"api.example.com": true})
		with data.airlock.egress.deny as {{"id": "no", "msg": "never"}}
	not d.allowed
	d.reasons == [{"id": "no", "msg": "never"}]
}
