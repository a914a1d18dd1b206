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
