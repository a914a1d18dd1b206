package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/test/poll"
	"github.com/airlock-dev/airlock/test/servetest"
)

// Bounds of the daemon benchmarks.
const (
	poolSize     = 2
	lifecycleCap = 200 // create+exec+delete at most this many times
	execCap      = 1000
	fleetSize    = 50
	fleetFor     = 30 * time.Second
	fleetExecCap = 5000 // per sandbox, whatever the machine's speed
	// loopIterations bounds BenchmarkSandboxLoop: each client creates,
	// execs and deletes this many sandboxes back to back.
	loopIterations = 500
	loopFor        = 5 * time.Minute
)

// serve starts `airlock serve` with the fixture's policy, a warm pool of
// poolSize and room for the fleet, in a fresh run directory.
func (f *fixture) serve(b *testing.B) *servetest.Daemon {
	b.Helper()
	dir, err := os.MkdirTemp("", "alk-bench-serve-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	base, err := os.ReadFile(f.config)
	if err != nil {
		b.Fatal(err)
	}
	cfg := filepath.Join(dir, "serve.yaml")
	extra := fmt.Sprintf("api: {group: \"\"}\nmetrics: {listen: \"127.0.0.1:0\"}\nsandbox: {pool_size: %d, max_sandboxes: %d, max_sandboxes_per_owner: %d}\n",
		poolSize, fleetSize+16, fleetSize+16)
	if err := os.WriteFile(cfg, append(base, extra...), 0o600); err != nil {
		b.Fatal(err)
	}
	d := servetest.Start(b, f.bin, cfg, filepath.Join(dir, "api.sock"), filepath.Join(dir, "run"))
	b.Cleanup(func() {
		if code := d.Stop(syscall.SIGTERM); code != 0 {
			b.Errorf("serve exit %d\n%s", code, d.Output())
		}
	})
	return d
}

// waitPool waits until the daemon's warm pool is full again.
func waitPool(b *testing.B, c *client.Client) {
	b.Helper()
	ok := poll.Within(time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h, err := c.Health(ctx)
		return err == nil && h.PoolDepth >= poolSize
	})
	if !ok {
		b.Fatalf("the warm pool did not refill to %d within a minute", poolSize)
	}
}

