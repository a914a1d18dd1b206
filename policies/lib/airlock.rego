# The airlock policy library (always loaded; embedded in the binary).
#
# It turns the rules of package airlock.egress (a user's policy) and package
# airlock.defaults (the embedded default policy) into data.airlock.decision:
#
#   {"allowed": bool, "reasons": [{"id", "msg"}], "mitm": bool,
#    "http_status": int, "mode": "enforce" | "report"  (mode only when set),
#    "passthrough": true, "strip": true  (each only when set)}
#
# Rules a policy may define in package airlock.egress:
#   allow                     true when the request may pass
#   deny contains {"id", "msg"}   a deny always wins over every allow
#   refusal contains {"id", "msg"}  the reason given when nothing allows the
#                             request; unlike deny, any allow overrides it
#   dns_port_optin contains PORT  lets a connection to DNS port 53 or 853
#                             through for this request (see dns_ports)
#   git_host                  this request's registry host serves git: the
#                             default policy allows git's fetch to it
#   mitm                      intercept TLS so each inner request is checked
#   passthrough               never intercept this allowed connect or tls, not
#                             even for a sandbox holding secret placeholders:
#                             its TLS is tunneled end to end, so no secret is
#                             injected into it and no inner request is seen
#                             (for clients that pin or carry their own roots);
#                             it wins over mitm
#   strip                     an allowed response with content findings reaches
#                             the agent without the hidden text and injected
#                             instructions the detectors flag, instead of whole
#                             (policies/lib/content.rego); a deny still blocks it
#   http_status := n          status the gateway answers a denied request with
#   report                    this request's decision is only reported
#   enforce                   this request's decision is enforced, even when the
#                             gateway runs in report mode (enforce wins over report)
#
# With no allow and no deny the answer is a deny with the refusals of the
# default policy and of airlock.egress as reasons, or "default_deny".
package airlock

# suffixes: the host and its parents, longest first. The engine always fills
# input.destination.suffixes; the computed form serves hand-written test inputs.
suffixes := input.destination.suffixes if {
	count(input.destination.suffixes) > 0
} else := [concat(".", array.slice(labels, i, count(labels))) |
	labels := split(input.destination.host, ".")
	some i, _ in labels
]

# host_keys: every key a host-keyed data object can hold that matches the
# destination, most specific first: the host, "*.<parent>" (exactly one more
# label) and "**.<ancestor>" (one or more labels) for every proper ancestor.
# Lookups by these keys cost the same with 10 or 100,000 hosts in the object.
# The engine fills input.destination.keys with exactly this list; the computed
# form serves hand-written test inputs.
host_keys := input.destination.keys if {
	count(input.destination.keys) > 0
} else := array.concat(
	[input.destination.host, concat("", ["*.", suffixes[1]])],
	[concat("", ["**.", s]) | some i, s in suffixes; i > 0],
) if {
	count(suffixes) > 1
} else := [input.destination.host]

# default_ports: the ports a host entry of true means, and what a preset host
# or a bare --allow HOST is reachable on.
default_ports := {443, 80}

# dns_ports carry DNS. A connection to one (kinds connect, tls, tcp, http) is
# denied with reason dns_port, whatever allows it, unless a rule names the
# port: dns_port_optin contains PORT in airlock.egress, or --allow HOST:PORT
# (or HOST:PORT on the sandbox's own allow list).
# Questions to the DNS filter (kind dns) are not connections and pass as ever.
dns_ports := {53, 853}

# port_ok(entry) is true when a host-list entry lets the destination port
# through: true means default_ports; an object {"ports": [...]} names its
# ports ("*" is every port), and without "ports" means default_ports. Any other
# value matches nothing. A DNS question has no port to check.
port_ok(true) if on_default_port

port_ok(entry) if {
	is_object(entry)
	_port_in(object.get(entry, "ports", default_ports))
}

# on_default_port: the destination port is 443 or 80, or the request is a DNS
# question (which has no port to check). Evaluated once per request, however
# many lookups use it.
on_default_port if default_ports[input.destination.port]

on_default_port if input.kind == "dns"

_port_in(_) if input.kind == "dns"

_port_in(ports) if input.destination.port in ports

