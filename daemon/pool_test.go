package daemon

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/test/poll"
)

// TestWarmPoolDropsBrokenEntries pins a pool that handed out entries whose
// namespace was removed from outside: every create that took one failed
// (internal) until the pool drained. Now a create drops the broken entries
// (counted in airlock_pool_broken_total), builds its own sandbox, and the
// pool refills with good ones.
func TestWarmPoolDropsBrokenEntries(t *testing.T) {
	w := newFakeWorld(t, func(c *config.Config) { c.Sandbox.PoolSize = 2 })
	poll.Until(t, 5*time.Second, "the pool filled", func() bool { return w.d.pool.depth() == 2 })
	w.d.pool.mu.Lock()
	for _, pb := range w.d.pool.ready {
		pb.net.(*fakePooledNet).broken.Store(true)
	}
	w.d.pool.mu.Unlock()
	c := w.client(alice)
	sb := c.create(t, `{}`)
	w.net.mu.Lock()
	fromPool, created := w.net.fromPool[sb.ID], w.net.created[sb.ID]
	w.net.mu.Unlock()
	if fromPool || !created {
		t.Fatalf("create: from the pool %v, created %v; want built cold", fromPool, created)
	}
	if got := w.d.metricValue(t, "airlock_pool_broken_total", ""); got != 2 {
		t.Errorf("airlock_pool_broken_total %v, want 2", got)
	}
	poll.Until(t, 5*time.Second, "the pool refilled", func() bool { return w.d.pool.depth() == 2 })
	w.d.pool.mu.Lock()
	for _, pb := range w.d.pool.ready {
		if err := pb.net.Check(); err != nil {
			t.Errorf("refilled entry %s: %v", pb.net.Path(), err)
		}
	}
	w.d.pool.mu.Unlock()
	if next := c.create(t, `{}`); !w.net.fromPool[next.ID] {
		t.Errorf("the create after the refill did not take a pooled sandbox")
	}
}

// TestRootPoolHealsAfterOutsideRemoval pins a warm pool that kept handing
// out entries whose namespace was removed from outside (`ip netns delete`
// on a ready pool namespace): each create that took one failed with
// internal until the pool drained. Now the create drops them (counted in
// airlock_pool_broken_total), builds its sandbox cold and works, and the
// pool refills with namespaces that are there.
func TestRootPoolHealsAfterOutsideRemoval(t *testing.T) {
	a := newAPIRoot(t, func(c *config.Config) { c.Sandbox.PoolSize = 2 })
	poll.Until(t, 60*time.Second, "the pool to fill", func() bool { return a.d.pool.depth() == 2 })
	a.d.pool.mu.Lock()
	var removed []string
	for _, pb := range a.d.pool.ready {
		removed = append(removed, pb.net.Path())
	}
	a.d.pool.mu.Unlock()
	for _, p := range removed {
		if out, err := exec.Command("ip", "netns", "delete", filepath.Base(p)).CombinedOutput(); err != nil {
			t.Fatalf("ip netns delete %s: %v: %s", filepath.Base(p), err, out)
		}
	}
	pooled0, broken0 := a.metric(t, "airlock_sandboxes_from_pool_total"), a.metric(t, "airlock_pool_broken_total")
	sb := a.create(t, api.CreateSandboxRequest{})
	if out := a.mustRun(t, sb.ID, "echo", "ok"); out != "ok\n" {
		t.Fatalf("exec in the sandbox created after the removal: %q", out)
	}
	if got := a.metric(t, "airlock_pool_broken_total") - broken0; got != 2 {
		t.Errorf("airlock_pool_broken_total rose by %v, want 2", got)
	}
	if got := a.metric(t, "airlock_sandboxes_from_pool_total") - pooled0; got != 0 {
		t.Errorf("from the pool: %v, want 0 (both entries were broken)", got)
	}
	poll.Until(t, 60*time.Second, "the pool to refill", func() bool { return a.d.pool.depth() == 2 })
	a.d.pool.mu.Lock()
	for _, pb := range a.d.pool.ready {
		if err := pb.net.Check(); err != nil {
			t.Errorf("refilled entry: %v", err)
		}
	}
	a.d.pool.mu.Unlock()
	next := a.create(t, api.CreateSandboxRequest{})
	if out := a.mustRun(t, next.ID, "echo", "ok"); out != "ok\n" {
		t.Fatalf("exec in a sandbox from the refilled pool: %q", out)
	}
	if got := a.metric(t, "airlock_sandboxes_from_pool_total") - pooled0; got != 1 {
		t.Errorf("from the refilled pool: %v, want 1", got)
	}
}
