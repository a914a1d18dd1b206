package sandboxd

import (
	"strings"
	"testing"
)

// TestInitRefusesHostNamespaces: init run outside the executor's fresh PID and
// mount namespaces (here: in the test process itself) must refuse before it
// touches a single mount.
func TestInitRefusesHostNamespaces(t *testing.T) {
	err := checkIsolated([2]uint64{1, 1})
	if err == nil || !strings.Contains(err.Error(), "refusing to touch mounts") {
		t.Fatalf("checkIsolated in the host's namespaces = %v, want a refusal", err)
	}
}
