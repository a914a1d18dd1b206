package report_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/report"
	"github.com/airlock-dev/airlock/audit/report/reporttest"
)

// envLarge gates the million-record run: the number of records (1000000 for
// the bar below). It is not part of the unit run.
const envLarge = "AIRLOCK_REPORT_LARGE"

// The bars a log of 1,000,000 records must stay under.
const (
	largeMaxBytes = 5 << 20
	largeMaxTime  = 30 * time.Second
)

// TestReportLargeLog renders the report of a generated log of
// $AIRLOCK_REPORT_LARGE records (signed, verified with the key) and checks the
// page stays under 5 MB and, for 1,000,000 records, under 30 s. Run:
// AIRLOCK_REPORT_LARGE=1000000 go test -run TestReportLargeLog -v ./audit/report/
func TestReportLargeLog(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(envLarge))
	if n <= 0 {
		t.Skipf("set %s=1000000 to render a million-record log", envLarge)
	}
	dir := t.TempDir()
	start := time.Now()
	fx := reporttest.WriteLarge(t, dir, n)
	st, err := os.Stat(fx.Log)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d records (%d MB) in %s", n, st.Size()>>20, time.Since(start).Round(time.Millisecond))
	pemBytes, err := os.ReadFile(fx.PubKey)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := audit.ParsePublicKey(pemBytes)
	if err != nil {
		t.Fatal(err)
	}

	start = time.Now()
	rep, err := report.Build(context.Background(), report.Config{Files: []string{fx.Log}, PublicKey: pub})
	if err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(dir, "report.html")
	f, err := os.Create(page)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteHTML(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	pst, err := os.Stat(page)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report of %d records: %s, %d bytes (%d cells, %d timeline rows of %ds buckets); verified %v, signatures %v",
		rep.Scope.Records, took.Round(time.Millisecond), pst.Size(), len(rep.Cells.Rows), len(rep.Timeline.Rows), rep.Timeline.BucketSeconds,
		rep.Verification.OK, rep.Verification.SignaturesChecked)
	if !rep.Verification.OK || int(rep.Scope.Records) != n {
		t.Errorf("got verification %+v and %d records, want ok and %d", rep.Verification, rep.Scope.Records, n)
	}
	if pst.Size() >= largeMaxBytes {
		t.Errorf("report is %d bytes, want under %d", pst.Size(), largeMaxBytes)
	}
	if took >= largeMaxTime {
		t.Errorf("report took %s, want under %s", took, largeMaxTime)
	}
}

// envBenchRecords sets BenchmarkReportBuild's log size (default 100000).
const envBenchRecords = "AIRLOCK_REPORT_BENCH_RECORDS"

// BenchmarkReportBuild measures Build and WriteHTML over a generated signed
// log (verified with the key): records/s, the page's size, and the ratio to
// audit.VerifyFiles alone over the same log in the same run (the report's
// cost over the verification it includes).
func BenchmarkReportBuild(b *testing.B) {
	n, _ := strconv.Atoi(os.Getenv(envBenchRecords))
	if n <= 0 {
		n = 100000
	}
	dir := b.TempDir()
	fx := reporttest.WriteLarge(b, dir, n)
	pemBytes, err := os.ReadFile(fx.PubKey)
	if err != nil {
		b.Fatal(err)
	}
	pub, err := audit.ParsePublicKey(pemBytes)
	if err != nil {
		b.Fatal(err)
	}
	var size int
	var verify time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		vstart := time.Now()
		if _, err := audit.VerifyFiles(audit.VerifyOptions{PublicKey: pub}, fx.Log); err != nil {
			b.Fatal(err)
		}
		verify += time.Since(vstart)
		b.StartTimer()
		rep, err := report.Build(context.Background(), report.Config{Files: []string{fx.Log}, PublicKey: pub})
		if err != nil {
			b.Fatal(err)
		}
		var cw countWriter
		if err := rep.WriteHTML(&cw); err != nil {
			b.Fatal(err)
		}
		size = int(cw)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(size), "page-bytes")
	b.ReportMetric(b.Elapsed().Seconds()/verify.Seconds(), "x-verify")
}

type countWriter int

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
}
