package airlock_test

import data.airlock

req(kind, host) := {"kind": kind, "sandbox": {"id": "sb-1"}, "destination": {"host": host, "port": 443}}

get(host, path) := {
	"kind": "http",
	"sandbox": {"id": "sb-1"},
	"destination": {"host": host, "port": 443},
	"http": {"method": "GET", "scheme": "https", "path": path},
}

hosts := {
	"exact.example": true,
	"*.one.example": true,
	"**.many.example": true,
}

test_suffixes_computed_when_absent if {
	airlock.suffixes == ["a.b.example", "b.example", "example"] with input as req("tls", "a.b.example")
}

test_suffixes_taken_from_input if {
	req_in := object.union(req("tls", "a.example"), {"destination": {"host": "a.example", "port": 443, "suffixes": ["x"]}})
	airlock.suffixes == ["x"] with input as req_in
}

test_host_keys if {
	airlock.host_keys == ["a.b.example", "*.b.example", "**.b.example", "**.example"] with input as req("tls", "a.b.example")
}

test_host_in_exact if airlock.host_in(hosts) with input as req("tls", "exact.example")

test_host_in_exact_no_subdomain if {
	not airlock.host_in(hosts) with input as req("tls", "x.exact.example")
}

test_host_in_single_wildcard_one_label if airlock.host_in(hosts) with input as req("tls", "a.one.example")

test_host_in_single_wildcard_not_two_labels if {
	not airlock.host_in(hosts) with input as req("tls", "a.b.one.example")
}

test_host_in_single_wildcard_not_apex if {
	not airlock.host_in(hosts) with input as req("tls", "one.example")
}

test_host_in_double_wildcard_one_label if airlock.host_in(hosts) with input as req("tls", "a.many.example")

test_host_in_double_wildcard_deep if airlock.host_in(hosts) with input as req("tls", "a.b.c.many.example")

test_host_in_double_wildcard_not_apex if {
	not airlock.host_in(hosts) with input as req("tls", "many.example")
}

test_registry_and_allowed_host if {
	airlock.registry_host with input as req("tls", "a.one.example") with data.airlock.hosts.registry as hosts
	airlock.allowed_host with input as req("tls", "exact.example") with data.airlock.hosts.allow as hosts
	not airlock.allowed_host with input as req("tls", "other.example") with data.airlock.hosts.allow as hosts
}

test_default_deny if {
	d := airlock.decision with input as get("nothing.example", "/") with data.airlock.hosts as {"registry": {}, "allow": {}}
	d == {
		"allowed": false,
		"reasons": [{"id": "default_deny", "msg": "no rule allows GET to nothing.example"}],
		"mitm": false,
		"http_status": 403,
	}
}

test_default_deny_names_kind if {
	d := airlock.decision with input as req("tcp", "192.0.2.1") with data.airlock.hosts as {"registry": {}, "allow": {}}
	d.reasons == [{"id": "default_deny", "msg": "no rule allows tcp to 192.0.2.1"}]
}

test_allow if {
	d := airlock.decision with input as get("x.example", "/") with data.airlock.egress.allow as true
	d == {"allowed": true, "reasons": [], "mitm": false, "http_status": 0}
}

test_allow_must_be_true if {
	d := airlock.decision with input as get("x.example", "/") with data.airlock.egress.allow as "yes" with data.airlock.hosts as {"registry": {}, "allow": {}}
	not d.allowed
}

test_deny_wins if {
	d := airlock.decision with input as get("x.example", "/")
		with data.airlock.egress.allow as true
		with data.airlock.egress.deny as {{"id": "b", "msg": "two"}, {"id": "a", "msg": "one"}}
	d.allowed == false
	d.reasons == [{"id": "a", "msg": "one"}, {"id": "b", "msg": "two"}]
	d.http_status == 403
}

test_deny_wins_over_default_policy if {
	d := airlock.decision with input as get("x.example", "/")
		with data.airlock.defaults.allow as true
		with data.airlock.egress.deny as {{"id": "no", "msg": "m"}}
	not d.allowed
}

test_deny_malformed_entries_still_deny if {
	d := airlock.decision with input as get("x.example", "/")
		with data.airlock.egress.allow as true
		with data.airlock.egress.deny as {"plain string", {"msg": "no id"}, {"id": "x", "msg": 7}}
	not d.allowed
	count(d.reasons) == 3
	every r in d.reasons {
		r.id == "deny"
	}
}

