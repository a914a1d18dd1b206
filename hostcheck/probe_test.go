package hostcheck

import (
	"context"
	"os"
	"testing"
)

const probeChildEnv = "AIRLOCK_HOSTCHECK_PROBE_CHILD"

// TestMain is also the probe's child when the real probe runs this binary.
func TestMain(m *testing.M) {
	if os.Getenv(probeChildEnv) == "1" {
		if err := ProbeChild(context.Background(), os.Stdout); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestProbeUsernsReal makes a real user namespace owning a network
// namespace (this process's uid mapped to 0) and brings lo up there. As
// root it must work; as a user it skips when the host forbids it (doctor
// then says why). Nothing outlives the child.
func TestProbeUsernsReal(t *testing.T) {
	t.Setenv(probeChildEnv, "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	res, err := ProbeUserns(context.Background(), exe)
	if err != nil {
		t.Fatal(err)
	}
	if res.Err != "" {
		if os.Geteuid() != 0 {
			t.Skipf("this host does not let uid %d make a user namespace: %s", os.Getuid(), res.Err)
		}
		t.Fatalf("as root: %s", res.Err)
	}
	if !res.Lo {
		t.Fatalf("lo did not come up in the namespace: %s", res.LoErr)
	}
	t.Logf("iptables inside the user namespace: %v", res.IPTables)
}