_port_in(ports) if "*" in ports

# host_in(hosts) is true when a key of hosts matches the destination host (the
# host itself, "*.<parent>" or "**.<ancestor>") and its entry lets the
# destination port through (port_ok: true is ports 443 and 80, or
# {"ports": [443, 8443]}). Each key is one lookup, so the cost does not grow
# with the size of hosts. Pass a data reference, e.g.
# host_in(data.team_hosts[input.sandbox.labels.team]). For a host on any port,
# look the keys up yourself: some k in host_keys; hosts[k].
host_in(hosts) if port_ok(hosts[host_keys[_]])

# registry_host: the destination is in an active preset (read-only access) on
# a port its preset names (443 and 80 unless it says otherwise). The exact host
# is one direct lookup; the wildcard keys follow. (Bind a looked-up entry to a
# variable before comparing it: OPA evaluates `data.x[k] == true` by scanning
# data.x, which costs 350 us with 10,000 hosts.)
registry_host if {
	on_default_port
	e := data.airlock.hosts.registry[input.destination.host]
	e == true
}

registry_host if port_ok(data.airlock.hosts.registry[input.destination.host])

registry_host if port_ok(data.airlock.hosts.registry[host_keys[_]])

# allowed_host: the destination was given with --allow (full access), or is on
# this sandbox's own allow list (sandbox_allowed_host), on the port it names
# (443 and 80 for a bare HOST, every port for HOST:*).
allowed_host if {
	on_default_port
	e := data.airlock.hosts.allow[input.destination.host]
	e == true
}

allowed_host if port_ok(data.airlock.hosts.allow[input.destination.host])

allowed_host if port_ok(data.airlock.hosts.allow[host_keys[_]])

allowed_host if sandbox_allowed_host

# sandbox_allowed_host: the destination is on the asking sandbox's own allow
# list, input.sandbox.allow (set when the sandbox was created; the same keys
# and values as data.airlock.hosts.allow), on a port its entry names. A
# policy's deny rules still win; a policy can tell these hosts apart from
# --allow ones by this rule.
sandbox_allowed_host if {
	on_default_port
	e := input.sandbox.allow[input.destination.host]
	e == true
}

sandbox_allowed_host if port_ok(input.sandbox.allow[host_keys[_]])

# git_host: the destination serves git, so a read-only rule may allow git's
# fetch (POST .../git-upload-pack) to it: a preset entry says "git": true, or
# a git_host rule in airlock.egress names it.
git_host if {
	some k in host_keys
	e := data.airlock.hosts.registry[k]
	e.git == true
}

git_host if data.airlock.egress.git_host == true

# has_body: the HTTP request carries a body. The gateway fills
# input.http.body_size (n > 0 declared, -1 chunked); a hand-written input may
# instead carry a content-length other than "0" or a transfer-encoding header.
has_body if input.http.body_size != 0

has_body if trim_space(input.http.headers["content-length"]) != "0"

has_body if input.http.headers["transfer-encoding"]

# _dns_port: a connection to a DNS port that no rule named. (_denied repeats
# its body, which saves a rule evaluation on every request.)
_dns_port if {
	dns_ports[input.destination.port]
	input.kind != "dns"
	not _dns_port_named
}

_dns_port_named if input.destination.port in data.airlock.egress.dns_port_optin

_dns_port_named if {
	some k in host_keys
	input.destination.port in data.airlock.hosts.allow[k].ports
}

_dns_port_named if {
	some k in host_keys
	input.destination.port in input.sandbox.allow[k].ports
}

_dns_port_reasons := [{
	"id": "dns_port",
	"msg": sprintf(
		"port %d carries DNS: %s to %s:%d needs a rule that names the port (dns_port_optin)",
		[input.destination.port, input.kind, input.destination.host, input.destination.port],
	),
}] if {
	_dns_port
} else := []

# An allowed connection to a DNS port says so in its reasons (the audit log).
_dns_port_notes contains {
	"id": "dns_port_optin",
	"msg": sprintf("port %d opened by a rule that names it", [input.destination.port]),
} if {
	input.kind != "dns"
}

default _allow := false

_allow if data.airlock.egress.allow == true

