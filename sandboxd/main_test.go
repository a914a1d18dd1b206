package sandboxd

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve as the sandbox's init, so the
// tests need no airlock binary.
func TestMain(m *testing.M) {
	if IsStage() {
		InitMain()
	}
	os.Exit(m.Run())
}