test_deny_without_msg if {
	d := airlock.decision with input as get("x.example", "/") with data.airlock.egress.deny as {{"id": "only_id"}}
	d.reasons == [{"id": "only_id", "msg": ""}]
}

test_custom_status if {
	d := airlock.decision with input as get("x.example", "/")
		with data.airlock.egress.deny as {{"id": "x", "msg": "y"}}
		with data.airlock.egress.http_status as 451
	d.http_status == 451
}

test_mitm_only_when_allowed if {
	airlock.decision.mitm with input as get("x.example", "/")
		with data.airlock.egress.allow as true
		with data.airlock.egress.mitm as true
	not airlock.decision.mitm with input as get("x.example", "/")
		with data.airlock.egress.mitm as true
		with data.airlock.hosts as {"registry": {}, "allow": {}}
	airlock.decision.mitm with input as req("connect", "x.example")
		with data.airlock.defaults.allow as true
		with data.airlock.defaults.mitm as true
}

# passthrough: an allowed connect or tls is tunneled end to end (mitm off,
# even over the default policy's registry interception); a denied one, an
# http request and a policy without the rule get no passthrough key at all.
test_passthrough if {
	d := airlock.decision with input as req("tls", "pinned.example")
		with data.airlock.defaults.allow as true
		with data.airlock.defaults.mitm as true
		with data.airlock.egress.passthrough as true
	d == {"allowed": true, "reasons": [], "mitm": false, "passthrough": true, "http_status": 0}
	c := airlock.decision with input as req("connect", "pinned.example")
		with data.airlock.egress.allow as true
		with data.airlock.egress.mitm as true
		with data.airlock.egress.passthrough as true
	c.passthrough
	not c.mitm
	not airlock.decision.passthrough with input as req("tls", "pinned.example")
		with data.airlock.egress.passthrough as true
		with data.airlock.hosts as {"registry": {}, "allow": {}}
	not airlock.decision.passthrough with input as get("pinned.example", "/")
		with data.airlock.egress.allow as true
		with data.airlock.egress.passthrough as true
	not airlock.decision.passthrough with input as req("tls", "pinned.example")
		with data.airlock.egress.allow as true
	airlock.decision.mitm with input as req("tls", "registry.example")
		with data.airlock.defaults.allow as true
		with data.airlock.defaults.mitm as true
		with data.airlock.egress.passthrough as false
}

test_mode_report if {
	d := airlock.decision with input as get("x.example", "/") with data.airlock.egress.report as true
	d.mode == "report"
}

test_mode_enforce_wins if {
	d := airlock.decision with input as get("x.example", "/")
		with data.airlock.egress.report as true
		with data.airlock.egress.enforce as true
	d.mode == "enforce"
}

test_mode_absent_by_default if {
	d := airlock.decision with input as get("x.example", "/")
	not "mode" in object.keys(d)
}

test_host_keys_single_label_and_ip if {
	airlock.host_keys == ["localhost"] with input as req("tls", "localhost")
	airlock.host_keys == ["198.51.100.7"] with input as object.union(req("tcp", "198.51.100.7"), {"destination": {"host": "198.51.100.7", "port": 22, "suffixes": ["198.51.100.7"]}})
}

test_allowed_host_wildcards if {
	h := {"*.one.example": true, "**.many.example": true}
	airlock.allowed_host with input as req("tls", "a.one.example") with data.airlock.hosts.allow as h
	airlock.allowed_host with input as req("tls", "a.b.many.example") with data.airlock.hosts.allow as h
	not airlock.allowed_host with input as req("tls", "a.b.one.example") with data.airlock.hosts.allow as h
}

test_registry_double_wildcard if {
	airlock.registry_host with input as req("tls", "x.y.many.example") with data.airlock.hosts.registry as hosts
	not airlock.registry_host with input as req("tls", "many.example") with data.airlock.hosts.registry as hosts
}

test_allow_reasons_reach_the_decision if {
	d := airlock.decision with input as {"kind": "dns", "sandbox": {"id": "sb-1"}, "destination": {"host": "mail.example", "port": 53}, "dns": {"qname": "mail.example", "qtype": "MX"}}
		with data.airlock.egress.allow as true
		with data.airlock.egress.allow_reasons as {{"id": "dns_qtype_optin", "msg": "MX for mail.example"}}
	d.allowed
	d.reasons == [{"id": "dns_qtype_optin", "msg": "MX for mail.example"}]
}

