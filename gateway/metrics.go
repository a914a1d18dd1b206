package gateway

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// metrics are registered on the gateway's own registry, never the global one.
type metrics struct {
	reg            *prometheus.Registry
	decisions      *prometheus.CounterVec
	decisionsFast  map[[2]string]prometheus.Counter
	tunnelBytes    *prometheus.CounterVec
	bytesUp        prometheus.Counter
	bytesDown      prometheus.Counter
	upstreamErrors *prometheus.CounterVec
	policyEval     prometheus.Histogram
	activeConns    prometheus.Gauge
	activeTunnels  prometheus.Gauge
	leafMints      prometheus.Counter
}

var metricKinds = []policy.Kind{policy.KindHTTP, policy.KindConnect, policy.KindTLS, policy.KindTCP}
var metricResults = []string{audit.DecisionAllow, audit.DecisionDeny, audit.DecisionError}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "airlock", Subsystem: "gateway", Name: "decisions_total",
		Help: "Requests, tunnels and connections decided, by kind and result.",
	}, []string{"kind", "result"})
	m.tunnelBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "airlock", Subsystem: "gateway", Name: "tunnel_bytes_total",
		Help: "Bytes relayed through tunnels, by direction (up = sandbox to upstream).",
	}, []string{"direction"})
	m.upstreamErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "airlock", Subsystem: "gateway", Name: "upstream_errors_total",
		Help: "Upstream failures after allow, by reason.",
	}, []string{"reason"})
	m.policyEval = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "airlock", Subsystem: "gateway", Name: "policy_eval_seconds",
		Help:    "Time spent in policy.Decide per decision.",
		Buckets: []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 50e-3, 0.25, 1},
	})
	m.activeConns = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "airlock", Subsystem: "gateway", Name: "active_connections",
		Help: "Client connections open.",
	})
	m.activeTunnels = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "airlock", Subsystem: "gateway", Name: "active_tunnels",
		Help: "Tunnels open.",
	})
	m.leafMints = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "airlock", Subsystem: "gateway", Name: "leaf_certificates_minted_total",
		Help: "Interception leaf certificates minted.",
	})
	m.reg.MustRegister(m.decisions, m.tunnelBytes, m.upstreamErrors, m.policyEval, m.activeConns, m.activeTunnels, m.leafMints)
	m.decisionsFast = make(map[[2]string]prometheus.Counter)
	for _, k := range metricKinds {
		for _, r := range metricResults {
			m.decisionsFast[[2]string{string(k), r}] = m.decisions.WithLabelValues(string(k), r)
		}
	}
	m.bytesUp = m.tunnelBytes.WithLabelValues("up")
	m.bytesDown = m.tunnelBytes.WithLabelValues("down")
	return m
}

func (m *metrics) decided(kind policy.Kind, result string) {
	if c, ok := m.decisionsFast[[2]string{string(kind), result}]; ok {
		c.Inc()
		return
	}
	m.decisions.WithLabelValues(string(kind), result).Inc()
}

// MetricsHandler serves the gateway's Prometheus metrics. Mount it on a listener
// no sandbox can reach (the host side, never inside a sandbox namespace).
func (g *Gateway) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(g.metrics.reg, promhttp.HandlerOpts{})
}

// Registry is the gateway's own metrics registry, for a caller that serves it
// together with other parts' (prometheus.Gatherers).
func (g *Gateway) Registry() *prometheus.Registry { return g.metrics.reg }
