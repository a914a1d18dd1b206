# The default policy (always loaded; embedded in the binary): the hosts of the
# active presets are package registries, reachable read-only on the ports their
# preset names (443 and 80 unless it says otherwise); hosts given with --allow
# are reachable for everything on the ports named (443 and 80 for a bare HOST),
# and so are the hosts on the asking sandbox's own allow list
# (input.sandbox.allow, same values); all else is denied by the library.
#
# The active presets are data.airlock.config.presets (default: all of them;
# `airlock run --preset NAME` narrows the list, --preset none empties it). The
# engine merges their entries into data.airlock.hosts.registry and the --allow
# entries into data.airlock.hosts.allow: true (ports 443 and 80) or
# {"ports": [...], "git": true}.
package airlock.defaults

import data.airlock

# Methods that read. A read-only registry takes no request body with them.
read_methods := {"GET", "HEAD", "OPTIONS"}

# Registries over HTTP (and inside intercepted TLS): read-only methods without
# a body.
allow if {
	input.kind == "http"
	airlock.registry_host
	input.http.method in read_methods
	not airlock.has_body
	not git_push_discovery
}

# A git push starts with GET .../info/refs?service=git-receive-pack: a read in
# form, a write in intent. Refuse it too, so the server never learns of the push.
git_push_discovery if {
	endswith(input.http.path, "/info/refs")
	"git-receive-pack" in input.http.query.service
}

# git's fetch is a POST to .../git-upload-pack: it reads, so a read-only
# registry that serves git allows it. A push (git-receive-pack) stays denied,
# and so does the POST on a registry that is not a git host.
git_fetch if {
	input.http.method == "POST"
	endswith(input.http.path, "/git-upload-pack")
}

allow if {
	input.kind == "http"
	airlock.registry_host
	git_fetch
	airlock.git_host
}

# Names of registries: CONNECT, TLS (SNI) and DNS. Raw TCP is never a registry.
allow if {
	input.kind in {"connect", "tls", "dns"}
	airlock.registry_host
}

# Hosts given with --allow, or on the sandbox's own allow list: every kind and
# method.
allow if airlock.allowed_host

# Registry TLS is intercepted so the read-only rule sees each request's method.
mitm if {
	input.kind in {"connect", "tls"}
	airlock.registry_host
	not airlock.allowed_host
}

# Why a request to a registry was refused, when nothing else allowed it.
refusal contains {
	"id": "read_only_body",
	"msg": sprintf("%s to %s carries a request body: a read-only registry takes none", [input.http.method, input.destination.host]),
} if {
	input.kind == "http"
	airlock.registry_host
	input.http.method in read_methods
	airlock.has_body
}

refusal contains {
	"id": "git_fetch_not_git_host",
	"msg": sprintf("%s is not a git host: git fetch (POST .../git-upload-pack) is allowed only to hosts that serve git", [input.destination.host]),
} if {
	input.kind == "http"
	airlock.registry_host
	git_fetch
	not airlock.git_host
}

refusal contains {
	"id": "port_not_allowed",
	"msg": sprintf("%s is reachable on port(s) %s, not %d", [input.destination.host, concat(", ", [sprintf("%v", [p]) | some p in sort(ports)]), input.destination.port]),
} if {
	not airlock.on_default_port
	not airlock.registry_host
	not airlock.allowed_host
	ports := listed_ports
	count(ports) > 0
}

# listed_ports: every port a preset, --allow or sandbox allow entry names for
# the destination host, whatever the destination port. (Looked up only for a port other than
# 443 and 80, so a deny of an unlisted host on 443 costs no more than before;
# a host listed on other ports only is refused on 443 with default_deny.)
listed_ports contains p if {
	some k in airlock.host_keys
	some p in entry_ports(data.airlock.hosts.registry[k])
}

listed_ports contains p if {
	some k in airlock.host_keys
	some p in entry_ports(data.airlock.hosts.allow[k])
}

listed_ports contains p if {
	some k in airlock.host_keys
	some p in entry_ports(input.sandbox.allow[k])
}

entry_ports(e) := airlock.default_ports if {
	e == true
} else := object.get(e, "ports", airlock.default_ports) if {
	is_object(e)
}
