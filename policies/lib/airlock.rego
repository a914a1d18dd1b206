# The airlock policy library (always loaded; embedded in the binary).
#
# It turns the rules of package airlock.egress (a user's policy) and package
# airlock.defaults (the embedded default policy) into data.airlock.decision:
#
#   {"allowed": bool, "reasons": [{"id", "msg"}], "mitm": bool,
#    "http_status": int, "mode": "enforce" | "report"  (mode only when set)}
#
# Rules a policy may define in package airlock.egress:
#   allow                     true when the request may pass
#   deny contains {"id", "msg"}   a deny always wins over every allow
#   mitm                      intercept TLS so each inner request is checked
#   http_status := n          status the gateway answers a denied request with
#   report                    this request's decision is only reported
#   enforce                   this request's decision is enforced, even when the
#                             gateway runs in report mode (enforce wins over report)
#
# With no allow and no deny the answer is a deny with reason "default_deny".
package airlock

# suffixes: the host and its parents, longest first. The engine always fills
# input.destination.suffixes; the computed form serves hand-written test inputs.
suffixes := input.destination.suffixes

suffixes := [concat(".", array.slice(labels, i, count(labels))) |
	labels := split(input.destination.host, ".")
	some i, _ in labels
] if not input.destination.suffixes

# host_keys: every key a host-keyed data object can hold that matches the
# destination: the host, "*.<parent>" (exactly one more label) and
# "**.<ancestor>" (one or more labels). Lookups by these keys cost the same with
# 10 or 100,000 hosts in the object.
host_keys contains input.destination.host

host_keys contains concat("", ["*.", suffixes[1]])

host_keys contains concat("", ["**.", s]) if {
	some i, s in suffixes
	i > 0
}

# host_in(hosts) is true when a key of hosts matches the destination host.
# Pass a data reference, e.g. host_in(data.team_hosts[input.sandbox.labels.team]).
host_in(hosts) if {
	some k in host_keys
	hosts[k]
}

# registry_host: the destination is in an active preset (read-only access).
registry_host if {
	some k in host_keys
	data.airlock.hosts.registry[k]
}

# allowed_host: the destination was given with --allow (full access).
allowed_host if {
	some k in host_keys
	data.airlock.hosts.allow[k]
}

default _allow := false

_allow if data.airlock.egress.allow == true

_allow if data.airlock.defaults.allow == true

# Deny entries are normalized to {"id", "msg"}; anything else still denies.
_denies contains _reason(r) if some r in data.airlock.egress.deny

_reason(r) := {"id": r.id, "msg": object.get(r, "msg", "")} if {
	is_string(r.id)
	is_string(object.get(r, "msg", ""))
} else := {"id": "deny", "msg": sprintf("%v", [r])}

default _allowed := false

_allowed if {
	_allow
	count(_denies) == 0
}

_what := input.http.method if input.kind == "http"

_what := input.kind if input.kind != "http"

_reasons := sort(_denies) if {
	count(_denies) > 0
} else := [] if {
	_allow
} else := [{
	"id": "default_deny",
	"msg": sprintf("no rule allows %s to %s", [_what, input.destination.host]),
}]

default _mitm := false

_mitm if {
	_allowed
	data.airlock.egress.mitm == true
}

_mitm if {
	_allowed
	data.airlock.defaults.mitm == true
}

_status := 0 if {
	_allowed
} else := data.airlock.egress.http_status if {
	is_number(data.airlock.egress.http_status)
} else := 403

_mode := "enforce" if {
	data.airlock.egress.enforce == true
} else := "report" if {
	data.airlock.egress.report == true
}

_base := {
	"allowed": _allowed,
	"reasons": _reasons,
	"mitm": _mitm,
	"http_status": _status,
}

decision := object.union(_base, {"mode": _mode})

decision := _base if not _mode
