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
