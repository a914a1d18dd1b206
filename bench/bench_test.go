package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/test/fakenet"
	"github.com/airlock-dev/airlock/test/roottest"
)

// Workload bounds: every benchmark stays well under a minute on a 2-core box.
const (
	benchHost     = "bench.example.test" // --allow: tunnels pass through
	mitmHost      = "pypi.org"           // a registry: the default policy intercepts it
	smallBody     = "ok\n"
	blobSize      = 256 << 20
	keepAliveN    = 4000
	keepAliveConc = 4
	loadMax       = 40 * time.Second
	runCap        = 100 // airlock run -- /bin/true at most this many times
	runTimeout    = 2 * time.Minute
)

// fixture is shared by the benchmarks of one `go test` process.
type fixture struct {
	dir    string // 0755, also the sandbox's workspace (holds loadclient)
	bin    string // airlock
	client string // loadclient
	net    *fakenet.Net
	host   *fakenet.Host
	caFile string
	config string
	audit  string
}

var (
	fixOnce sync.Once
	fix     *fixture
	fixErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fix != nil {
		fix.net.Close()
		os.RemoveAll(fix.dir)
	}
	os.Exit(code)
}

// setup builds the binaries and the fake internet once, on first use.
func setup(b *testing.B) *fixture {
	b.Helper()
	roottest.Require(b)
	fixOnce.Do(func() { fix, fixErr = newFixture() })
	if fixErr != nil {
		b.Fatal(fixErr)
	}
	return fix
}

func newFixture() (*fixture, error) {
	// /var/tmp, not /tmp: the workspace is bound at the same path inside the
	// sandbox, whose /tmp is its own tmpfs.
	dir, err := os.MkdirTemp("/var/tmp", "airlock-bench-")
	if err != nil {
		return nil, err
	}
	f := &fixture{dir: dir, bin: os.Getenv("AIRLOCK_BIN"), client: filepath.Join(dir, "loadclient"),
		caFile: filepath.Join(dir, "fakenet-ca.pem"), config: filepath.Join(dir, "airlock.yaml")}
	fail := func(err error) (*fixture, error) {
		if f.net != nil {
			f.net.Close()
		}
		os.RemoveAll(dir)
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fail(err)
	}
	if f.bin == "" {
		f.bin = filepath.Join(dir, "airlock")
		if err := goBuild(f.bin, "./cmd/airlock"); err != nil {
			return fail(err)
		}
		// The sandbox init beside it, as make build puts it (written second:
		// the executor takes it from a modified tree only when it is newer).
		if err := goBuild(filepath.Join(dir, "airlock-init"), "./cmd/airlock-init"); err != nil {
			return fail(err)
		}
	}
	if err := goBuild(f.client, "./bench/loadclient"); err != nil {
		return fail(err)
	}
	fakenet.CleanStale()
	if f.net, err = fakenet.New(); err != nil {
		return fail(err)
	}
	blob := bytes.Repeat([]byte("airlock-bench-blob\n"), 64<<10/19+1)[:64<<10]
	f.host, err = f.net.AddHost([]string{benchHost, mitmHost}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/blob":
			w.Header().Set("Content-Length", strconv.Itoa(blobSize))
			for sent := 0; sent < blobSize; sent += len(blob) {
				if _, err := w.Write(blob); err != nil {
					return
				}
			}
		default:
			w.Header().Set("Content-Length", strconv.Itoa(len(smallBody)))
			_, _ = w.Write([]byte(smallBody))
		}
	}))
	if err != nil {
		return fail(err)
	}
	if err := f.net.WriteCA(f.caFile); err != nil {
		return fail(err)
	}
	// The audit log and the CA live outside the workspace: airlock hides them.
	state := filepath.Join(dir, "state")
	f.audit = filepath.Join(state, "audit", "audit.jsonl")
	cfg := fmt.Sprintf(`policy: {mode: enforce, allow: [%q]}
dns: {upstreams: [%q]}
upstream: {allow_cidrs: [%q], ca_file: %q}
audit: {file: %q}
ca: {cert: %q, key: %q}
limits: {memory: 512M, cpus: 1, pids: 256, timeout: 2m}
`, benchHost, f.net.DNSAddr.String(), f.net.Subnet.String(), f.caFile, f.audit,
		filepath.Join(state, "ca", "ca.pem"), filepath.Join(state, "ca", "ca.key"))
	if err := os.MkdirAll(state, 0o700); err != nil {
		return fail(err)
	}
	if err := os.WriteFile(f.config, []byte(cfg), 0o600); err != nil {
		return fail(err)
	}
	return f, nil
}

