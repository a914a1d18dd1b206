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

func TestPoolTarget(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name           string
		size, bound    int
		interval, prep time.Duration
		want           int
	}{
		{"nothing seen yet", 2, 8, 0, 0, 2},
		{"no preparation timed yet", 2, 8, 5 * ms, 0, 2},
		{"creates rarer than a preparation", 2, 8, time.Second, 30 * ms, 2},
		{"one preparation covers three takes", 2, 8, 10 * ms, 30 * ms, 6},
		{"a part take rounds up", 2, 8, 10 * ms, 31 * ms, 8},
		{"bounded", 2, 8, ms, 30 * ms, 8},
		{"fixed pool", 4, 4, ms, 30 * ms, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := poolTarget(tt.size, tt.bound, tt.interval, tt.prep); got != tt.want {
				t.Errorf("poolTarget(%d, %d, %v, %v): got %d, want %d", tt.size, tt.bound, tt.interval, tt.prep, got, tt.want)
			}
		})
	}
}

// TestWarmPoolSizesItself: creates coming faster than a preparation raise
// the pool's target up to pool.max and the pool fills to it; an idle pool
// falls back to sandbox.pool_size and destroys the sandboxes above it.
func TestWarmPoolSizesItself(t *testing.T) {
	w := newFakeWorld(t, func(c *config.Config) { c.Sandbox.PoolSize, c.Pool.Max = 2, 6 })
	p := w.d.pool
	poll.Until(t, 5*time.Second, "the pool filled", func() bool { return p.depth() == 2 })
	// As if preparations took a second and creates came every 10 ms: any
	// interval the next take adds keeps the need above the bound.
	p.mu.Lock()
	p.prep, p.interval, p.lastTake = time.Second, 10*time.Millisecond, time.Now()
	p.mu.Unlock()
	c := w.client(alice)
	c.create(t, `{}`)
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	if target != 6 {
		t.Fatalf("target after fast creates: got %d, want pool.max 6", target)
	}
	poll.Until(t, 5*time.Second, "the pool grew to its target", func() bool { return p.depth() == 6 })

	w.net.mu.Lock()
	discarded := w.net.discarded
	w.net.mu.Unlock()
	p.mu.Lock()
	p.lastTake = time.Now().Add(-2 * poolShrinkAfter)
	p.mu.Unlock()
	p.shrink()
	if got := p.depth(); got != 2 {
		t.Errorf("depth after an idle spell: got %d, want sandbox.pool_size 2", got)
	}
	w.net.mu.Lock()
	if got := w.net.discarded - discarded; got != 4 {
		t.Errorf("namespaces discarded by the shrink: got %d, want 4", got)
	}
	w.net.mu.Unlock()
}

// TestWarmPoolYieldsToCreates: right after a take the refill holds back
// while the pool is above half its target, and prepares a batch at once at
// or below it.
func TestWarmPoolYieldsToCreates(t *testing.T) {
	p := &warmPool{size: 2, bound: 8, target: 8, batch: 2}
	p.ready = make([]*pooled, 5)
	p.lastTake = time.Now().Add(time.Hour) // a take "just now", whatever the clock does
	if n, wait := p.want(); wait <= 0 || n != 1 {
		t.Errorf("depth 5 of 8 right after a take: got (%d, %v), want to hold back", n, wait)
	}
	p.ready = make([]*pooled, 4)
	if n, wait := p.want(); wait != 0 || n != 2 {
		t.Errorf("depth 4 of 8 (the low-water mark): got (%d, %v), want a batch of 2 now", n, wait)
	}
	p.lastTake = time.Now().Add(-time.Hour)
	p.ready = make([]*pooled, 7)
	if n, wait := p.want(); wait != 0 || n != 1 {
		t.Errorf("depth 7 of 8, no take lately: got (%d, %v), want 1 now", n, wait)
	}
	p.ready = make([]*pooled, 8)
	if n, _ := p.want(); n != 0 {
		t.Errorf("full pool: got %d to prepare, want 0", n)
	}
}
