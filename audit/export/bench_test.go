package export

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/airlock-dev/airlock/audit"
)

// benchLog writes n records into one file (no rotation) and returns it.
func benchLog(b *testing.B, n int) string {
	b.Helper()
	dir := b.TempDir()
	l := &testLog{t: b, cfg: audit.Config{File: filepath.Join(dir, "audit.jsonl"), SigningKeyFile: filepath.Join(dir, "audit.key"), MaxSize: 1 << 30}}
	w, err := audit.New(l.cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	l.w = w
	l.write(n)
	l.close()
	return l.cfg.File
}

// BenchmarkExportEncode is the exporter's own cost per record, without a
// collector: reading and decoding the chain, and each format's encoding.
func BenchmarkExportEncode(b *testing.B) {
	const n = 10000
	file := benchLog(b, n)
	sys := &syslogSink{host: "gw"}
	otlp := func(e *Event) { _ = fields(e) }
	for _, bc := range []struct {
		name string
		enc  func(e *Event)
	}{
		{"read", func(e *Event) {}},
		{"jsonl", func(e *Event) { io.Discard.Write(e.Line) }},
		{"ocsf", func(e *Event) { io.Discard.Write(ocsfEvent(e, "bench")) }},
		{"syslog", func(e *Event) { io.Discard.Write(sys.message(e)) }},
		{"otlp-fields", otlp},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				got := 0
				err := Read(context.Background(), ReadOptions{Live: file}, Position{}, nil, func(e Event) error {
					bc.enc(&e)
					got++
					return nil
				})
				if err != nil || got < n {
					b.Fatalf("read %d records: %v", got, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
		})
	}
}