func goBuild(out, pkg string) error {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v: %s", pkg, err, b)
	}
	return nil
}

// airlockRun runs `airlock run -q` with argv in a sandbox whose workspace is the
// fixture directory and returns its stdout.
func (f *fixture) airlockRun(b *testing.B, argv ...string) string {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	args := append([]string{"run", "-q", "--config", f.config, "--workspace", f.dir, "--"}, argv...)
	cmd := exec.CommandContext(ctx, f.bin, args...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		b.Fatalf("airlock run %s: %v\nstdout: %s\nstderr: %s", strings.Join(argv, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// load is one loadclient run's result.
type load struct {
	Requests int64   `json:"requests"`
	Errors   int64   `json:"errors"`
	Bytes    int64   `json:"bytes"`
	Seconds  float64 `json:"seconds"`
	FirstErr string  `json:"first_error"`
}

func parseLoad(b *testing.B, out string) load {
	b.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var l load
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &l); err != nil {
		b.Fatalf("loadclient output %q: %v", out, err)
	}
	if l.Errors > 0 || l.Requests == 0 {
		b.Fatalf("loadclient: %d requests, %d errors (first: %s)", l.Requests, l.Errors, l.FirstErr)
	}
	return l
}

// direct runs loadclient on the host against the fake server's address.
func (f *fixture) direct(b *testing.B, args ...string) load {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, f.client, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			b.Fatalf("loadclient direct: %v: %s", err, ee.Stderr)
		}
		b.Fatal(err)
	}
	return parseLoad(b, string(out))
}

func percentile(d []float64, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := append([]float64(nil), d...)
	sort.Float64s(s)
	return s[int(float64(len(s)-1)*p)]
}

// BenchmarkRunTrue measures `airlock run -- /bin/true` as a whole process (flag
// parsing, policy compile, audit, gateway, namespace, executor, teardown) and
// the executor's own part (the exec end record's wall time: cgroup, init,
// mounts, exec, exit; and its create-to-exec time from -v runs), against
// fork+exec of /bin/true on the host.
func BenchmarkRunTrue(b *testing.B) {
	f := setup(b)
	start := len(execEnds(b, f.audit))
	var whole, direct []float64
	b.ResetTimer()
	for i := 0; i < b.N && i < runCap; i++ {
		t0 := time.Now()
		f.airlockRun(b, "/bin/true")
		whole = append(whole, float64(time.Since(t0))/1e6)
	}
	b.StopTimer()
	for range whole {
		t0 := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		direct = append(direct, float64(time.Since(t0))/1e6)
	}
	var execMS []float64
	for _, r := range execEnds(b, f.audit)[start:] {
		execMS = append(execMS, r.Exec.WallMS)
	}
	// The executor's create-to-exec (Run called until the command's execve
	// succeeded) is logged by -v; these runs are not part of the timings above.
	var c2e []float64
	for range whole {
		c2e = append(c2e, f.createToExec(b))
	}
	wp50, ep50, dp50 := percentile(whole, 0.5), percentile(execMS, 0.5), percentile(direct, 0.5)
	b.ReportMetric(wp50, "run-p50-ms")
	b.ReportMetric(percentile(whole, 0.9), "run-p90-ms")
	b.ReportMetric(ep50, "executor-p50-ms")
	b.ReportMetric(percentile(c2e, 0.5), "create-to-exec-p50-ms")
	b.ReportMetric(dp50, "direct-p50-ms")
	if dp50 > 0 {
		b.ReportMetric(wp50/dp50, "run/direct")
		b.ReportMetric(ep50/dp50, "executor/direct")
	}
}

var createToExecRE = regexp.MustCompile(`create_to_exec=([0-9.]+(?:ns|µs|us|ms|s))`)

// createToExec runs `airlock run -v -- /bin/true` and returns the executor's
// create-to-exec time in milliseconds from its "sandbox started" log line.
func (f *fixture) createToExec(b *testing.B) float64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, f.bin, "run", "-q", "-v", "--config", f.config, "--", "/bin/true")
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("airlock run -v /bin/true: %v: %s", err, out)
	}
	m := createToExecRE.FindSubmatch(out)
	if m == nil {
		b.Fatalf("no create_to_exec in airlock run -v output: %s", out)
	}
	d, err := time.ParseDuration(string(m[1]))
	if err != nil {
		b.Fatal(err)
	}
	return float64(d) / 1e6
}

