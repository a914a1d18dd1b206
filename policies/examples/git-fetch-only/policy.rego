# Git over HTTPS: clone and fetch from the company's git server are allowed,
# every push (to any host, github.com included) is denied.
#
# Smart HTTP: a fetch is GET .../info/refs?service=git-upload-pack then
# POST .../git-upload-pack; a push is GET .../info/refs?service=git-receive-pack
# then POST .../git-receive-pack. Pushes are caught at both steps.
package airlock.egress

import data.airlock

# The git servers and their ports (true: 443 and 80).
git_servers := {"git.corp.example": true}

deny contains {"id": "git_push", "msg": sprintf("git push to %s is not allowed", [input.destination.host])} if {
	input.kind == "http"
	endswith(input.http.path, "/git-receive-pack")
}

deny contains {"id": "git_push", "msg": sprintf("git push to %s is not allowed", [input.destination.host])} if {
	input.kind == "http"
	endswith(input.http.path, "/info/refs")
	"git-receive-pack" in input.http.query.service
}

allow if {
	input.kind == "http"
	airlock.host_in(git_servers)
	input.http.method == "GET"
	endswith(input.http.path, "/info/refs")
	input.http.query.service == ["git-upload-pack"]
}

allow if {
	input.kind == "http"
	airlock.host_in(git_servers)
	input.http.method == "POST"
	endswith(input.http.path, "/git-upload-pack")
}

# The server's name may be resolved and connected to; TLS is intercepted so
# the rules above see each request.
allow if {
	input.kind in {"connect", "tls", "dns"}
	airlock.host_in(git_servers)
}

mitm if {
	input.kind in {"connect", "tls"}
	airlock.host_in(git_servers)
}