_allow if data.airlock.defaults.allow == true

# _denied stops at the first deny entry without building the list of reasons;
# the list is built only for a decision that denies.
_denied if {
	some _ in data.airlock.egress.deny
}

_denied if {
	dns_ports[input.destination.port]
	input.kind != "dns"
	not _dns_port_named
}

# Deny entries are normalized to {"id", "msg"}; anything else still denies.
_denies := array.concat([_reason(r) | some r in data.airlock.egress.deny], _dns_port_reasons)

# Refusals explain a request nothing allowed; they never override an allow.
_refusals := {_reason(r) | some r in data.airlock.defaults.refusal} | {_reason(r) | some r in data.airlock.egress.refusal}

_reason(r) := {"id": r.id, "msg": object.get(r, "msg", "")} if {
	is_string(r.id)
	is_string(object.get(r, "msg", ""))
} else := {"id": "deny", "msg": sprintf("%v", [r])}

# allow_reasons explain an allow to the gateway or DNS filter; dns_qtype_optin
# is how a policy lets TXT, MX, SRV ... through for a name.
_allow_reasons := sort([_reason(r) | some r in data.airlock.egress.allow_reasons]) if {
	not dns_ports[input.destination.port]
} else := sort(array.concat([_reason(r) | some r in data.airlock.egress.allow_reasons], [n | some n in _dns_port_notes]))

default _mitm := false

_mitm if data.airlock.egress.mitm == true

_mitm if data.airlock.defaults.mitm == true

_deny_status := data.airlock.egress.http_status if {
	is_number(data.airlock.egress.http_status)
} else := 403

_what := input.http.method if {
	input.kind == "http"
} else := input.kind

# The mode field: enforce wins over report; absent means the global mode.
_mode_field := {"mode": "enforce"} if {
	data.airlock.egress.enforce == true
} else := {"mode": "report"} if {
	data.airlock.egress.report == true
} else := {}

decision := object.union(object.union(object.union(object.union(_verdict, _mode_field), _passthrough_field), _ask_field), _strip_field)

# strip applies to an allowed request (a response's second decision).
_strip_field := {"strip": true} if {
	data.airlock.egress.strip == true
	_verdict.allowed
} else := {}

# ask: a request no rule allows and none denies is held for a person to
# answer (the daemon's approvals: API, airlock approve, webhook) when a rule
# of package airlock.egress asks for it,
#
#   ask contains {"id": "new_host", "msg": "a host the team has not used"} if input.kind != "dns"
#
# or the policy says on_unmatched := "ask" (per sandbox by a condition on
# input.sandbox). The decision stays a deny with its reasons and carries
# ask and ask_msg; a deny rule always wins, and where nobody can answer
# (airlock run, no approver) it is the deny it was.
_ask_field := {"ask": true, "ask_msg": _ask_msg} if {
	not _verdict.allowed
	not _denied
	_asks
} else := {}

_asks if some _ in data.airlock.egress.ask

_asks if data.airlock.egress.on_unmatched == "ask"

_ask_msg := concat("; ", sort([_reason(r).msg | some r in data.airlock.egress.ask])) if {
	some _ in data.airlock.egress.ask
} else := sprintf("no rule allows %s to %s", [_what, input.destination.host])

# passthrough applies to an allowed connect or tls only, and turns mitm off.
_passthrough_field := {"passthrough": true, "mitm": false} if {
	input.kind in {"connect", "tls"}
	data.airlock.egress.passthrough == true
	_verdict.allowed
} else := {}

# One else chain: the first branch that holds is the verdict, and no later
# branch is evaluated.
_verdict := {"allowed": true, "reasons": _allow_reasons, "mitm": _mitm, "http_status": 0} if {
	not _denied
	_allow
} else := {"allowed": false, "reasons": sort(_denies), "mitm": false, "http_status": _deny_status} if {
	_denied
} else := {"allowed": false, "reasons": sort(_refusals), "mitm": false, "http_status": _deny_status} if {
	count(_refusals) > 0
} else := {
	"allowed": false,
	"reasons": [{
		"id": "default_deny",
		"msg": sprintf("no rule allows %s to %s", [_what, input.destination.host]),
	}],
	"mitm": false,
	"http_status": _deny_status,
}