// directTrue is fork+exec+wait of /bin/true on the host, n times, in ms.
func directTrue(b *testing.B, n int) []float64 {
	b.Helper()
	var d []float64
	for range n {
		t0 := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		d = append(d, ms(time.Since(t0)))
	}
	return d
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// execTrue runs /bin/true in sandbox id and fails b unless it exits 0.
func execTrue(ctx context.Context, c *client.Client, id string) error {
	res, err := c.Exec(ctx, id, api.ExecRequest{Argv: []string{"/bin/true"}}, client.ExecIO{})
	if err != nil {
		return err
	}
	if res.ExitStatus != 0 {
		return fmt.Errorf("/bin/true: exit status %d (%s)", res.ExitStatus, res.Error)
	}
	return nil
}

// reportLatency reports p50, p90 and p99 of got (ms) as name-pXX-ms, and the
// p50 ratio against direct's p50.
func reportLatency(b *testing.B, name string, got, direct []float64) {
	b.ReportMetric(percentile(got, 0.5), name+"-p50-ms")
	b.ReportMetric(percentile(got, 0.9), name+"-p90-ms")
	b.ReportMetric(percentile(got, 0.99), name+"-p99-ms")
	if dp50 := percentile(direct, 0.5); dp50 > 0 {
		b.ReportMetric(dp50, "direct-p50-ms")
		b.ReportMetric(percentile(got, 0.5)/dp50, name+"/direct")
	}
}

// BenchmarkSandboxLifecycle: through the daemon's API from a full warm pool,
// create a sandbox, exec /bin/true in it and delete it (what an agent
// platform does for a one-off command), against fork+exec of /bin/true on
// the host. The pool is refilled, untimed, between iterations.
func BenchmarkSandboxLifecycle(b *testing.B) {
	f := setup(b)
	d := f.serve(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var got, create, execd, del []float64
	b.ResetTimer()
	for i := 0; i < b.N && i < lifecycleCap; i++ {
		b.StopTimer()
		waitPool(b, d.C)
		b.StartTimer()
		t0 := time.Now()
		sb, err := d.C.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := execTrue(ctx, d.C, sb.ID); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := d.C.DeleteSandbox(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		got = append(got, ms(t3.Sub(t0)))
		create, execd, del = append(create, ms(t1.Sub(t0))), append(execd, ms(t2.Sub(t1))), append(del, ms(t3.Sub(t2)))
	}
	b.StopTimer()
	reportLatency(b, "create-exec-delete", got, directTrue(b, len(got)))
	// Where it goes: each step's p50.
	b.ReportMetric(percentile(create, 0.5), "create-p50-ms")
	b.ReportMetric(percentile(execd, 0.5), "first-exec-p50-ms")
	b.ReportMetric(percentile(del, 0.5), "delete-p50-ms")
}

// BenchmarkSandboxLoop: create, exec /bin/true, delete in a tight loop
// through the API, loopIterations times per client, from 1 and from 8
// clients at once: the pool is never waited for, so it has to keep up (or
// size itself up) while the loop runs. Each iteration is one latency; the
// first create finds the pool the daemon filled at start.
func BenchmarkSandboxLoop(b *testing.B) {
	for _, clients := range []int{1, 8} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			f := setup(b)
			d := f.serve(b)
			waitPool(b, d.C)
			ctx, cancel := context.WithTimeout(context.Background(), loopFor)
			defer cancel()
			var (
				mu   sync.Mutex
				lat  []float64
				errs []error
				wg   sync.WaitGroup
			)
			per := loopIterations / clients
			self0, kids0 := procCPU(b, d.PID())
			b.ResetTimer()
			t0 := time.Now()
			for c := 0; c < clients; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var mine []float64
					for n := 0; n < per && ctx.Err() == nil; n++ {
						s := time.Now()
						sb, err := d.C.CreateSandbox(ctx, api.CreateSandboxRequest{})
						if err == nil {
							err = execTrue(ctx, d.C, sb.ID)
							if _, derr := d.C.DeleteSandbox(ctx, sb.ID); err == nil {
								err = derr
							}
						}
						if err != nil {
							mu.Lock()
							errs = append(errs, err)
							mu.Unlock()
							return
						}
						mine = append(mine, ms(time.Since(s)))
					}
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
				}()
			}
			wg.Wait()
			elapsed := time.Since(t0)
			b.StopTimer()
			if len(errs) > 0 {
				b.Fatalf("%d of %d clients failed; first: %v", len(errs), clients, errs[0])
			}
			self1, kids1 := procCPU(b, d.PID())
			reportLatency(b, "create-exec-delete", lat, directTrue(b, 50))
			b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "sandboxes/s")
			b.ReportMetric(float64(len(lat)), "iterations")
			// Where the machine's time goes per sandbox: the daemon's own CPU
			// and its reaped children's (inits with their jobs, iptables).
			b.ReportMetric(ms(self1-self0)/float64(len(lat)), "daemon-cpu-ms/sandbox")
			b.ReportMetric(ms(kids1-kids0)/float64(len(lat)), "children-cpu-ms/sandbox")
			// The depth the pool refills to after the loop: what it sized
			// itself to (pool.max bounds it), once it stops growing.
			depth, same := 0, 0
			for t := 0; t < 100 && same < 5; t++ {
				time.Sleep(100 * time.Millisecond)
				h, err := d.C.Health(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				if h.PoolDepth == depth {
					same++
				} else {
					depth, same = h.PoolDepth, 0
				}
			}
			b.ReportMetric(float64(depth), "pool-depth-after")
		})
	}
}

