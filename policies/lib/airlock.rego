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

# host_in(hosts) is true when a key of hosts matches the destination host:
# the host itself, "*.<parent>" or "**.<ancestor>". Each key is one lookup
# (the exact host first), so the cost does not grow with the size of hosts.
# Pass a data reference, e.g. host_in(data.team_hosts[input.sandbox.labels.team]).
host_in(hosts) if hosts[host_keys[_]]

# registry_host: the destination is in an active preset (read-only access).
# The exact host is one direct lookup; the wildcard keys follow.
registry_host if data.airlock.hosts.registry[input.destination.host]

registry_host if data.airlock.hosts.registry[host_keys[_]]

# allowed_host: the destination was given with --allow (full access).
allowed_host if data.airlock.hosts.allow[input.destination.host]

allowed_host if data.airlock.hosts.allow[host_keys[_]]

default _allow := false

_allow if data.airlock.egress.allow == true

_allow if data.airlock.defaults.allow == true

# _denied stops at the first deny entry without building the list of reasons;
# the list is built only for a decision that denies.
_denied if {
	some _ in data.airlock.egress.deny
}

# Deny entries are normalized to {"id", "msg"}; anything else still denies.
_denies := [_reason(r) | some r in data.airlock.egress.deny]

_reason(r) := {"id": r.id, "msg": object.get(r, "msg", "")} if {
	is_string(r.id)
	is_string(object.get(r, "msg", ""))
} else := {"id": "deny", "msg": sprintf("%v", [r])}

# allow_reasons explain an allow to the gateway or DNS filter; dns_qtype_optin
# is how a policy lets TXT, MX, SRV ... through for a name.
_allow_reasons := sort([_reason(r) | some r in data.airlock.egress.allow_reasons])

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

decision := object.union(_verdict, _mode_field)

# One else chain: the first branch that holds is the verdict, and no later
# branch is evaluated.
_verdict := {"allowed": true, "reasons": _allow_reasons, "mitm": _mitm, "http_status": 0} if {
	not _denied
	_allow
} else := {"allowed": false, "reasons": sort(_denies), "mitm": false, "http_status": _deny_status} if {
	_denied
} else := {
	"allowed": false,
	"reasons": [{
		"id": "default_deny",
		"msg": sprintf("no rule allows %s to %s", [_what, input.destination.host]),
	}],
	"mitm": false,
	"http_status": _deny_status,
}
