package netns

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"

	"github.com/airlock-dev/airlock/test/roottest"
)

// TestRootBackgroundNice: what a pool refill forks into its namespace (the
// rules' iptables-restore) runs at backgroundNice, and what a create forks
// runs at the daemon's own priority.
func TestRootBackgroundNice(t *testing.T) {
	roottest.Require(t)
	h, err := vnetns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	r := execRunner{timeout: 10 * time.Second}
	own, err := exec.Command("/usr/bin/nice").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"refill", background(context.Background()), "19"},
		{"create", context.Background(), strings.TrimSpace(string(own))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := r.run(tc.ctx, h, "/usr/bin/nice", nil, "")
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(out); got != tc.want {
				t.Errorf("the forked command's nice: got %s, want %s", got, tc.want)
			}
		})
	}
}
