package airlock.egress_test

import data.airlock

git(method, host, path, service) := {
	"kind": "http",
	"sandbox": {"id": "sb-1"},
	"destination": {"host": host, "port": 443},
	"http": {"method": method, "scheme": "https", "path": path, "query": {"service": [service]}},
}

post(host, path) := {
	"kind": "http",
	"sandbox": {"id": "sb-1"},
	"destination": {"host": host, "port": 443},
	"http": {"method": "POST", "scheme": "https", "path": path},
}

allowed(x) if airlock.decision.allowed with input as x

test_fetch_allowed if {
	allowed(git("GET", "git.corp.example", "/team/repo.git/info/refs", "git-upload-pack"))
	allowed(post("git.corp.example", "/team/repo.git/git-upload-pack"))
}

test_push_denied_at_ref_discovery if {
	d := airlock.decision with input as git("GET", "git.corp.example", "/team/repo.git/info/refs", "git-receive-pack")
	not d.allowed
	d.reasons == [{"id": "git_push", "msg": "git push to git.corp.example is not allowed"}]
}

test_push_denied_at_pack_upload if {
	d := airlock.decision with input as post("git.corp.example", "/team/repo.git/git-receive-pack")
	not d.allowed
	d.reasons[0].id == "git_push"
}

test_push_to_github_denied_too if {
	not allowed(post("github.com", "/o/r.git/git-receive-pack"))
	not allowed(git("GET", "github.com", "/o/r.git/info/refs", "git-receive-pack"))
	allowed(post("github.com", "/o/r.git/git-upload-pack"))
}

test_other_paths_on_git_server_denied if {
	not allowed(post("git.corp.example", "/api/v4/projects"))
	not allowed(git("GET", "git.corp.example", "/team/repo.git/info/refs", "something-else"))
}

test_connect_intercepted if {
	d := airlock.decision with input as {"kind": "connect", "sandbox": {"id": "sb-1"}, "destination": {"host": "git.corp.example", "port": 443}}
	d.allowed
	d.mitm
}

test_git_server_other_ports_denied if {
	not allowed({"kind": "connect", "sandbox": {"id": "sb-1"}, "destination": {"host": "git.corp.example", "port": 22}})
	not allowed({"kind": "connect", "sandbox": {"id": "sb-1"}, "destination": {"host": "git.corp.example", "port": 9418}})
}
