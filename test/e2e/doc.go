// Package e2e holds airlock's end-to-end tests: the real airlock binary runs real
// clients (curl, dig, pip, npm, go, git) with `airlock run` against a fake
// internet (package test/fakenet) whose servers answer for pypi.org,
// registry.npmjs.org, proxy.golang.org, github.com and a few test hosts.
//
// Tests assert on the audit log (JSON lines) and on the fake servers' counters,
// never on log text; every "blocked" case also proves its target saw nothing.
// They need root (namespaces, iptables, cgroups) and skip without it, unless
// AIRLOCK_REQUIRE_ROOT_TESTS=1. AIRLOCK_BIN names a prebuilt binary; otherwise
// TestMain builds ./cmd/airlock once.
//
// The package has no code of its own outside tests.
package e2e