test_allow_reasons_do_not_allow if {
	d := airlock.decision with input as {"kind": "dns", "sandbox": {"id": "sb-1"}, "destination": {"host": "mail.example", "port": 53}, "dns": {"qname": "mail.example", "qtype": "MX"}}
		with data.airlock.egress.allow_reasons as {{"id": "dns_qtype_optin", "msg": "MX"}}
	not d.allowed
	d.reasons[0].id == "default_deny"
}

test_host_keys_taken_from_input if {
	keys := ["a.one.example", "*.one.example", "**.one.example", "**.example"]
	req_in := object.union(req("tls", "a.one.example"), {"destination": {"host": "a.one.example", "port": 443, "keys": keys}})
	airlock.host_keys == keys with input as req_in
	airlock.host_in(hosts) with input as req_in
}

at(kind, host, port) := {"kind": kind, "sandbox": {"id": "sb-1"}, "destination": {"host": host, "port": port}}

get_at(host, port) := {
	"kind": "http",
	"sandbox": {"id": "sb-1"},
	"destination": {"host": host, "port": port},
	"http": {"method": "GET", "scheme": "https", "path": "/"},
}

ported := {
	"web.example": true,
	"alt.example": {"ports": [8443]},
	"any.example": {"ports": ["*"]},
	"noports.example": {"git": true},
	"off.example": false,
	"odd.example": "yes",
}

test_port_ok_true_is_443_and_80 if {
	airlock.port_ok(true) with input as at("tls", "x.example", 443)
	airlock.port_ok(true) with input as at("connect", "x.example", 80)
	not airlock.port_ok(true) with input as at("connect", "x.example", 4444)
	not airlock.port_ok(true) with input as at("tcp", "x.example", 22)
}

test_port_ok_object_ports if {
	airlock.port_ok({"ports": [8443, 9418]}) with input as at("tls", "x.example", 9418)
	not airlock.port_ok({"ports": [8443]}) with input as at("tls", "x.example", 443)
	airlock.port_ok({"git": true}) with input as at("tls", "x.example", 443)
	not airlock.port_ok({"git": true}) with input as at("tls", "x.example", 8443)
	airlock.port_ok({"ports": ["*"]}) with input as at("tcp", "x.example", 22)
	not airlock.port_ok({"ports": []}) with input as at("tls", "x.example", 443)
}

test_port_ok_other_values_match_nothing if {
	not airlock.port_ok(false) with input as at("tls", "x.example", 443)
	not airlock.port_ok("yes") with input as at("tls", "x.example", 443)
	not airlock.port_ok(false) with input as at("dns", "x.example", 53)
}

test_port_ok_dns_has_no_port if {
	airlock.port_ok(true) with input as at("dns", "x.example", 53)
	airlock.port_ok({"ports": [8443]}) with input as at("dns", "x.example", 53)
}

test_host_in_checks_the_port if {
	airlock.host_in(ported) with input as at("tls", "web.example", 443)
	airlock.host_in(ported) with input as get_at("web.example", 80)
	not airlock.host_in(ported) with input as at("connect", "web.example", 4444)
	airlock.host_in(ported) with input as at("connect", "alt.example", 8443)
	not airlock.host_in(ported) with input as at("connect", "alt.example", 443)
	airlock.host_in(ported) with input as at("tcp", "any.example", 5432)
	airlock.host_in(ported) with input as at("tls", "noports.example", 443)
	not airlock.host_in(ported) with input as at("tls", "off.example", 443)
	not airlock.host_in(ported) with input as at("tls", "odd.example", 443)
	airlock.host_in(ported) with input as at("dns", "alt.example", 53)
}

test_registry_and_allowed_host_check_the_port if {
	not airlock.registry_host with input as at("connect", "exact.example", 4444) with data.airlock.hosts.registry as hosts
	not airlock.registry_host with input as at("tls", "a.one.example", 22) with data.airlock.hosts.registry as hosts
	airlock.registry_host with input as at("dns", "a.one.example", 53) with data.airlock.hosts.registry as hosts
	airlock.allowed_host with input as at("tcp", "alt.example", 8443) with data.airlock.hosts.allow as ported
	not airlock.allowed_host with input as at("tcp", "alt.example", 443) with data.airlock.hosts.allow as ported
	not airlock.allowed_host with input as at("tcp", "web.example", 4444) with data.airlock.hosts.allow as ported
}

