package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-dev/airlock/api"
)

// metrics are the daemon's own: its sandboxes, the pool and the execs.
type metrics struct {
	reg       *prometheus.Registry
	created   prometheus.Counter
	fromPool  prometheus.Counter
	ended     *prometheus.CounterVec
	execStart prometheus.Histogram
	execWall  prometheus.Histogram
	oomKills  prometheus.Counter
	timeouts  prometheus.Counter
	// teardownFailures counts ended sandboxes whose background teardown
	// (executor sandbox, namespace) failed.
	teardownFailures prometheus.Counter
}

// poolBrokenMetric counts the ready pool entries a create found broken
// (init dead, namespace removed or replaced from outside) and dropped.
func poolBrokenMetric(broken func() int64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "airlock_pool_broken_total",
		Help: "Prepared sandboxes of the warm pool found broken when a create took them (init exited, namespace removed or replaced from outside); dropped, the create built its own and the pool refilled."},
		func() float64 { return float64(broken()) })
}

func newMetrics(active, poolDepth func() float64) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		created: prometheus.NewCounter(prometheus.CounterOpts{Name: "airlock_sandboxes_created_total",
			Help: "Sandboxes created through the API (POST /v1/sandboxes and /v1/run)."}),
		fromPool: prometheus.NewCounter(prometheus.CounterOpts{Name: "airlock_sandboxes_from_pool_total",
			Help: "Sandboxes created from a prepared sandbox of the warm pool (the rest were built for their create)."}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "airlock_sandboxes_ended_total",
			Help: "Sandboxes ended, by reason: deleted, idle_timeout, max_lifetime, daemon_stopped, failed."}, []string{"reason"}),
		execStart: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "airlock_exec_start_seconds",
			Help:    "From an exec request to its command running.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1}}),
		execWall: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "airlock_exec_seconds",
			Help:    "Wall time of execs, from start to exit.",
			Buckets: prometheus.ExponentialBuckets(.001, 4, 12)}),
		oomKills: prometheus.NewCounter(prometheus.CounterOpts{Name: "airlock_sandbox_oom_kills_total",
			Help: "Processes the OOM killer ended, counted from each sandbox's cgroup when it ends."}),
		timeouts: prometheus.NewCounter(prometheus.CounterOpts{Name: "airlock_exec_timeouts_total",
			Help: "Execs killed at their timeout."}),
		teardownFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "airlock_sandbox_teardown_failures_total",
			Help: "Ended sandboxes whose background teardown (cgroup, mounts, uid, namespace) failed; the next start's recovery removes what is left."}),
	}
	for _, r := range []string{ReasonDeleted, ReasonIdleTimeout, ReasonMaxLifetime, ReasonDaemonStopped, ReasonFailed} {
		m.ended.WithLabelValues(r)
	}
	m.reg.MustRegister(m.created, m.fromPool, m.ended, m.execStart, m.execWall, m.oomKills, m.timeouts, m.teardownFailures,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "airlock_sandboxes_active", Help: "Sandboxes alive now."}, active),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "airlock_sandbox_pool_depth", Help: "Prepared sandboxes waiting in the warm pool."}, poolDepth))
	return m
}

// inboundMetric counts the inbound connections that attached namespaces in
// inbound accept mode let in (package netns counts them from its NFLOG).
func inboundMetric(accepted func() uint64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "airlock_inbound_connections_accepted_total",
		Help: "TCP connections from the network that attached namespaces in inbound accept mode let in (refused ones are drop records)."},
		func() float64 { return float64(accepted()) })
}

// fdRefusedMetric counts the sandbox connections (gateway, DNS over TCP)
// refused because the process was out of descriptors (package fdreserve).
func fdRefusedMetric(refused func() uint64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "airlock_conns_refused_fd_limit_total",
		Help: "Sandbox connections to the gateway or the DNS filter refused at accept because the daemon had no descriptor left."},
		func() float64 { return float64(refused()) })
}

// execDone counts an exec's end.
func (m *metrics) execDone(r *api.ExecResult) {
	m.execWall.Observe(r.WallMS / 1e3)
	if r.TimedOut {
		m.timeouts.Inc()
	}
}