// BenchmarkSandboxExec: exec /bin/true in one existing sandbox through the
// API (streamed frames, result with usage), against fork+exec on the host.
func BenchmarkSandboxExec(b *testing.B) {
	f := setup(b)
	d := f.serve(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sb, err := d.C.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		b.Fatal(err)
	}
	var got []float64
	b.ResetTimer()
	for i := 0; i < b.N && i < execCap; i++ {
		t0 := time.Now()
		if err := execTrue(ctx, d.C, sb.ID); err != nil {
			b.Fatal(err)
		}
		got = append(got, ms(time.Since(t0)))
	}
	b.StopTimer()
	reportLatency(b, "exec", got, directTrue(b, len(got)))
}

// BenchmarkSandboxFleet: fleetSize sandboxes, each running execs of
// /bin/true back to back for fleetFor (at most fleetExecCap each), all at
// once on this machine. It fails on any error and reports the exec
// latencies under that load, the execs per second, and the daemon's
// resident memory at the end and at its peak. It runs once whatever b.N.
func BenchmarkSandboxFleet(b *testing.B) {
	f := setup(b)
	d := f.serve(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ids := make([]string, fleetSize)
	for i := range ids {
		sb, err := d.C.CreateSandbox(ctx, api.CreateSandboxRequest{Labels: map[string]string{"fleet": strconv.Itoa(i)}})
		if err != nil {
			b.Fatalf("create sandbox %d of %d: %v", i+1, fleetSize, err)
		}
		ids[i] = sb.ID
	}
	rssStart := procStatusKB(b, d.PID(), "VmRSS")
	var (
		mu   sync.Mutex
		lat  []float64
		errs []error
		wg   sync.WaitGroup
	)
	b.ResetTimer()
	t0 := time.Now()
	deadline := t0.Add(fleetFor)
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []float64
			for n := 0; n < fleetExecCap && time.Now().Before(deadline); n++ {
				s := time.Now()
				if err := execTrue(ctx, d.C, id); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("sandbox %s: %w", id, err))
					mu.Unlock()
					return
				}
				mine = append(mine, ms(time.Since(s)))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	if len(errs) > 0 {
		b.Fatalf("%d of %d sandboxes failed; first: %v", len(errs), fleetSize, errs[0])
	}
	reportLatency(b, "fleet-exec", lat, nil)
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "execs/s")
	b.ReportMetric(float64(rssStart)/1024, "daemon-rss-idle-MiB")
	b.ReportMetric(float64(procStatusKB(b, d.PID(), "VmRSS"))/1024, "daemon-rss-end-MiB")
	b.ReportMetric(float64(procStatusKB(b, d.PID(), "VmHWM"))/1024, "daemon-rss-peak-MiB")
	for _, id := range ids {
		if _, err := d.C.DeleteSandbox(ctx, id); err != nil {
			b.Errorf("delete %s: %v", id, err)
		}
	}
}

// procCPU is a process's CPU time (user+system) and its reaped children's,
// from /proc/<pid>/stat.
func procCPU(b *testing.B, pid int) (self, children time.Duration) {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name (which may hold spaces) start at state.
	_, rest, ok := strings.Cut(string(raw), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 15 {
		b.Fatalf("/proc/%d/stat: %q", pid, raw)
	}
	tick := func(i int) time.Duration {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			b.Fatalf("/proc/%d/stat field %d: %v", pid, i+3, err)
		}
		return time.Duration(n) * time.Second / 100 // USER_HZ
	}
	// utime, stime, cutime, cstime are fields 14-17 (11-14 from state).
	return tick(11) + tick(12), tick(13) + tick(14)
}

// procStatusKB reads a "kB" field of /proc/<pid>/status.
func procStatusKB(b *testing.B, pid int, field string) int64 {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatalf("%s: %v", line, err)
			}
			return n
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