test_git_host if {
	r := {"git.example": {"git": true}, "**.forge.example": {"git": true}, "pkgs.example": true}
	airlock.git_host with input as get_at("git.example", 443) with data.airlock.hosts.registry as r
	airlock.git_host with input as get_at("a.forge.example", 443) with data.airlock.hosts.registry as r
	not airlock.git_host with input as get_at("pkgs.example", 443) with data.airlock.hosts.registry as r
	not airlock.git_host with input as get_at("other.example", 443) with data.airlock.hosts.registry as r
	airlock.git_host with input as get_at("pkgs.example", 443) with data.airlock.hosts.registry as r with data.airlock.egress.git_host as true
}

with_http(extra) := object.union(get_at("x.example", 443), {"http": extra})

test_has_body if {
	airlock.has_body with input as with_http({"body_size": 5})
	airlock.has_body with input as with_http({"body_size": -1})
	airlock.has_body with input as with_http({"headers": {"content-length": "12"}})
	airlock.has_body with input as with_http({"headers": {"content-length": "0, 0"}})
	airlock.has_body with input as with_http({"headers": {"content-length": "junk"}})
	airlock.has_body with input as with_http({"headers": {"transfer-encoding": "chunked"}})
	airlock.has_body with input as with_http({"headers": {"transfer-encoding": ""}})
}

test_has_body_none if {
	not airlock.has_body with input as get_at("x.example", 443)
	not airlock.has_body with input as with_http({"headers": {"content-length": "0"}})
	not airlock.has_body with input as with_http({"headers": {"content-length": " 0 "}, "body_size": 0})
	not airlock.has_body with input as with_http({"headers": {"accept": "*/*"}})
}

no_hosts := {"registry": {}, "allow": {}}

test_dns_port_denied_whatever_allows_it if {
	every kind in {"connect", "tls", "tcp"} {
		every port in {53, 853} {
			d := airlock.decision with input as at(kind, "resolver.example", port) with data.airlock.egress.allow as true
			not d.allowed
			d.reasons == [{"id": "dns_port", "msg": sprintf("port %d carries DNS: %s to resolver.example:%d needs a rule that names the port (dns_port_optin)", [port, kind, port])}]
		}
	}
	d := airlock.decision with input as get_at("resolver.example", 853) with data.airlock.defaults.allow as true
	d.reasons[0].id == "dns_port"
}

test_dns_port_denied_with_user_denies if {
	d := airlock.decision with input as at("connect", "r.example", 53)
		with data.airlock.egress.allow as true
		with data.airlock.egress.deny as {{"id": "mine", "msg": "m"}}
	[r.id | some r in d.reasons] == ["dns_port", "mine"]
}

test_dns_port_optin if {
	d := airlock.decision with input as at("tcp", "resolver.example", 53)
		with data.airlock.egress.allow as true
		with data.airlock.egress.dns_port_optin as {53}
	d.allowed
	d.reasons == [{"id": "dns_port_optin", "msg": "port 53 opened by a rule that names it"}]
	not airlock.decision.allowed with input as at("tcp", "resolver.example", 853)
		with data.airlock.egress.allow as true
		with data.airlock.egress.dns_port_optin as {53}
}

test_dns_port_optin_does_not_allow if {
	d := airlock.decision with input as at("tcp", "resolver.example", 53)
		with data.airlock.egress.dns_port_optin as {53}
		with data.airlock.hosts as no_hosts
	d.reasons[0].id == "default_deny"
}

test_dns_port_named_by_allow_entry if {
	h := {"registry": {}, "allow": {"resolver.example": {"ports": [53]}, "wide.example": {"ports": ["*"]}}}
	airlock.decision.allowed with input as at("tcp", "resolver.example", 53) with data.airlock.hosts as h
	not airlock.decision.allowed with input as at("tcp", "resolver.example", 853) with data.airlock.hosts as h
	d := airlock.decision with input as at("tcp", "wide.example", 53) with data.airlock.hosts as h
	d.reasons[0].id == "dns_port"
	airlock.decision.allowed with input as at("tcp", "wide.example", 5432) with data.airlock.hosts as h
}