# http_allow: a table in package airlock.egress that says which HTTP requests
# may pass, keyed by host (the same keys as host_in: "h", "*.parent",
# "**.ancestor"); each entry is a list of {"methods": [...], "paths": [...]}
# where a path is a glob whose * matches any characters, "/" included:
#
#   http_allow := {"api.github.com": [{"methods": ["GET"], "paths": ["/repos/acme/*"]}]}
#
# The library derives everything such a rule needs, so it can never be a
# silent no-op: the DNS question for the host, the CONNECT and TLS to it on
# 443 and 80, interception of that TLS (mitm), and the inner requests that
# match an entry. Any other request to the host is refused (default_deny), and
# so is a path with dot or empty segments or encoded separators.
_http_table_entries contains e if {
	some k in host_keys
	some e in data.airlock.egress.http_allow[k]
}

_http_table_host if {
	some k in host_keys
	data.airlock.egress.http_allow[k]
}

_allow if {
	input.kind == "dns"
	_http_table_host
}

_allow if {
	input.kind in {"connect", "tls"}
	on_default_port
	_http_table_host
}

_allow if {
	input.kind == "http"
	on_default_port
	some e in _http_table_entries
	input.http.method in e.methods
	_http_table_path_plain
	some p in e.paths
	glob.match(p, null, input.http.path)
}

# _http_table_path_plain: the path has no dot segment, empty segment,
# backslash or encoded "/", "." or "\\", so a glob such as /repos/acme/* cannot
# be walked out of (/repos/acme/../other) on an upstream that normalizes.
_http_table_path_plain if {
	startswith(input.http.path, "/")
	not regex.match(`(^|/)\.\.?(/|$)|//|\\|%2[eEfF]|%5[cC]`, input.http.path)
}

_mitm if {
	input.kind in {"connect", "tls"}
	_http_table_host
}

# HTTP rules take effect. A hand-written allow or deny rule of airlock.egress
# that reads input.http only sees the requests of an
# intercepted connection. The engine (policy/derive.go) copies each such rule
# with its expressions about the request removed, into _airlock_http_allow,
# _airlock_http_allow_host (the copy still names the destination host) and
# _airlock_http_deny, and copies every allow rule that does not read
# input.http into _airlock_http_open. The copies are asked about this CONNECT,
# TLS or DNS decision as if it were an HTTP request to the same destination
# from the same sandbox:
#   - a deny about HTTP could apply, or an allow about HTTP could and no rule
#     allows every request: the connection is intercepted (mitm), so the rule
#     sees each request;
#   - an allow about HTTP names this host: its CONNECT and TLS on 443 and 80
#     and its DNS question are allowed, as for the http_allow table.
# passthrough still wins over the derived interception (its author chose the
# tunnel).
# data.airlock.derived.http: the engine derived rules from this policy (false
# for a policy with no rule about HTTP, which then pays nothing for these).
_http_inspect if {
	data.airlock.derived.http == true
	count(data.airlock.egress._airlock_http_deny) > 0 with input.kind as "http"
}

_http_inspect if {
	data.airlock.derived.http == true
	_http_allow_applies
	not _http_open
}

_http_allow_applies if count(data.airlock.egress._airlock_http_allow) > 0 with input.kind as "http"

_http_open if data.airlock.egress._airlock_http_open with input.kind as "http"

# The default policy's allow that reads no input.http (an --allow host, a host
# on the sandbox's own list): every request to the host passes.
_http_open if allowed_host

_mitm if {
	input.kind in {"connect", "tls"}
	_http_inspect
}

_allow if {
	input.kind in {"connect", "tls"}
	data.airlock.derived.http == true
	on_default_port
	_http_names_host(input.destination.port)
}

_allow if {
	input.kind == "dns"
	data.airlock.derived.http == true
	some port in default_ports
	_http_names_host(port)
}

# _http_names_host(port): an allow about HTTP names the destination host, as
# a request on port would see it.
_http_names_host(port) if {
	count(data.airlock.egress._airlock_http_allow_host) > 0 with input.kind as "http"
		with input.destination.port as port
}
