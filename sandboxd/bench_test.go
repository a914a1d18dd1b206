package sandboxd

import (
	"context"
	"sort"
	"testing"
	"time"
)

// BenchmarkCreateToExec measures Run called -> command execve'd (cold: a fresh
// slot and init every time; the pool only pre-makes cgroup+uid) and the
// whole Run of /bin/true. Reports p50/p95 of create-to-exec, without and with an
// idmapped workspace (whose user namespace helper is the extra cost).
func BenchmarkCreateToExec(b *testing.B) {
	e, _ := newTestExecutor(b, nil)
	ws := b.TempDir() // under /tmp on the host; init clones it before covering /tmp
	for _, bc := range []struct {
		name string
		spec Spec
	}{
		{"plain", Spec{Argv: []string{"/bin/true"}}},
		{"workspace", Spec{Argv: []string{"/bin/true"}, Workspace: ws}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var starts []time.Duration
			for i := 0; i < b.N; i++ {
				res, err := e.Run(context.Background(), bc.spec)
				if err != nil {
					b.Fatal(err)
				}
				starts = append(starts, res.StartLatency)
			}
			b.StopTimer()
			sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
			b.ReportMetric(float64(starts[len(starts)/2].Microseconds())/1000, "p50-create-to-exec-ms")
			b.ReportMetric(float64(starts[len(starts)*95/100].Microseconds())/1000, "p95-create-to-exec-ms")
		})
	}
}
