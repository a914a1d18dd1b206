// Package roottest gates tests that need root: namespaces, iptables, cgroups and
// the executor. They skip with "requires root" for an unprivileged developer and
// fail instead when AIRLOCK_REQUIRE_ROOT_TESTS=1 (set in CI), so a CI machine that
// lost root cannot go green by skipping.
//
// It must never import any airlock package.
package roottest

import (
	"os"
	"testing"
)

// EnvRequire is the variable that turns a root skip into a failure.
const EnvRequire = "AIRLOCK_REQUIRE_ROOT_TESTS"

// Require skips t unless the process is root, or fails it when EnvRequire=1.
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("requires root, and %s=1 forbids skipping", EnvRequire)
	}
	t.Skip("requires root")
}
