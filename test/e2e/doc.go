// Package e2e holds airlock's end-to-end tests: the real airlock binary runs
// real clients (curl, dig, pip, npm, go, git) with `airlock run` against a fake
// internet (package test/fakenet) whose servers answer for pypi.org,
// registry.npmjs.org, proxy.golang.org, github.com and a few test hosts. The
// runc tests start busybox containers with Debian's runc (package
// test/runctest) and attach their namespaces through `airlock serve`'s API;
// podman and containerd's CRI plugin run the CNI chain with airlock-cni
// themselves.
//
// Tests assert on the audit log and on the fake servers' counters, never on
// log text; every "blocked" case also proves its target saw nothing. They need
// root and skip without it, unless AIRLOCK_REQUIRE_ROOT_TESTS=1.
//
// Entry point: AIRLOCK_BIN=$PWD/bin/airlock go test ./test/e2e/ (without
// AIRLOCK_BIN, TestMain builds once what make build ships: the airlock front,
// airlock-core and airlock-init). The package has no code of its own outside
// tests.
//
// test/e2e must never import: cmd/airlock, daemon, dnsfilter, gateway, netns,
// policy, sandboxd.
package e2e
