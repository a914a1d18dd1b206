package airlock.egress_test

import data.airlock

req(team, method, host) := {
	"kind": "http",
	"sandbox": {"id": "sb-1", "labels": {"team": team}},
	"destination": {"host": host, "port": 443},
	"http": {"method": method, "scheme": "https", "path": "/"},
}

allowed(x) if airlock.decision.allowed with input as x

test_ml_reaches_its_hosts if {
	allowed(req("ml", "GET", "huggingface.co"))
	allowed(req("ml", "POST", "huggingface.co"))
	allowed(req("ml", "GET", "cdn-lfs.eu-1.hf.co"))
}

test_web_reaches_its_hosts if {
	allowed(req("web", "POST", "api.stripe.com"))
	allowed(req("web", "GET", "img.cdn.example.com"))
	not allowed(req("web", "GET", "a.img.cdn.example.com"))
}

test_teams_do_not_share if {
	not allowed(req("web", "GET", "huggingface.co"))
	not allowed(req("ml", "GET", "api.stripe.com"))
	not allowed(req("unknown", "GET", "huggingface.co"))
}

test_unlabelled_sandbox_gets_defaults_only if {
	base := {
		"kind": "http",
		"sandbox": {"id": "sb-2"},
		"destination": {"host": "huggingface.co", "port": 443},
		"http": {"method": "GET", "scheme": "https", "path": "/"},
	}
	not allowed(base)
	allowed(object.union(base, {"destination": {"host": "pypi.org", "port": 443}}))
}

test_team_connect_is_intercepted if {
	base := {"kind": "connect", "sandbox": {"id": "sb-1", "labels": {"team": "ml"}}, "destination": {"host": "huggingface.co", "port": 443}}
	d := airlock.decision with input as base
	d.allowed
	d.mitm
}

test_team_tcp_denied if {
	not allowed({"kind": "tcp", "sandbox": {"id": "sb-1", "labels": {"team": "ml"}}, "destination": {"host": "huggingface.co", "port": 22}})
}

ml_connect(port) := {"kind": "connect", "sandbox": {"id": "sb-1", "labels": {"team": "ml"}}, "destination": {"host": "huggingface.co", "port": port}}

test_team_hosts_on_their_ports_only if {
	allowed(ml_connect(443))
	not allowed(ml_connect(22))
	not allowed(ml_connect(53))
	mlflow := {"kind": "connect", "sandbox": {"id": "sb-1", "labels": {"team": "ml"}}, "destination": {"host": "mlflow.corp.example", "port": 5000}}
	allowed(mlflow)
	not allowed(object.union(mlflow, {"destination": {"port": 443}}))
}