test_dns_questions_are_not_dns_ports if {
	d := airlock.decision with input as {"kind": "dns", "sandbox": {"id": "sb-1"}, "destination": {"host": "x.example", "port": 53}, "dns": {"qname": "x.example", "qtype": "A"}}
		with data.airlock.egress.allow as true
	d.allowed
	d.reasons == []
}

test_refusals_explain_a_deny if {
	d := airlock.decision with input as get("x.example", "/")
		with data.airlock.egress.refusal as {{"id": "why", "msg": "because"}, "plain"}
		with data.airlock.hosts as no_hosts
	not d.allowed
	d.reasons == [{"id": "deny", "msg": "plain"}, {"id": "why", "msg": "because"}]
	d.http_status == 403
}

test_refusals_never_override_an_allow if {
	d := airlock.decision with input as get("x.example", "/")
		with data.airlock.egress.refusal as {{"id": "why", "msg": "because"}}
		with data.airlock.egress.allow as true
	d.allowed
}

test_deny_wins_over_refusals if {
	d := airlock.decision with input as get("x.example", "/")
		with data.airlock.egress.refusal as {{"id": "why", "msg": "because"}}
		with data.airlock.egress.deny as {{"id": "no", "msg": "never"}}
	d.reasons == [{"id": "no", "msg": "never"}]
}

# A sandbox's own allow list (input.sandbox.allow): keyed and valued like
# data.airlock.hosts.allow, with the same port rules, for that sandbox only.
own(kind, host, port, allow) := {"kind": kind, "sandbox": {"id": "sb-a", "allow": allow}, "destination": {"host": host, "port": port}}

own_allow := {
	"api.example": true,
	"*.one.example": true,
	"**.many.example": true,
	"alt.example": {"ports": [8443]},
	"any.example": {"ports": ["*"]},
	"resolver.example": {"ports": [53]},
	"off.example": false,
}

test_sandbox_allowed_host_exact_and_wildcards if {
	airlock.sandbox_allowed_host with input as own("tls", "api.example", 443, own_allow)
	airlock.sandbox_allowed_host with input as own("connect", "api.example", 80, own_allow)
	airlock.sandbox_allowed_host with input as own("tls", "a.one.example", 443, own_allow)
	airlock.sandbox_allowed_host with input as own("tls", "a.b.many.example", 443, own_allow)
	not airlock.sandbox_allowed_host with input as own("tls", "a.b.one.example", 443, own_allow)
	not airlock.sandbox_allowed_host with input as own("tls", "x.api.example", 443, own_allow)
	not airlock.sandbox_allowed_host with input as own("tls", "off.example", 443, own_allow)
	airlock.allowed_host with input as own("tls", "api.example", 443, own_allow) with data.airlock.hosts.allow as {}
}

test_sandbox_allowed_host_checks_the_port if {
	not airlock.sandbox_allowed_host with input as own("connect", "api.example", 4444, own_allow)
	airlock.sandbox_allowed_host with input as own("tcp", "alt.example", 8443, own_allow)
	not airlock.sandbox_allowed_host with input as own("tcp", "alt.example", 443, own_allow)
	airlock.sandbox_allowed_host with input as own("tcp", "any.example", 5432, own_allow)
	airlock.sandbox_allowed_host with input as own("dns", "alt.example", 53, own_allow)
}

test_sandbox_allow_is_the_sandboxs_own if {
	# Sandbox A's list names the host; sandbox B (no list, or another list)
	# does not, with --allow empty.
	airlock.allowed_host with input as own("connect", "api.example", 443, own_allow) with data.airlock.hosts.allow as {}
	not airlock.sandbox_allowed_host with input as req("connect", "api.example")
	not airlock.sandbox_allowed_host with input as own("connect", "api.example", 443, {"other.example": true})
	not airlock.allowed_host with input as req("connect", "api.example") with data.airlock.hosts.allow as {}
}

