package airlock.presets_test

import data.airlock

get(host) := {
	"kind": "http",
	"sandbox": {"id": "sb-1"},
	"destination": {"host": host, "port": 443},
	"http": {"method": "GET", "scheme": "https", "path": "/"},
}

registry(host) if airlock.registry_host with input as get(host)

test_every_preset_present if {
	{"debian", "github", "go", "node", "python", "rust", "ubuntu"} - object.keys(data.airlock.presets) == set()
}

test_default_config_activates_every_preset if {
	every name, hosts in data.airlock.presets {
		name in data.airlock.config.presets
		every h, _ in hosts {
			data.airlock.hosts.registry[h]
		}
	}
}

test_python if {
	registry("pypi.org")
	registry("files.pythonhosted.org")
}

test_node if registry("registry.npmjs.org")

test_go if {
	registry("proxy.golang.org")
	registry("sum.golang.org")
}

test_rust if {
	registry("crates.io")
	registry("index.crates.io")
	registry("static.crates.io")
}

test_github if {
	registry("github.com")
	registry("codeload.github.com")
	registry("objects.githubusercontent.com")
	registry("raw.githubusercontent.com")
}

test_debian if registry("deb.debian.org")

test_ubuntu_mirrors if {
	registry("archive.ubuntu.com")
	registry("us.archive.ubuntu.com")
	not registry("a.b.archive.ubuntu.com")
}

test_lookalikes_are_not_registries if {
	not registry("pypi.org.evil.example")
	not registry("xpypi.org")
	not registry("gist.github.com")
}

test_only_github_serves_git if {
	airlock.git_host with input as get("github.com")
	every h in {"pypi.org", "registry.npmjs.org", "proxy.golang.org", "crates.io", "deb.debian.org", "codeload.github.com", "api.github.com"} {
		not airlock.git_host with input as get(h)
	}
}

test_no_preset_opens_a_dns_port if {
	every _, v in data.airlock.hosts.registry {
		every p in entry_ports(v) {
			not p in airlock.dns_ports
		}
	}
}

entry_ports(v) := airlock.default_ports if {
	v == true
} else := object.get(v, "ports", airlock.default_ports)

test_registry_pypi_ports if {
	airlock.registry_host with input as object.union(get("pypi.org"), {"destination": {"host": "pypi.org", "port": 80}})
	not airlock.registry_host with input as object.union(get("pypi.org"), {"destination": {"host": "pypi.org", "port": 4444}})
}
