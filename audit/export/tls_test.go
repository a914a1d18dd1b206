package export

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit/export/exporttest"
)

// TestExportRefusesUntrustedCollector: a TLS collector whose certificate the
// sink does not trust (no CA file: the system's roots; or the wrong name)
// gets no record: the handshake fails before a byte of the log is sent.
func TestExportRefusesUntrustedCollector(t *testing.T) {
	tests := []struct {
		name    string
		rc      func(t *testing.T) exporttest.Receiver
		tls     func(rc exporttest.Receiver) TLS
		wantErr string
	}{
		{name: "syslog tls, system roots", rc: func(t *testing.T) exporttest.Receiver { return exporttest.NewSyslog(t, true) },
			tls: func(exporttest.Receiver) TLS { return TLS{} }, wantErr: "certificate"},
		{name: "syslog tls, wrong name", rc: func(t *testing.T) exporttest.Receiver { return exporttest.NewSyslog(t, true) },
			tls: func(rc exporttest.Receiver) TLS { return TLS{CAFile: rc.CAFile(), ServerName: "other.example"} }, wantErr: "certificate"},
		{name: "otlp https, system roots", rc: func(t *testing.T) exporttest.Receiver { return exporttest.NewOTLPHTTPS(t) },
			tls: func(exporttest.Receiver) TLS { return TLS{} }, wantErr: "certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newTestLog(t, 0)
			l.write(5)
			rc := tt.rc(t)
			endpoint := rc.Endpoint()
			format := FormatSyslog
			if strings.HasPrefix(endpoint, "https://") {
				format = FormatOTLP
			}
			cfg := Config{Format: format, Endpoint: endpoint, TLS: tt.tls(rc), MaxAttempts: 2, BackoffMin: time.Millisecond, BackoffMax: time.Millisecond}
			sink, err := NewSink(context.Background(), cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer sink.Close()
			s, err := New(cfg, ReadOptions{Live: l.cfg.File}, sink, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = s.Run(context.Background())
			if !errors.Is(err, errGaveUp) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, want the batch refused for the %s", err, tt.wantErr)
			}
			if got := rc.Got().Lines(); len(got) != 0 {
				t.Fatalf("untrusted collector got %d records, want 0", len(got))
			}
		})
	}
}
