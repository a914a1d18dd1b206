package sandboxd

import (
	"context"
	"sort"
	"testing"
	"time"
)

// BenchmarkCreateToExec measures Run called -> command execve'd (cold: a fresh
// slot, init and exec stage every time; the pool only pre-makes cgroup+uid) and the
// whole Run of /bin/true. Reports p50/p95 of create-to-exec.
func BenchmarkCreateToExec(b *testing.B) {
	e, _ := newTestExecutor(b, nil)
	var starts []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := e.Run(context.Background(), Spec{Argv: []string{"/bin/true"}})
		if err != nil {
			b.Fatal(err)
		}
		starts = append(starts, res.StartLatency)
	}
	b.StopTimer()
	sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
	b.ReportMetric(float64(starts[len(starts)/2].Microseconds())/1000, "p50-create-to-exec-ms")
	b.ReportMetric(float64(starts[len(starts)*95/100].Microseconds())/1000, "p95-create-to-exec-ms")
}
