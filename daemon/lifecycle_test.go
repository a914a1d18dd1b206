package daemon

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/test/poll"
)

func endRecord(t *testing.T, w *fakeWorld, id, reason string) audit.Record {
	t.Helper()
	return w.audit.Wait(t, "the "+reason+" record of "+id, func(r audit.Record) bool {
		return r.Kind == audit.KindSandbox && r.Sandbox == id && audittest.HasReason(r, reason)
	})
}

// TestIdleTimeout: a sandbox with nothing running and no API call for its
// idle timeout ends (audited); a running exec keeps it alive.
func TestIdleTimeout(t *testing.T) {
	w := newFakeWorld(t)
	c := w.client(alice)
	busy := c.create(t, `{"idle_timeout": "1s"}`)
	idle := c.create(t, `{"idle_timeout": "1s"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := c.startExec(t, ctx, busy.ID, api.ExecRequest{Argv: []string{"sleep", "3"}})
	s.next(t)
	endRecord(t, w, idle.ID, ReasonIdleTimeout)
	// The end is audited first, then the sandbox leaves the registry.
	poll.Until(t, 5*time.Second, "the idle sandbox unregistered", func() bool {
		_, ok := w.d.reg.get(idle.ID)
		return !ok
	})
	if _, ok := w.d.reg.get(busy.ID); !ok {
		t.Fatal("a sandbox with a running exec ended for idleness")
	}
	lastResult(t, s.rest(t))
	// Once its exec is over, the busy one idles out too.
	endRecord(t, w, busy.ID, ReasonIdleTimeout)
	if n := w.d.metricValue(t, "airlock_sandboxes_ended_total", ReasonIdleTimeout); n != 2 {
		t.Fatalf("ended by idle_timeout: %v, want 2", n)
	}
}

func TestMaxLifetime(t *testing.T) {
	w := newFakeWorld(t)
	c := w.client(alice)
	sb := c.create(t, `{"max_lifetime": "1s", "idle_timeout": "1s"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := c.startExec(t, ctx, sb.ID, api.ExecRequest{Argv: []string{"sleep", "60"}})
	s.next(t)
	rec := endRecord(t, w, sb.ID, ReasonMaxLifetime)
	if rec.Decision != audit.DecisionAllow {
		t.Fatalf("record %+v", rec)
	}
	frames := s.rest(t)
	if last := frames[len(frames)-1]; last.Type != api.FrameError {
		t.Fatalf("the exec's last frame %+v, want error (its sandbox ended)", last)
	}
}

// TestSandboxDiesOnItsOwn: a sandbox whose init died is ended (failed),
// torn down and audited.
func TestSandboxDiesOnItsOwn(t *testing.T) {
	w := newFakeWorld(t)
	sb := w.client(alice).create(t, `{}`)
	w.exe.all()[0].die()
	endRecord(t, w, sb.ID, ReasonFailed)
	poll.Until(t, 5*time.Second, "the namespace torn down", func() bool { return w.net.tornDown(sb.ID) == 1 })
}

// TestWarmPool: creates take prepared sandboxes from the pool, which
// refills; none is handed out twice (the fake fails a second Start or a
// second CreateFrom of one namespace).
func TestWarmPool(t *testing.T) {
	w := newFakeWorld(t, func(c *config.Config) { c.Sandbox.PoolSize = 2 })
	poll.Until(t, 5*time.Second, "the pool filled", func() bool { return w.d.pool.depth() == 2 })
	c := w.client(alice)
	var ids []string
	for range 5 {
		ids = append(ids, c.create(t, `{}`).ID)
	}
	w.net.mu.Lock()
	fromPool := len(w.net.fromPool)
	w.net.mu.Unlock()
	if fromPool < 2 {
		t.Fatalf("%d of 5 creates took a pooled sandbox, want at least the 2 ready", fromPool)
	}
	poll.Until(t, 5*time.Second, "the pool refilled", func() bool { return w.d.pool.depth() == 2 })
	var h api.Health
	c.json(t, "GET", "/v1/health", "").decode(t, &h)
	if h.PoolDepth != 2 {
		t.Fatalf("health pool_depth %d, want 2", h.PoolDepth)
	}
	for _, id := range ids {
		c.json(t, "DELETE", "/v1/sandboxes/"+id, "")
	}
	for _, b := range w.exe.all() {
		b.mu.Lock()
		starts := b.starts
		b.mu.Unlock()
		if starts > 1 {
			t.Fatalf("a sandbox was started %d times", starts)
		}
	}
	if got := w.d.metricValue(t, "airlock_sandbox_pool_depth", ""); got != 2 {
		t.Fatalf("pool depth metric %v, want 2", got)
	}
	w.d.pool.close()
	if w.d.pool.depth() != 0 {
		t.Fatal("pool not emptied at close")
	}
	w.net.mu.Lock()
	discarded := w.net.discarded
	w.net.mu.Unlock()
	if discarded != 2 {
		t.Fatalf("%d pooled namespaces discarded at close, want 2", discarded)
	}
}

// TestWarmPoolRetries: a pool whose prepare fails keeps trying (backing
// off) and creates still work cold meanwhile.
func TestWarmPoolRetries(t *testing.T) {
	w := newFakeWorld(t, func(c *config.Config) { c.Sandbox.PoolSize = 1 })
	w.exe.failPrepare.Store(true)
	w.d.pool.refill()
	time.Sleep(50 * time.Millisecond)
	w.exe.failPrepare.Store(false)
	poll.Until(t, 10*time.Second, "the pool filled after failures", func() bool { return w.d.pool.depth() == 1 })
}

// TestShutdownDrains: stopping refuses new sandboxes at once, lets running
// execs finish until the deadline, then ends every sandbox.
func TestShutdownDrains(t *testing.T) {
	w := newFakeWorld(t)
	c := w.client(alice)
	sb := c.create(t, `{}`)
	long := c.create(t, `{}`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	short := c.startExec(t, ctx, sb.ID, api.ExecRequest{Argv: []string{"sleep", "0.3"}})
	short.next(t)
	done := make(chan error, 1)
	go func() { done <- w.d.Shutdown(context.Background()) }()
	poll.Until(t, 5*time.Second, "stopping", func() bool { return w.d.stopping.Load() })
	if r := c.json(t, "POST", "/v1/sandboxes", `{}`); r.status != 503 {
		t.Fatalf("create while stopping: %d, want 503", r.status)
	}
	if res := lastResult(t, short.rest(t)); res.ExitStatus != 0 {
		t.Fatalf("the drained exec: %+v, want it to finish", res)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	endRecord(t, w, sb.ID, ReasonDaemonStopped)
	endRecord(t, w, long.ID, ReasonDaemonStopped)

	// Past the deadline: killed.
	w2 := newFakeWorld(t)
	c2 := w2.client(alice)
	sb2 := c2.create(t, `{}`)
	s := c2.startExec(t, ctx, sb2.ID, api.ExecRequest{Argv: []string{"sleep", "60"}})
	s.next(t)
	dctx, dcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer dcancel()
	if err := w2.d.Shutdown(dctx); err == nil || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("shutdown past its deadline: %v, want it to say what it killed", err)
	}
	frames := s.rest(t)
	if last := frames[len(frames)-1]; last.Type != api.FrameError {
		t.Fatalf("the killed exec's last frame %+v", last)
	}
}

// metricValue reads one sample of the daemon's metrics (label: the value of
// the only label, or "").
func (d *Daemon) metricValue(t testing.TB, name, label string) float64 {
	t.Helper()
	mfs, err := d.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != label) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	t.Fatalf("no metric %s{%s}", name, label)
	return 0
}

var _ = httptest.NewRecorder

// TestDeleteTearsDownInBackground: DELETE answers once the sandbox's
// processes are killed and its end is audited, while its namespace is still
// being torn down; meanwhile its id stays taken (never reused before the
// teardown is done), and a graceful stop waits for the teardown.
func TestDeleteTearsDownInBackground(t *testing.T) {
	w := newFakeWorld(t)
	c := w.client(alice)
	sb := c.create(t, `{}`)
	release := w.net.holdTeardowns()
	defer release()
	deleted := make(chan apiResp, 1)
	go func() { deleted <- c.json(t, "DELETE", "/v1/sandboxes/"+sb.ID, "") }()
	select {
	case r := <-deleted:
		if r.status != 200 {
			t.Fatalf("delete: %d %s", r.status, r.body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("DELETE waited for the namespace teardown")
	}
	endRecord(t, w, sb.ID, ReasonDeleted)
	if !w.exe.all()[0].isDestroyed() {
		t.Fatal("DELETE answered before the sandbox's processes were killed")
	}
	if !w.d.reg.taken(sb.ID) {
		t.Fatal("the id of a sandbox under teardown is free for reuse")
	}
	if r := c.json(t, "GET", "/v1/sandboxes/"+sb.ID, ""); r.status != 404 {
		t.Fatalf("inspect after delete: %d, want 404", r.status)
	}
	if n := w.net.tornDown(sb.ID); n != 0 {
		t.Fatalf("namespace torn down %d times while held, want 0", n)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		release()
	}()
	if err := w.d.Shutdown(t.Context()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if n := w.net.tornDown(sb.ID); n != 1 {
		t.Fatalf("after Shutdown: namespace torn down %d times, want 1", n)
	}
	if w.d.reg.taken(sb.ID) {
		t.Fatal("the id is still taken after its teardown")
	}
}

// TestTeardownFailureCounted: a background teardown that fails is logged
// and counted in airlock_sandbox_teardown_failures_total.
func TestTeardownFailureCounted(t *testing.T) {
	w := newFakeWorld(t)
	h := promhttp.HandlerFor(w.d.metrics.reg, promhttp.HandlerOpts{})
	c := w.client(alice)
	sb := c.create(t, `{}`)
	w.net.mu.Lock()
	w.net.tearErr = errors.New("fake: teardown refused")
	w.net.mu.Unlock()
	if r := c.json(t, "DELETE", "/v1/sandboxes/"+sb.ID, ""); r.status != 200 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	w.d.reg.waitTeardowns()
	if got := scrape(t, h, "airlock_sandbox_teardown_failures_total"); got != 1 {
		t.Fatalf("airlock_sandbox_teardown_failures_total = %v, want 1", got)
	}
	if w.d.reg.taken(sb.ID) {
		t.Fatal("a failed teardown keeps the id taken forever")
	}
}

// TestPooledCreateFailureCleansUp: a pooled create starts init while its
// namespace is served; when either fails, the create is refused naming the
// cause, the pooled sandbox is destroyed, its namespace discarded or torn
// down, and nothing is registered.
func TestPooledCreateFailureCleansUp(t *testing.T) {
	for _, tc := range []struct {
		name     string
		breakIt  func(w *fakeWorld)
		want     string
		tornDown int // Teardowns of the failed sandbox's id
	}{
		{"namespace", func(w *fakeWorld) {
			w.net.mu.Lock()
			w.net.createFromErr = testErr("broken namespace")
			w.net.mu.Unlock()
		}, "broken namespace", 0},
		{"start", func(w *fakeWorld) {
			err := error(errStartBroken)
			w.exe.startErr.Store(&err)
		}, "broken start", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newFakeWorld(t, func(c *config.Config) { c.Sandbox.PoolSize = 1 })
			poll.Until(t, 5*time.Second, "the pool filled", func() bool { return w.d.pool.depth() == 1 })
			pooled := w.exe.all()[0]
			tc.breakIt(w)
			r := w.client(alice).json(t, "POST", "/v1/sandboxes", `{}`)
			if r.status != 500 || !strings.Contains(r.apiError(t).Message, tc.want) {
				t.Fatalf("got %d %s, want 500 naming %q", r.status, r.body, tc.want)
			}
			select {
			case <-pooled.done:
			case <-time.After(5 * time.Second):
				t.Fatal("the pooled sandbox of a failed create was not destroyed")
			}
			rec := w.audit.Wait(t, "the failed end record", func(r audit.Record) bool {
				return r.Kind == audit.KindSandbox && audittest.HasReason(r, ReasonFailed)
			})
			if got := w.net.tornDown(rec.Sandbox); got != tc.tornDown {
				t.Errorf("namespace of the failed create torn down %d times, want %d", got, tc.tornDown)
			}
			w.net.mu.Lock()
			discarded := w.net.discarded
			w.net.mu.Unlock()
			if tc.tornDown == 0 && discarded == 0 {
				t.Error("the pooled namespace of a failed create was not discarded")
			}
			if w.d.reg.len() != 0 {
				t.Fatal("a failed sandbox was registered")
			}
		})
	}
}
