# The default policy (always loaded; embedded in the binary): the hosts of the
# active presets are package registries, reachable read-only; hosts given with
# --allow are reachable for everything; all else is denied by the library.
#
# The active presets are data.airlock.config.presets (default: all of them;
# `airlock run --preset NAME` narrows the list, --preset none empties it). The
# engine merges their hosts into data.airlock.hosts.registry and the --allow
# hosts into data.airlock.hosts.allow.
package airlock.defaults

import data.airlock

# Registries over HTTP (and inside intercepted TLS): read-only methods.
allow if {
	input.kind == "http"
	airlock.registry_host
	input.http.method in {"GET", "HEAD", "OPTIONS"}
	not git_push_discovery
}

# A git push starts with GET .../info/refs?service=git-receive-pack: a read in
# form, a write in intent. Refuse it too, so the server never learns of the push.
git_push_discovery if {
	endswith(input.http.path, "/info/refs")
	"git-receive-pack" in input.http.query.service
}

# git's fetch is a POST to .../git-upload-pack; it reads, so a read-only
# registry allows it. A push (git-receive-pack) stays denied.
allow if {
	input.kind == "http"
	airlock.registry_host
	input.http.method == "POST"
	endswith(input.http.path, "/git-upload-pack")
}

# Names of registries: CONNECT, TLS (SNI) and DNS. Raw TCP is never a registry.
allow if {
	input.kind in {"connect", "tls", "dns"}
	airlock.registry_host
}

# Hosts given with --allow: every kind and method.
allow if airlock.allowed_host

# Registry TLS is intercepted so the read-only rule sees each request's method.
mitm if {
	input.kind in {"connect", "tls"}
	airlock.registry_host
	not airlock.allowed_host
}
