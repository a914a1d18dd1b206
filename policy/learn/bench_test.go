package learn

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// writeBigLog writes n decision records over 2,000 destinations and paths
// (a log repeats itself: agents fetch the same things again), every tenth a
// tunnel's close record.
func writeBigLog(b *testing.B, n int) string {
	b.Helper()
	p := filepath.Join(b.TempDir(), "big.jsonl")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var line []byte
	for i := 0; i < n; i++ {
		r := audit.Record{Seq: uint64(i + 1), ID: fmt.Sprint(i), Sandbox: "sb-1", Mode: "report", PolicyRev: "x",
			Kind: audit.KindHTTP, Host: fmt.Sprintf("h%d.corp.example", i%200), Port: 443, Method: "GET",
			Path: fmt.Sprintf("/p/%d", i%10), Decision: audit.DecisionDeny, Reasons: []audit.Reason{{ID: "default_deny"}}}
		switch {
		case i%10 == 9:
			r = audit.Record{Seq: uint64(i + 1), Kind: audit.KindClose, Host: r.Host, Port: 443}
		case i%10 == 8:
			r.Kind, r.Method, r.Path, r.Host = audit.KindDNS, "", "", fmt.Sprintf("h%d.pypi.org", i%200)
			r.QName, r.QType, r.Port = r.Host, "A", 53
		}
		line, _ = json.Marshal(&r)
		if _, err := f.Write(append(line, '\n')); err != nil {
			b.Fatal(err)
		}
	}
	return p
}

// BenchmarkReplay100k replays a 100,000-record log against the default
// policy and reports records per second.
func BenchmarkReplay100k(b *testing.B) {
	const n = 100_000
	log := writeBigLog(b, n)
	e, err := NewEngine("")
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		rep, err := Replay(context.Background(), []string{log}, ReplayConfig{New: e})
		if err != nil {
			b.Fatal(err)
		}
		if rep.Records != n {
			b.Fatalf("got %d records, want %d", rep.Records, n)
		}
	}
	b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "records/s")
}
