package netns

import (
	"context"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/identity"
	"github.com/airlock-dev/airlock/netns/netnstest"
	"github.com/airlock-dev/airlock/test/roottest"
)

// BenchmarkCreate measures Create (namespace, lo, sysctls, rules, listeners,
// NFLOG socket, Serve on a stub server) cold and from a pool, and reports p50 and
// p90 in milliseconds, and the CPU the process and its children spent per
// Create. Teardown is outside the timed part. cold-restore runs
// iptables-restore for every island (no template, as with iptables-nft). Run
// with a small -benchtime such as 100x.
func BenchmarkCreate(b *testing.B) {
	roottest.Require(b)
	for _, bc := range []struct {
		name     string
		pool     int
		iptables string
		restore  bool // every island from iptables-restore
	}{{"cold", 0, IPTablesAuto, false}, {"cold-restore", 0, IPTablesAuto, true}, {"pool", 4, IPTablesAuto, false}, {"cold-nft", 0, IPTablesNFT, false}} {
		b.Run(bc.name, func(b *testing.B) {
			m, err := New(Config{PoolSize: bc.pool, StateDir: b.TempDir(), IPTables: bc.iptables}, testServerStub{}, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer teardownAll(context.Background(), m)
			if bc.restore {
				m.ipt = restoreEach{m.ipt}
			}
			durs := make([]time.Duration, 0, b.N)
			var cpu time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				if bc.pool > 0 {
					deadline := time.Now().Add(10 * time.Second)
					for poolReady(m) == 0 && time.Now().Before(deadline) {
						time.Sleep(time.Millisecond)
					}
				}
				id := netnstest.SandboxID("bench")
				b.StartTimer()
				start, cpu0 := time.Now(), cpuTime(b)
				s, err := m.Create(context.Background(), identity.Sandbox{ID: id})
				d := time.Since(start)
				cpu += cpuTime(b) - cpu0
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				durs = append(durs, d)
				if err := m.Teardown(context.Background(), s.ID); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			slices.Sort(durs)
			b.ReportMetric(float64(durs[len(durs)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(durs[len(durs)*9/10].Microseconds())/1000, "p90-ms")
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(len(durs)), "cpu-ms/op")
		})
	}
}

// restoreEach is the real runner behind another type, so islandRules finds
// no template to load and runs iptables-restore for each island.
type restoreEach struct{ iptablesRunner }

// cpuTime is the user and system time of this process and its reaped
// children.
func cpuTime(b *testing.B) time.Duration {
	var total time.Duration
	for _, who := range []int{unix.RUSAGE_SELF, unix.RUSAGE_CHILDREN} {
		var ru unix.Rusage
		if err := unix.Getrusage(who, &ru); err != nil {
			b.Fatal(err)
		}
		total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return total
}

// BenchmarkTeardown measures Teardown of a served island namespace.
func BenchmarkTeardown(b *testing.B) {
	roottest.Require(b)
	m, err := New(Config{StateDir: b.TempDir()}, testServerStub{}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer teardownAll(context.Background(), m)
	durs := make([]time.Duration, 0, b.N)
	for range b.N {
		b.StopTimer()
		s, err := m.Create(context.Background(), identity.Sandbox{ID: netnstest.SandboxID("bench")})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		err = m.Teardown(context.Background(), s.ID)
		durs = append(durs, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	slices.Sort(durs)
	b.ReportMetric(float64(durs[len(durs)/2].Microseconds())/1000, "p50-ms")
}