func execEnds(b *testing.B, path string) []audit.Record {
	b.Helper()
	recs, err := audittest.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		b.Fatal(err)
	}
	var out []audit.Record
	for _, r := range recs {
		if r.Kind == audit.KindExec && r.Exec != nil && r.Exec.Phase == audit.ExecEnd {
			out = append(out, r)
		}
	}
	return out
}

// BenchmarkHTTPKeepAlive: plain-HTTP keep-alive GETs of a tiny body from inside
// a sandbox through the explicit proxy (policy and audit per request), against
// the same client on the host hitting the fake server directly.
func BenchmarkHTTPKeepAlive(b *testing.B) {
	f := setup(b)
	args := []string{"-url", "http://" + benchHost + "/small", "-n", strconv.Itoa(keepAliveN),
		"-c", strconv.Itoa(keepAliveConc), "-max", loadMax.String()}
	var via, dir load
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		via = parseLoad(b, f.airlockRun(b, append([]string{f.client, "-proxy", "http://127.0.0.1:3128"}, args...)...))
	}
	b.StopTimer()
	dir = f.direct(b, append(args, "-connect", f.host.IP.String()+":80")...)
	viaRPS, dirRPS := float64(via.Requests)/via.Seconds, float64(dir.Requests)/dir.Seconds
	b.ReportMetric(viaRPS, "gateway-req/s")
	b.ReportMetric(dirRPS, "direct-req/s")
	b.ReportMetric(viaRPS/dirRPS, "gateway/direct")
}

// BenchmarkHTTPSKeepAliveMITM: the registry case (pip, npm, go): keep-alive
// HTTPS GETs through CONNECT with TLS intercepted (a leaf from the per-run CA,
// policy and audit per inner request, a verified upstream connection), against
// the same client doing HTTPS to the fake server directly.
func BenchmarkHTTPSKeepAliveMITM(b *testing.B) {
	f := setup(b)
	args := []string{"-url", "https://" + mitmHost + "/small", "-n", strconv.Itoa(keepAliveN),
		"-c", strconv.Itoa(keepAliveConc), "-max", loadMax.String()}
	var via, dir load
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		via = parseLoad(b, f.airlockRun(b, append([]string{f.client, "-proxy", "http://127.0.0.1:3128"}, args...)...))
	}
	b.StopTimer()
	dir = f.direct(b, append(args, "-connect", f.host.IP.String()+":443", "-ca", f.caFile)...)
	viaRPS, dirRPS := float64(via.Requests)/via.Seconds, float64(dir.Requests)/dir.Seconds
	b.ReportMetric(viaRPS, "gateway-req/s")
	b.ReportMetric(dirRPS, "direct-req/s")
	b.ReportMetric(viaRPS/dirRPS, "gateway/direct")
}

// BenchmarkDownload256MiB: one 256 MiB HTTPS download through a CONNECT tunnel
// (an --allow host: passthrough, TLS end to end) against the same download
// from the host directly.
func BenchmarkDownload256MiB(b *testing.B) {
	f := setup(b)
	args := []string{"-url", "https://" + benchHost + "/blob", "-n", "1", "-c", "1", "-max", loadMax.String()}
	var via, dir load
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		via = parseLoad(b, f.airlockRun(b, append([]string{f.client, "-proxy", "http://127.0.0.1:3128"}, args...)...))
	}
	b.StopTimer()
	dir = f.direct(b, append(args, "-connect", f.host.IP.String()+":443", "-ca", f.caFile)...)
	if via.Bytes != blobSize || dir.Bytes != blobSize {
		b.Fatalf("got %d bytes through the gateway and %d direct, want %d", via.Bytes, dir.Bytes, blobSize)
	}
	viaMBs, dirMBs := float64(via.Bytes)/via.Seconds/1e6, float64(dir.Bytes)/dir.Seconds/1e6
	b.ReportMetric(viaMBs, "gateway-MB/s")
	b.ReportMetric(dirMBs, "direct-MB/s")
	b.ReportMetric(viaMBs/dirMBs, "gateway/direct")
}
