package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// benchDir writes a policy directory whose preset "bench" holds n hosts.
func benchDir(b *testing.B, n int) string {
	b.Helper()
	dir := b.TempDir()
	hosts := make(map[string]bool, n)
	for i := range n {
		hosts[fmt.Sprintf("h%d.pkgs.example", i)] = true
	}
	src, err := json.Marshal(hosts)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "presets"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "presets", "bench.json"), src, 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

// threadCPU is the calling thread's CPU time.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// benchP50 remembers the 10k p50 per request and cache setting so the 100k
// run can report the ratio.
var benchP50 = map[string]float64{}

// benchRequests are what BenchmarkDecide decides: a GET to a preset host
// (allowed), git's fetch to github.com (allowed: the git-host lookup) and a
// CONNECT to a host no rule names (denied: the deny path builds its reasons).
var benchRequests = []struct {
	name    string
	in      func(n int) *Input
	allowed bool
}{
	{"get-allowed", func(n int) *Input {
		return &Input{
			Kind:        KindHTTP,
			Sandbox:     Sandbox{ID: "sb-1", Labels: map[string]string{"agent": "coder"}},
			Destination: Destination{Host: fmt.Sprintf("h%d.pkgs.example", n/2), Port: 443},
			HTTP:        &HTTP{Method: "GET", Scheme: "https", Path: "/simple/x/", Headers: map[string]string{"user-agent": "pip/24"}},
		}
	}, true},
	{"git-fetch-allowed", func(int) *Input {
		return &Input{
			Kind:        KindHTTP,
			Sandbox:     Sandbox{ID: "sb-1", Labels: map[string]string{"agent": "coder"}},
			Destination: Destination{Host: "github.com", Port: 443},
			HTTP:        &HTTP{Method: "POST", Scheme: "https", Path: "/o/r.git/git-upload-pack", Headers: map[string]string{"user-agent": "git/2.43"}, BodySize: 300},
		}
	}, true},
	{"connect-denied", func(int) *Input {
		return &Input{
			Kind:        KindConnect,
			Sandbox:     Sandbox{ID: "sb-1", Labels: map[string]string{"agent": "coder"}},
			Destination: Destination{Host: "x.evil.example", Port: 443},
		}
	}, false},
}

// BenchmarkDecide is one decision (looked up among n preset hosts) with the
// cache off and on, for each of benchRequests. It reports p50-ns from a per-op
// latency sample and, for 100k, the 100k/10k p50 ratio.
func BenchmarkDecide(b *testing.B) {
	for _, req := range benchRequests {
		for _, cached := range []bool{false, true} {
			for _, n := range []int{10_000, 100_000} {
				name := fmt.Sprintf("req=%s/hosts=%dk/cached=%v", req.name, n/1000, cached)
				b.Run(name, func(b *testing.B) {
					size := -1
					if cached {
						size = DefaultCacheSize
					}
					e, err := New(Config{Dir: benchDir(b, n), CacheSize: size, EvalTimeout: 5 * time.Second, Presets: []string{"bench", "python", "github"}}, nil)
					if err != nil {
						b.Fatal(err)
					}
					p50 := benchLoop(b, e, req.in(n), req.allowed)
					key := fmt.Sprintf("%s/cached=%v", req.name, cached)
					if n == 10_000 {
						benchP50[key] = p50
					} else if base := benchP50[key]; base > 0 {
						b.ReportMetric(p50/base, "ratio-100k/10k")
					}
				})
			}
		}
	}
}