test_sandbox_allow_dns_port_only_when_named if {
	d := airlock.decision with input as own("tcp", "resolver.example", 53, own_allow) with data.airlock.egress.allow as true
	d.allowed
	d.reasons == [{"id": "dns_port_optin", "msg": "port 53 opened by a rule that names it"}]
	not airlock.decision.allowed with input as own("tcp", "resolver.example", 853, own_allow) with data.airlock.egress.allow as true
	w := airlock.decision with input as own("tcp", "any.example", 53, own_allow) with data.airlock.egress.allow as true
	w.reasons[0].id == "dns_port"
	x := airlock.decision with input as own("connect", "api.example", 853, own_allow) with data.airlock.egress.allow as true
	x.reasons[0].id == "dns_port"
}

test_sandbox_mode_is_not_the_librarys if {
	# The engine applies input.sandbox.mode; the decision document carries a
	# mode only when a rule of the policy sets one.
	d := airlock.decision with input as object.union(get("x.example", "/"), {"sandbox": {"id": "sb-a", "mode": "report"}})
	not "mode" in object.keys(d)
}

# Rules derived from HTTP rules (policy/derive.go writes _airlock_http_*;
# mocked here): a deny about HTTP that could apply intercepts the connection;
# an allow about HTTP that names the host allows its CONNECT/TLS on 443 and 80
# and its DNS question, intercepted; a host every request of which some rule
# allows stays a tunnel.
_conn(kind, port) := {"kind": kind, "sandbox": {"id": "s"}, "destination": {"host": "x.example", "port": port}}

test_derived_deny_intercepts if {
	d := airlock.decision with input as _conn("connect", 443)
		with data.airlock.egress.allow as true
		with data.airlock.derived.http as true
		with data.airlock.egress._airlock_http_deny as {[]}
	d.allowed
	d.mitm
}

test_derived_allow_host_opens_and_intercepts if {
	every k in ["connect", "tls"] {
		d := airlock.decision with input as _conn(k, 443)
			with data.airlock.derived.http as true
		with data.airlock.egress._airlock_http_allow as {[]}
		with data.airlock.egress._airlock_http_allow_host as {[]}
		d.allowed
		d.mitm
	}
	airlock.decision.allowed with input as {"kind": "dns", "sandbox": {"id": "s"}, "destination": {"host": "x.example"}}
		with data.airlock.derived.http as true
		with data.airlock.egress._airlock_http_allow_host as {[]}
	not airlock.decision.allowed with input as _conn("connect", 22)
		with data.airlock.derived.http as true
		with data.airlock.egress._airlock_http_allow_host as {[]}
}

test_derived_open_host_stays_a_tunnel if {
	d := airlock.decision with input as _conn("connect", 443)
		with data.airlock.egress.allow as true
		with data.airlock.derived.http as true
		with data.airlock.egress._airlock_http_allow as {[]}
		with data.airlock.egress._airlock_http_open as true
	d.allowed
	not d.mitm
	e := airlock.decision with input as _conn("connect", 443)
		with data.airlock.hosts.allow as {"x.example": true}
		with data.airlock.derived.http as true
		with data.airlock.egress._airlock_http_allow as {[]}
	e.allowed
	not e.mitm
	f := airlock.decision with input as _conn("connect", 443)
		with data.airlock.egress.allow as true
		with data.airlock.derived.http as true
		with data.airlock.egress._airlock_http_allow as {[]}
	f.mitm

test_ask_rule if {
	# An ask rule turns a request nothing allows or denies into a question;
	# the decision stays a deny with its reasons.
	d := airlock.decision with input as req("connect", "new.example")
		with data.airlock.egress.ask as [{"id": "new_vendor", "msg": "b"}, {"id": "new_vendor", "msg": "a"}]
	not d.allowed
	d.ask
	d.ask_msg == "a; b"
	d.reasons[0].id == "default_deny"
}

test_ask_unmatched if {
	d := airlock.decision with input as req("connect", "new.example") with data.airlock.egress.on_unmatched as "ask"
	d.ask
	d.ask_msg == "no rule allows connect to new.example"
}

test_ask_never_over_allow_or_deny if {
	a := airlock.decision with input as req("connect", "new.example")
		with data.airlock.egress.allow as true
		with data.airlock.egress.on_unmatched as "ask"
	a.allowed
	not "ask" in object.keys(a)
	d := airlock.decision with input as req("connect", "new.example")
		with data.airlock.egress.deny as [{"id": "no", "msg": "never"}]
		with data.airlock.egress.on_unmatched as "ask"
	not "ask" in object.keys(d)
	n := airlock.decision with input as req("connect", "new.example")
	not "ask" in object.keys(n)
}
