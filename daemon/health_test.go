package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/test/poll"
)

// TestHealthPoolPart: health's pool part fails while the pool's
// preparation fails (503, ok false) and is ok again once one succeeds.
func TestHealthPoolPart(t *testing.T) {
	w := newFakeWorld(t, func(c *config.Config) { c.Sandbox.PoolSize = 1 })
	poll.Until(t, 5*time.Second, "the pool filled", func() bool { return w.d.pool.depth() == 1 })
	w.exe.failPrepare.Store(true)
	c := w.client(alice)
	c.create(t, `{}`) // takes the ready one: the refill fails
	var h api.Health
	poll.Until(t, 5*time.Second, "health to report the pool failing", func() bool {
		r := c.json(t, "GET", "/v1/health", "")
		r.decode(t, &h)
		return r.status == 503
	})
	if h.OK || len(h.Failing()) != 1 || !strings.HasPrefix(h.Failing()[0], api.HealthPartPool+": ") {
		t.Fatalf("health: got %+v, want ok false with the pool failing", h)
	}
	w.exe.failPrepare.Store(false)
	poll.Until(t, 10*time.Second, "health ok again", func() bool {
		return c.json(t, "GET", "/v1/health", "").status == 200
	})
}

// TestHealthPolicyStale: a policy reload that fails (a file that no longer
// compiles) leaves the older policy in force; health's policy part says so
// (503) until a reload succeeds.
func TestHealthPolicyStale(t *testing.T) {
	w := newFakeWorld(t)
	dir := t.TempDir()
	e, err := policy.New(policy.Config{Dir: dir}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	w.d.engine = e
	c := w.client(alice)
	if r := c.json(t, "GET", "/v1/health", ""); r.status != 200 {
		t.Fatalf("health with the policy loaded: %d %s, want 200", r.status, r.body)
	}
	bad := filepath.Join(dir, "broken.rego")
	if err := os.WriteFile(bad, []byte("package airlock\n\nthis is not rego\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.Reload(context.Background()); err == nil {
		t.Fatal("reload of a broken policy succeeded")
	}
	var h api.Health
	r := c.json(t, "GET", "/v1/health", "")
	r.decode(t, &h)
	if r.status != 503 || h.OK || len(h.Failing()) != 1 || !strings.HasPrefix(h.Failing()[0], api.HealthPartPolicy+": stale") {
		t.Fatalf("health after a failed reload: %d %+v, want 503 with the policy stale", r.status, h)
	}
	if err := os.Remove(bad); err != nil {
		t.Fatal(err)
	}
	if err := e.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := c.json(t, "GET", "/v1/health", ""); r.status != 200 {
		t.Fatalf("health after a good reload: %d %s, want 200", r.status, r.body)
	}
}