// benchLoop decides in b.N times and reports wall-clock latency and this
// thread's CPU time per decision: on a shared machine the second is what the
// code costs, the first adds waiting for a CPU. It returns the p50 latency.
func benchLoop(b *testing.B, e *Engine, in *Input, allowed bool) float64 {
	ctx := context.Background()
	if d := e.Decide(ctx, in); d.Allowed != allowed || d.Err != nil {
		b.Fatalf("got %+v, want allowed=%v", d, allowed)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	lat := make([]time.Duration, 0, min(b.N, 1<<20))
	cpu := make([]time.Duration, 0, min(b.N, 1<<20))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c0 := threadCPU()
		t0 := time.Now()
		d := e.Decide(ctx, in)
		if len(lat) < cap(lat) {
			lat = append(lat, time.Since(t0))
			cpu = append(cpu, threadCPU()-c0)
		}
		if d.Allowed != allowed {
			b.Fatalf("iteration %d: got %+v, want allowed=%v", i, d, allowed)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	slices.Sort(cpu)
	b.ReportMetric(float64(cpu[len(cpu)/2].Nanoseconds()), "p50-cpu-ns")
	p50 := float64(lat[len(lat)/2].Nanoseconds())
	b.ReportMetric(p50, "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds()), "max-ns")
	return p50
}

// BenchmarkDecideConstantPolicy is the floor: Decide with a library whose
// decision is a constant, uncached. The difference to BenchmarkDecide is what
// the library and default policy cost; this is what OPA and Decide cost.
func BenchmarkDecideConstantPolicy(b *testing.B) {
	dir := b.TempDir()
	src := "package airlock\n\ndecision := {\"allowed\": true, \"reasons\": [], \"mitm\": false, \"http_status\": 0}\n"
	if err := os.MkdirAll(filepath.Join(dir, "lib"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lib", "airlock.rego"), []byte(src), 0o644); err != nil {
		b.Fatal(err)
	}
	e, err := New(Config{Dir: dir, CacheSize: -1, EvalTimeout: 5 * time.Second}, nil)
	if err != nil {
		b.Fatal(err)
	}
	in := &Input{Kind: KindHTTP, Sandbox: Sandbox{ID: "sb-1"}, Destination: Destination{Host: "pypi.org", Port: 443}, HTTP: &HTTP{Method: "GET", Scheme: "https", Path: "/"}}
	ctx := context.Background()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu := make([]time.Duration, 0, min(b.N, 1<<20))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c0 := threadCPU()
		d := e.Decide(ctx, in)
		if len(cpu) < cap(cpu) {
			cpu = append(cpu, threadCPU()-c0)
		}
		if !d.Allowed {
			b.Fatalf("got %+v, want allowed", d)
		}
	}
	b.StopTimer()
	slices.Sort(cpu)
	b.ReportMetric(float64(cpu[len(cpu)/2].Nanoseconds()), "p50-cpu-ns")
}

// benchAllowP50 remembers the 1-entry p50 per request and cache setting so
// the 10,000-entry run can report the ratio.
var benchAllowP50 = map[string]float64{}

// BenchmarkDecideSandboxAllow is one decision for a sandbox with its own allow
// list of 1 or 10,000 entries (the default policy, no --allow hosts), for a
// host on the list (allowed, every kind: a POST with a body) and one not on it
// (denied). The list is looked up by key, so the 10,000-entry run reports its
// p50 as a ratio to the 1-entry run's: it should be about 1.
func BenchmarkDecideSandboxAllow(b *testing.B) {
	reqs := []struct {
		name    string
		host    func(n int) string
		allowed bool
	}{
		{"listed-post", func(n int) string { return fmt.Sprintf("h%d.own.example", n/2) }, true},
		{"unlisted-connect", func(int) string { return "x.evil.example" }, false},
	}
	for _, req := range reqs {
		for _, cached := range []bool{false, true} {
			for _, n := range []int{1, 10_000} {
				b.Run(fmt.Sprintf("req=%s/entries=%d/cached=%v", req.name, n, cached), func(b *testing.B) {
					entries := make([]string, n)
					for i := range entries {
						entries[i] = fmt.Sprintf("h%d.own.example", i)
					}
					list, err := NewAllowList(entries)
					if err != nil {
						b.Fatal(err)
					}
					size := -1
					if cached {
						size = DefaultCacheSize
					}
					e, err := New(Config{CacheSize: size, EvalTimeout: 5 * time.Second}, nil)
					if err != nil {
						b.Fatal(err)
					}
					in := &Input{
						Kind:        KindConnect,
						Sandbox:     Sandbox{ID: "sb-1", Labels: map[string]string{"agent": "coder"}, Allow: list},
						Destination: Destination{Host: req.host(n), Port: 443},
					}
					if req.allowed {
						in.Kind = KindHTTP
						in.HTTP = &HTTP{Method: "POST", Scheme: "https", Path: "/upload", Headers: map[string]string{"user-agent": "curl/8"}, BodySize: 100}
					}
					p50 := benchLoop(b, e, in, req.allowed)
					key := fmt.Sprintf("%s/cached=%v", req.name, cached)
					if n == 1 {
						benchAllowP50[key] = p50
					} else if base := benchAllowP50[key]; base > 0 {
						b.ReportMetric(p50/base, "ratio-10k/1")
					}
				})
			}
		}
	}
}

// BenchmarkNewAllowList is what building a 10,000-entry list costs, once per
// sandbox.
func BenchmarkNewAllowList(b *testing.B) {
	entries := make([]string, 10_000)
	for i := range entries {
		entries[i] = fmt.Sprintf("h%d.own.example", i)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewAllowList(entries); err != nil {
			b.Fatal(err)
		}
	}
}
