package sandboxd

import (
	"context"
	"os/exec"
	"sort"
	"testing"
	"time"
)

// Latency benchmarks. Each reports p50 and p99 (ms) of its own per-operation
// timings; where a direct comparison makes sense it also measures the same
// thing without a sandbox in the same run and reports the ratio of p50s.

func quantiles(b *testing.B, ds []time.Duration, unit string) time.Duration {
	b.Helper()
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	p50, p99 := ds[len(ds)/2], ds[len(ds)*99/100]
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-"+unit+"-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-"+unit+"-ms")
	return p50
}

// BenchmarkExec: Exec of /bin/true in an existing sandbox, until Wait
// returns, against fork+exec+wait of /bin/true on the host (os/exec).
func BenchmarkExec(b *testing.B) {
	e, _ := newTestExecutor(b, nil)
	s, err := e.Create(context.Background(), PrepareSpec{}, StartSpec{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = s.Destroy(context.Background()) })
	run := func() {
		p, err := s.Exec(context.Background(), ExecSpec{Argv: []string{"/bin/true"}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	run()
	var in, direct []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		run()
		in = append(in, time.Since(t0))
		t0 = time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		direct = append(direct, time.Since(t0))
	}
	b.StopTimer()
	p50 := quantiles(b, in, "exec")
	d50 := quantiles(b, direct, "direct")
	b.ReportMetric(float64(p50)/float64(d50), "p50-ratio-vs-direct")
}

// BenchmarkStartExecDestroy: what the daemon does for a request on a warm
// pool: Start a prepared sandbox, Exec /bin/true and Wait, Destroy. Prepare
// is outside the timings (the pool did it earlier). With a host workspace the
// executor also clones and idmaps it. The machine's speed is measured in the
// same run: fork+exec+wait of /bin/true on the host.
func BenchmarkStartExecDestroy(b *testing.B) {
	e, _ := newTestExecutor(b, nil)
	ws := hostDir(b, 0o755)
	for _, bc := range []struct {
		name string
		ss   StartSpec
	}{{"tmpfs-workspace", StartSpec{}}, {"host-workspace", StartSpec{Workspace: ws}}} {
		b.Run(bc.name, func(b *testing.B) {
			var ds, direct []time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				s, err := e.Prepare(context.Background(), PrepareSpec{})
				if err != nil {
					b.Fatal(err)
				}
				waitPoolFull(e)
				t0 := time.Now()
				if err := exec.Command("/bin/true").Run(); err != nil {
					b.Fatal(err)
				}
				direct = append(direct, time.Since(t0))
				b.StartTimer()
				t0 = time.Now()
				if err := s.Start(context.Background(), bc.ss); err != nil {
					b.Fatal(err)
				}
				p, err := s.Exec(context.Background(), ExecSpec{Argv: []string{"/bin/true"}})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := p.Wait(); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Destroy(context.Background()); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(t0))
			}
			b.StopTimer()
			p50 := quantiles(b, ds, "start-exec-destroy")
			d50 := quantiles(b, direct, "direct-exec")
			b.ReportMetric(float64(p50)/float64(d50), "p50-ratio-vs-direct-exec")
		})
	}
}

// waitPoolFull waits (up to a second) until the slot pool has refilled, so
// a timed section does not race the refill's cgroup mkdirs.
func waitPoolFull(e *Executor) {
	for i := 0; i < 1000 && len(e.pool.idle) < cap(e.pool.idle); i++ {
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkPrepare: Prepare alone (spawn init, build the view, join the
// cgroup); the Destroy after it is not timed.
func BenchmarkPrepare(b *testing.B) {
	e, _ := newTestExecutor(b, nil)
	var ds []time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		waitPoolFull(e)
		b.StartTimer()
		t0 := time.Now()
		s, err := e.Prepare(context.Background(), PrepareSpec{})
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
		b.StopTimer()
		if _, err := s.Destroy(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	quantiles(b, ds, "prepare")
}

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
			var starts, runs []time.Duration
			for i := 0; i < b.N; i++ {
				res, err := e.Run(context.Background(), bc.spec)
				if err != nil {
					b.Fatal(err)
				}
				starts = append(starts, res.StartLatency)
				runs = append(runs, res.Wall)
			}
			b.StopTimer()
			sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
			b.ReportMetric(float64(starts[len(starts)/2].Microseconds())/1000, "p50-create-to-exec-ms")
			b.ReportMetric(float64(starts[len(starts)*95/100].Microseconds())/1000, "p95-create-to-exec-ms")
			quantiles(b, runs, "run")
		})
	}
}

// BenchmarkFirstExec splits what the daemon's pooled create + exec does at
// the executor: Start of a prepared sandbox that waited idle (as a pooled
// one does), its first Exec of /bin/true until Wait returns, a second one,
// and Destroy. Each step's p50 is reported, with fork+exec+wait of
// /bin/true on the host in the same iterations.
func BenchmarkFirstExec(b *testing.B) {
	e, _ := newTestExecutor(b, nil)
	run := func(s *Sandbox) {
		p, err := s.Exec(context.Background(), ExecSpec{Argv: []string{"/bin/true"}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	var start, first, second, destroy, direct []time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s, err := e.Prepare(context.Background(), PrepareSpec{})
		if err != nil {
			b.Fatal(err)
		}
		waitPoolFull(e)
		time.Sleep(20 * time.Millisecond) // idle, as in a pool
		t0 := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		direct = append(direct, time.Since(t0))
		b.StartTimer()
		t0 = time.Now()
		if err := s.Start(context.Background(), StartSpec{}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		run(s)
		t2 := time.Now()
		run(s)
		t3 := time.Now()
		if _, err := s.Destroy(context.Background()); err != nil {
			b.Fatal(err)
		}
		t4 := time.Now()
		start, first, second, destroy = append(start, t1.Sub(t0)), append(first, t2.Sub(t1)), append(second, t3.Sub(t2)), append(destroy, t4.Sub(t3))
	}
	b.StopTimer()
	quantiles(b, start, "start")
	quantiles(b, first, "first-exec")
	quantiles(b, second, "second-exec")
	quantiles(b, destroy, "destroy")
	quantiles(b, direct, "direct")
}
