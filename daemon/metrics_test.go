package daemon

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/test/poll"
)

// TestMetrics: the daemon's own metrics follow its sandboxes: created (and
// how many from the pool), active, pool depth, exec start and wall
// histograms, timeouts, OOM kills, and ends by reason, lifetimes included.
func TestMetrics(t *testing.T) {
	w := newFakeWorld(t, func(c *config.Config) { c.Sandbox.PoolSize = 1 })
	h := promhttp.HandlerFor(w.d.metrics.reg, promhttp.HandlerOpts{})
	m := func(sample string) float64 { return scrape(t, h, sample) }
	poll.Until(t, 10*time.Second, "the pool to fill", func() bool { return m("airlock_sandbox_pool_depth") == 1 })
	c := w.client(alice)
	sb := c.create(t, `{}`)
	for sample, want := range map[string]float64{"airlock_sandboxes_created_total": 1, "airlock_sandboxes_from_pool_total": 1, "airlock_sandboxes_active": 1} {
		if got := m(sample); got != want {
			t.Fatalf("%s = %v, want %v", sample, got, want)
		}
	}
	c.exec(t, sb.ID, api.ExecRequest{Argv: []string{"true"}})
	if res := lastResult(t, c.exec(t, sb.ID, api.ExecRequest{Argv: []string{"sleep", "5"}, Timeout: config.Duration(50 * time.Millisecond)})); !res.TimedOut {
		t.Fatalf("result %+v, want timed out", res)
	}
	for sample, want := range map[string]float64{"airlock_exec_start_seconds_count": 2, "airlock_exec_seconds_count": 2, "airlock_exec_timeouts_total": 1} {
		if got := m(sample); got != want {
			t.Fatalf("%s = %v, want %v", sample, got, want)
		}
	}
	w.exe.oomKills.Store(2)
	if r := c.json(t, "DELETE", "/v1/sandboxes/"+sb.ID, ""); r.status != 200 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	w.exe.oomKills.Store(0)
	if got := m("airlock_sandbox_oom_kills_total"); got != 2 {
		t.Fatalf("oom kills %v, want 2", got)
	}
	idle := c.create(t, `{"idle_timeout": "1s"}`)
	// Its idle timeout would be 1s too (at most its lifetime): the
	// lifetime must be what ends it.
	life := c.create(t, `{"max_lifetime": "1s", "idle_timeout": "1h"}`)
	for _, tt := range []struct{ id, reason string }{{idle.ID, ReasonIdleTimeout}, {life.ID, ReasonMaxLifetime}, {sb.ID, ReasonDeleted}} {
		sample := fmt.Sprintf("airlock_sandboxes_ended_total{reason=%q}", tt.reason)
		poll.Until(t, 10*time.Second, sample, func() bool { return m(sample) == 1 })
	}
	if got := m("airlock_sandboxes_active"); got != 0 {
		t.Fatalf("active %v, want 0", got)
	}
}

// TestInboundMetric: the count of inbound connections let in is netns's,
// read at each scrape.
func TestInboundMetric(t *testing.T) {
	var n atomic.Uint64
	reg := prometheus.NewRegistry()
	reg.MustRegister(inboundMetric(n.Load))
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	if got := scrape(t, h, "airlock_inbound_connections_accepted_total"); got != 0 {
		t.Fatalf("before any connection: %v, want 0", got)
	}
	n.Add(3)
	if got := scrape(t, h, "airlock_inbound_connections_accepted_total"); got != 3 {
		t.Fatalf("after three: %v, want 3", got)
	}
}
