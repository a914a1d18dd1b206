package audit

import (
	"path/filepath"
	"testing"
	"time"
)

func benchRecord() *Record {
	return &Record{
		ID: "", Sandbox: "sb-1", Kind: KindHTTP, Decision: DecisionAllow, Mode: "enforce",
		Reasons:   []Reason{{ID: "preset_python", Msg: "pypi.org is in preset python"}},
		PolicyRev: "3f2a9c", Host: "files.pythonhosted.org", Port: 443, IP: "198.18.0.7",
		Method: "GET", Path: "/packages/ab/cd/requests-2.32.3-py3-none-any.whl",
		Status: 200, BytesUp: 612, BytesDown: 64512, DurationMS: 12.5,
	}
}

// BenchmarkWriterAppend measures Log throughput with the chain and signed
// checkpoints (every 1000 records) on, writes buffered (fsync on the 1s
// interval). records/s is the figure to compare with the 200k/s target.
func BenchmarkWriterAppend(b *testing.B) {
	dir := b.TempDir()
	w, err := New(Config{
		File:           filepath.Join(dir, "audit.jsonl"),
		SigningKeyFile: filepath.Join(dir, "audit.key"),
		MaxSize:        1 << 40,
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	r := benchRecord()
	b.ReportAllocs()
	start := time.Now()
	b.ResetTimer()
	for range b.N {
		if err := w.Log(r); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkWriterAppendParallel is the same with every P logging at once.
func BenchmarkWriterAppendParallel(b *testing.B) {
	dir := b.TempDir()
	w, err := New(Config{
		File:           filepath.Join(dir, "audit.jsonl"),
		SigningKeyFile: filepath.Join(dir, "audit.key"),
		MaxSize:        1 << 40,
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := benchRecord()
		for pb.Next() {
			if err := w.Log(r); err != nil {
				b.Error(err)
				return
			}
		}
	})
	if err := w.Sync(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
	w.Close()
}

// BenchmarkAppendJSON is the encoder alone.
func BenchmarkAppendJSON(b *testing.B) {
	r := benchRecord()
	r.TS = time.Now().UTC()
	r.Prev = GenesisPrev
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for range b.N {
		buf = AppendJSON(buf[:0], r)
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkVerify measures verification speed over a signed chain.
func BenchmarkVerify(b *testing.B) {
	dir := b.TempDir()
	cfg := Config{File: filepath.Join(dir, "a.jsonl"), SigningKeyFile: filepath.Join(dir, "k")}
	w, err := New(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	for range 10000 {
		w.Log(benchRecord())
	}
	w.Close()
	pub := w.PublicKey()
	b.ResetTimer()
	for range b.N {
		rep, err := VerifyFiles(VerifyOptions{PublicKey: pub}, cfg.File)
		if err != nil || rep.Records != 10000 {
			b.Fatal(rep, err)
		}
	}
	b.ReportMetric(float64(10000*b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkReserveLog is a reserved record through the chain the daemon
// builds for the gateway (Budget, Tally, Writer): Reserve, then Log.
func BenchmarkReserveLog(b *testing.B) {
	dir := b.TempDir()
	w, err := New(Config{
		File:           filepath.Join(dir, "audit.jsonl"),
		SigningKeyFile: filepath.Join(dir, "audit.key"),
		MaxSize:        1 << 40,
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	bu, err := NewBudget(BudgetConfig{}, Observe(w, NewTally()), nil)
	if err != nil {
		b.Fatal(err)
	}
	r := benchRecord()
	b.ReportAllocs()
	start := time.Now()
	b.ResetTimer()
	for range b.N {
		res, err := bu.Reserve()
		if err != nil {
			b.Fatal(err)
		}
		if err := res.Log(r); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
	bu.Close()
	w.Close()
}

// nopLogger accepts every record.
type nopLogger struct{}

func (nopLogger) Log(*Record) error { return nil }

// BenchmarkTapLog is what a Tap adds to each Log, in parallel: with no
// subscriber, with one for another sandbox, and with one for the record's
// sandbox that reads everything.
func BenchmarkTapLog(b *testing.B) {
	for _, tc := range []struct {
		name string
		sub  string
	}{{"none", ""}, {"other-sandbox", "sb-2"}, {"same-sandbox", "sb-1"}} {
		b.Run(tc.name, func(b *testing.B) {
			tap := NewTap()
			lg := Observe(nopLogger{}, tap)
			if tc.sub != "" {
				s := tap.Subscribe(tc.sub, 1024)
				done := make(chan struct{})
				go func() {
					defer close(done)
					for range s.C() {
					}
				}()
				defer func() { s.Close(); <-done }()
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := benchRecord()
				for pb.Next() {
					if err := lg.Log(r); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
