package config

// DefaultMetricsListen is where the Prometheus listener binds by default.
const DefaultMetricsListen = "127.0.0.1:9464"

// Metrics is the Prometheus listener, on the host side only.
type Metrics struct {
	Listen string `yaml:"listen"`
}

func (m *Metrics) applyDefaults() {
	if m.Listen == "" {
		m.Listen = DefaultMetricsListen
	}
}
