package export

import "github.com/prometheus/client_golang/prometheus"

var (
	descShipped = prometheus.NewDesc("airlock_audit_export_shipped_total", "Audit records the collector acknowledged.", []string{"sink"}, nil)
	descFailed  = prometheus.NewDesc("airlock_audit_export_failed_total", "Failed attempts to ship a batch or read the log.", []string{"sink"}, nil)
	descGaps    = prometheus.NewDesc("airlock_audit_export_gap_records_total", "Audit records gone (retention) before they were shipped.", []string{"sink"}, nil)
	descLag     = prometheus.NewDesc("airlock_audit_export_lag_records", "Records in the live audit file not yet acknowledged.", []string{"sink"}, nil)
	descLast    = prometheus.NewDesc("airlock_audit_export_last_shipped_seq", "Seq of the last record the collector acknowledged.", []string{"sink"}, nil)
)

// Describe implements prometheus.Collector.
func (s *Shipper) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descShipped, descFailed, descGaps, descLag, descLast} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (s *Shipper) Collect(ch chan<- prometheus.Metric) {
	st := s.Stats()
	ch <- prometheus.MustNewConstMetric(descShipped, prometheus.CounterValue, float64(st.Shipped), s.cfg.Name)
	ch <- prometheus.MustNewConstMetric(descFailed, prometheus.CounterValue, float64(st.Failed), s.cfg.Name)
	ch <- prometheus.MustNewConstMetric(descGaps, prometheus.CounterValue, float64(st.GapRecords), s.cfg.Name)
	ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(st.Lag), s.cfg.Name)
	ch <- prometheus.MustNewConstMetric(descLast, prometheus.GaugeValue, float64(st.LastSeq), s.cfg.Name)
}

var _ prometheus.Collector = (*Shipper)(nil)
