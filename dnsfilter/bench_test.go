package dnsfilter

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
)

const dnsmasqPath = "/usr/sbin/dnsmasq"

// benchZone is what both servers answer: pypi.org (and below) -> 198.18.0.10,
// example.com (and below) -> NXDOMAIN.
var benchZone = map[string][]string{"pypi.org.": {"pypi.org. 300 IN A 198.18.0.10"}}

// startDnsmasq runs dnsmasq on 127.0.0.1:<free port> serving benchZone, killed at
// cleanup. It skips when dnsmasq is not installed.
func startDnsmasq(b *testing.B) string {
	addr, _ := startDnsmasqPID(b)
	return addr
}

// startDnsmasqPID is startDnsmasq, also returning dnsmasq's pid.
func startDnsmasqPID(b *testing.B) (string, int) {
	b.Helper()
	if _, err := os.Stat(dnsmasqPath); err != nil {
		b.Skipf("dnsmasq not installed (%s): the comparison needs it (CI installs dnsmasq-base)", dnsmasqPath)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := pc.LocalAddr().(*net.UDPAddr).Port
	pc.Close()
	cmd := exec.Command(dnsmasqPath, "--keep-in-foreground", "--conf-file=/dev/null",
		"--no-resolv", "--no-hosts", "--no-poll", "--pid-file=", "--bind-interfaces",
		"--listen-address=127.0.0.1", "--port="+strconv.Itoa(port), "--cache-size=10000",
		"--address=/pypi.org/198.18.0.10", "--address=/example.com/", "--local-ttl=300")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatalf("start dnsmasq: %v", err)
	}
	b.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c := &dns.Client{Net: "udp", Timeout: 200 * time.Millisecond}
	m := new(dns.Msg)
	m.SetQuestion("pypi.org.", dns.TypeA)
	for range 50 {
		if r, _, err := c.Exchange(m, addr); err == nil && len(r.Answer) == 1 {
			return addr, cmd.Process.Pid
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatalf("dnsmasq on %s did not answer", addr)
	return "", 0
}

// startAirlock runs a Filter with the real policy engine (pypi.org allowed, every
// preset off) and the real audit writer (to a temp file), serving one sandbox on
// loopback, over a fake upstream serving benchZone.
func startAirlock(b *testing.B) (addr string, auditFile string, w *audit.Writer) {
	return startAirlockBudget(b, 1e9, 1<<30)
}

// startAirlockBudget is startAirlock with the audit budget given (0, 0: the
// defaults, as the daemon runs).
func startAirlockBudget(b *testing.B, auditRate float64, auditBurst int) (addr string, auditFile string, w *audit.Writer) {
	b.Helper()
	up := startUpstream(b, records(benchZone))
	eng, err := policy.New(policy.Config{Presets: []string{policy.PresetNone}, AllowHosts: []string{"pypi.org"}}, nil)
	if err != nil {
		b.Fatalf("policy.New: %v", err)
	}
	auditFile = filepath.Join(b.TempDir(), "audit.jsonl")
	w, err = audit.New(audit.Config{File: auditFile}, nil)
	if err != nil {
		b.Fatalf("audit.New: %v", err)
	}
	b.Cleanup(func() { w.Close() })
	f, err := New(Config{
		Upstreams:  []string{up.addr},
		AllowCIDRs: []string{"198.18.0.0/15"},
		RateLimit:  1e9, RateBurst: 1 << 30, // the load is one sandbox at full speed
		AuditRate: auditRate, AuditBurst: auditBurst,
	}, eng, pickAudit(w), nil)
	if err != nil {
		b.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	if err := f.ServeSandbox(policy.Sandbox{ID: "sb-bench"}, nil, pc, ln); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		f.Shutdown(ctx)
	})
	return pc.LocalAddr().String(), auditFile, w
}

// loadResult is one load run.
type loadResult struct {
	N, Lost, Wrong int
	Elapsed        time.Duration
	P50, P99       time.Duration
}

func (r loadResult) qps() float64 { return float64(r.N) / r.Elapsed.Seconds() }

// loadEnv, when set, makes the test binary a load generator (see TestMain):
// "addr name rcode total conc maxtime". Running the generator in its own process
// gives dnsmasq and the filter the same client, and keeps the client's goroutines
// off the filter's Go scheduler.
const loadEnv = "DNSFILTER_LOADGEN"

func TestMain(m *testing.M) {
	if spec := os.Getenv(loadEnv); spec != "" {
		os.Exit(runLoadGenerator(spec))
	}
	os.Exit(m.Run())
}

func runLoadGenerator(spec string) int {
	var addr, name string
	var rcode, total, conc int
	var maxMS int64
	if _, err := fmt.Sscan(spec, &addr, &name, &rcode, &total, &conc, &maxMS); err != nil {
		fmt.Fprintln(os.Stderr, "bad", loadEnv, err)
		return 2
	}
	r, err := load(addr, name, rcode, total, conc, time.Duration(maxMS)*time.Millisecond)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return 1
	}
	return 0
}

// loadProc runs load in a child process (the test binary as a load generator).
func loadProc(tb testing.TB, addr, name string, rcode, total, conc int, maxTime time.Duration) loadResult {
	tb.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d %d %d %d", loadEnv, addr, name, rcode, total, conc, maxTime.Milliseconds()))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("load generator: %v", err)
	}
	var r loadResult
	if err := json.Unmarshal(out, &r); err != nil {
		tb.Fatalf("load generator output %q: %v", out, err)
	}
	return r
}

// load sends total queries for name over conc UDP sockets, each waiting for its
// reply before sending the next, bounded by total and by maxTime. wantRcode is
// checked on every reply.
func load(addr, name string, wantRcode int, total, conc int, maxTime time.Duration) (loadResult, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	pkt, err := m.Pack()
	if err != nil {
		return loadResult{}, err
	}
	var errMu sync.Mutex
	var firstErr error
	deadline := time.Now().Add(maxTime)
	lat := make([][]time.Duration, conc)
	lost := make([]int, conc)
	wrong := make([]int, conc)
	var wg sync.WaitGroup
	start := time.Now()
	for g := range conc {
		n := total / conc
		if g < total%conc {
			n++
		}
		wg.Go(func() {
			c, err := net.Dial("udp", addr)
			if err != nil {
				errMu.Lock()
				firstErr = err
				errMu.Unlock()
				return
			}
			defer c.Close()
			q := slices.Clone(pkt)
			buf := make([]byte, 1500)
			lat[g] = make([]time.Duration, 0, n)
			for i := 0; i < n && time.Now().Before(deadline); i++ {
				id := uint16(g<<12 | i&0xfff)
				binary.BigEndian.PutUint16(q, id)
				t0 := time.Now()
				if _, err := c.Write(q); err != nil {
					lost[g]++
					continue
				}
				c.SetReadDeadline(t0.Add(time.Second))
				for {
					k, err := c.Read(buf)
					if err != nil {
						lost[g]++
						break
					}
					if k < 12 || binary.BigEndian.Uint16(buf) != id {
						continue // a late reply to a lost query
					}
					lat[g] = append(lat[g], time.Since(t0))
					if int(buf[3]&0xf) != wantRcode {
						wrong[g]++
					}
					break
				}
			}
		})
	}
	wg.Wait()
	r := loadResult{Elapsed: time.Since(start)}
	var all []time.Duration
	for g := range conc {
		all = append(all, lat[g]...)
		r.Lost += lost[g]
		r.Wrong += wrong[g]
	}
	r.N = len(all)
	if r.N > 0 {
		slices.Sort(all)
		r.P50 = all[r.N/2]
		r.P99 = all[min(r.N-1, r.N*99/100)]
	}
	return r, firstErr
}

// BenchmarkLoad compares the filter (real policy engine, a real audit record per
// query) with dnsmasq serving the same names, in the same run, over loopback UDP:
//
//	go test -run '^$' -bench Load -benchtime 30000x ./dnsfilter/
//
// b.N is the number of queries per scenario per round, spread over loadConns
// sockets and capped at 20 s. The scenarios run interleaved for loadRounds
// rounds (the machine is shared, so load drifts) and each reports its median
// round: queries/s, p50 and p99. The log has the airlock/dnsmasq ratios.
// DNSFILTER_BENCH_AUDIT=off swaps the audit writer for a discarding logger.
func BenchmarkLoad(b *testing.B) {
	const loadConns, loadRounds = 8, 3
	masq := startDnsmasq(b)
	air, auditFile, aw := startAirlock(b)
	scenarios := []struct {
		name, addr, qname string
		rcode             int
	}{
		{"dnsmasq-allowed", masq, "pypi.org.", dns.RcodeSuccess},
		{"airlock-allowed", air, "pypi.org.", dns.RcodeSuccess},
		{"dnsmasq-denied", masq, "evil.example.com.", dns.RcodeNameError},
		{"airlock-denied", air, "evil.example.com.", dns.RcodeNameError},
	}
	for _, sc := range scenarios {
		// Warm the caches (answer, decision, policy) before measuring.
		loadProc(b, sc.addr, sc.qname, sc.rcode, 200, 1, 5*time.Second)
	}
	runs := map[string][]loadResult{}
	b.ResetTimer()
	for range loadRounds {
		for _, sc := range scenarios {
			r := loadProc(b, sc.addr, sc.qname, sc.rcode, b.N, loadConns, 20*time.Second)
			if r.Wrong > 0 {
				b.Errorf("%s: %d replies with the wrong rcode (want %s)", sc.name, r.Wrong, dns.RcodeToString[sc.rcode])
			}
			runs[sc.name] = append(runs[sc.name], r)
		}
	}
	b.StopTimer()
	med := map[string]loadResult{}
	for _, sc := range scenarios {
		rs := runs[sc.name]
		slices.SortFunc(rs, func(x, y loadResult) int { return int(x.qps() - y.qps()) })
		m := rs[len(rs)/2]
		med[sc.name] = m
		b.ReportMetric(m.qps(), sc.name+"-q/s")
		b.ReportMetric(float64(m.P50.Microseconds()), sc.name+"-p50-µs")
		b.ReportMetric(float64(m.P99.Microseconds()), sc.name+"-p99-µs")
		var all []string
		for _, r := range rs {
			all = append(all, strconv.Itoa(int(r.qps())))
		}
		b.Logf("%s: rounds %v q/s; median %.0f q/s p50 %v p99 %v lost %d", sc.name, all, m.qps(), m.P50, m.P99, m.Lost)
	}
	for _, kind := range []string{"allowed", "denied"} {
		a, d := med["airlock-"+kind], med["dnsmasq-"+kind]
		if a.N > 0 && d.N > 0 {
			b.ReportMetric(a.qps()/d.qps(), kind+"-ratio")
			b.Logf("%s: airlock/dnsmasq = %.2fx", kind, a.qps()/d.qps())
		}
	}
	if st, err := os.Stat(auditFile); err == nil {
		b.Logf("audit file: %d bytes; writer stats %+v", st.Size(), aw.Stats())
		if data, err := os.ReadFile(auditFile); err == nil && len(data) > 0 {
			lines := strings.SplitN(strings.TrimSpace(string(data)), "\n", 300)
			b.Logf("sample audit line: %s", lines[len(lines)-1])
		}
	}
}

// BenchmarkDnsperf is bench-compare's DNS measure on loopback: dnsperf (8
// sockets, 200 outstanding, 2 threads) asking one name over and over, the
// filter with the real policy engine, the real audit writer and the default
// audit budget, beside dnsmasq, alternated for dnsperfRounds rounds:
//
//	go test -run '^$' -bench Dnsperf -benchtime 1x ./dnsfilter/
//
// It skips without dnsperf or dnsmasq. The log has every round's q/s and
// CPU per query. DNSFILTER_BENCH_KINDS=allowed (or denied) runs one name only.
func BenchmarkDnsperf(b *testing.B) {
	const dnsperfRounds, secs = 5, "3"
	perf, err := exec.LookPath("dnsperf")
	if err != nil {
		b.Skip("dnsperf not installed")
	}
	masq, masqPID := startDnsmasqPID(b)
	air, _, _ := startAirlockBudget(b, 0, 0)
	// cpu is the server's CPU time so far: this process's for the filter,
	// dnsmasq's from /proc.
	cpu := func(pid int) time.Duration {
		if pid == 0 {
			var ru syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
			return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			b.Fatal(err)
		}
		f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
		ut, _ := strconv.Atoi(f[11])
		st, _ := strconv.Atoi(f[12])
		return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ 100
	}
	dir := b.TempDir()
	qf := map[string]string{"allowed": filepath.Join(dir, "allowed"), "denied": filepath.Join(dir, "denied")}
	os.WriteFile(qf["allowed"], []byte("pypi.org A\n"), 0o644)
	os.WriteFile(qf["denied"], []byte("evil.example.com A\n"), 0o644)
	type round struct{ qps, server, client float64 } // q/s, server and dnsperf CPU µs per query
	run := func(addr string, pid int, kind string) round {
		host, port, _ := net.SplitHostPort(addr)
		c0 := cpu(pid)
		cmd := exec.Command(perf, "-s", host, "-p", port, "-d", qf[kind], "-l", secs, "-c", "8", "-T", "2", "-q", "200")
		out, err := cmd.CombinedOutput()
		c1 := cpu(pid)
		if err != nil {
			b.Fatalf("dnsperf: %v: %s", err, out)
		}
		_, rest, ok := strings.Cut(string(out), "Queries per second:")
		if !ok {
			b.Fatalf("dnsperf output: %s", out)
		}
		var qps float64
		fmt.Sscan(rest, &qps)
		_, rest, _ = strings.Cut(string(out), "Queries completed:")
		var n float64
		fmt.Sscan(rest, &n)
		n = max(n, 1)
		client := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		return round{qps, float64((c1 - c0).Microseconds()) / n, float64(client.Microseconds()) / n}
	}
	for _, kind := range []string{"allowed", "denied"} {
		loadProc(b, air, map[string]string{"allowed": "pypi.org.", "denied": "evil.example.com."}[kind], map[string]int{"allowed": 0, "denied": 3}[kind], 200, 1, 5*time.Second)
	}
	kinds := []string{"allowed", "denied"}
	if k := os.Getenv("DNSFILTER_BENCH_KINDS"); k != "" {
		kinds = strings.Split(k, ",")
	}
	for b.Loop() {
		for _, kind := range kinds {
			var a, m, acpu, mcpu []float64
			var ratios, cpus []string
			for range dnsperfRounds {
				ra, rm := run(air, 0, kind), run(masq, masqPID, kind)
				a, m = append(a, ra.qps), append(m, rm.qps)
				acpu, mcpu = append(acpu, ra.server), append(mcpu, rm.server)
				ratios = append(ratios, fmt.Sprintf("%.0f/%.0f=%.2f", ra.qps, rm.qps, ra.qps/rm.qps))
				cpus = append(cpus, fmt.Sprintf("%.1f+%.1f/%.1f+%.1f", ra.server, ra.client, rm.server, rm.client))
			}
			b.Logf("%s: airlock/dnsmasq q/s per round: %s", kind, strings.Join(ratios, " "))
			b.Logf("%s: CPU µs per query, server+dnsperf, airlock/dnsmasq: %s", kind, strings.Join(cpus, " "))
			slices.Sort(acpu)
			slices.Sort(mcpu)
			b.ReportMetric(acpu[len(acpu)/2], "airlock-"+kind+"-cpu-µs/q")
			b.ReportMetric(mcpu[len(mcpu)/2], "dnsmasq-"+kind+"-cpu-µs/q")
			slices.Sort(a)
			slices.Sort(m)
			b.ReportMetric(a[len(a)/2], "airlock-"+kind+"-q/s")
			b.ReportMetric(m[len(m)/2], "dnsmasq-"+kind+"-q/s")
		}
	}
}

// BenchmarkServeDNS measures the handler alone (no sockets) with a fake decider
// and a discarding audit logger: the per-query cost of the filter's own code.
func BenchmarkServeDNS(b *testing.B) {
	up := startUpstream(b, records(benchZone))
	f, err := New(Config{Upstreams: []string{up.addr}, AllowCIDRs: []string{"198.18.0.0/15"}, RateLimit: 1e9, RateBurst: 1 << 30, AuditRate: 1e9, AuditBurst: 1 << 30},
		policytest.AllowUnder("pypi.org"), audittest.Discard{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	s := newSandboxServer(f, policy.Sandbox{ID: "sb-bench"}, nil)
	for _, name := range []string{"pypi.org.", "evil.example.com."} {
		b.Run(name, func(b *testing.B) {
			m := new(dns.Msg)
			m.SetQuestion(name, dns.TypeA)
			w := &recorder{}
			s.ServeDNS(w, m)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				s.ServeDNS(w, m)
			}
		})
	}
}

// pickAudit returns the real writer, or a discarding logger when
// DNSFILTER_BENCH_AUDIT=off (to measure what the audit writer costs).
func pickAudit(w *audit.Writer) audit.Logger {
	if os.Getenv("DNSFILTER_BENCH_AUDIT") == "off" {
		return audittest.Discard{}
	}
	return w
}

// BenchmarkServeUDP measures one datagram on the batch path (header, accept,
// the query, the reply queued for sendmmsg) without the syscalls: the real
// policy engine and the default audit budget (past its burst every query is
// counted into the summary, as under load), for a cached allowed name and a
// denied one.
func BenchmarkServeUDP(b *testing.B) {
	up := startUpstream(b, records(benchZone))
	eng, err := policy.New(policy.Config{Presets: []string{policy.PresetNone}, AllowHosts: []string{"pypi.org"}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	f, err := New(Config{Upstreams: []string{up.addr}, AllowCIDRs: []string{"198.18.0.0/15"}, RateLimit: 1e9, RateBurst: 1 << 30},
		eng, audittest.Discard{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	s := newSandboxServer(f, policy.Sandbox{ID: "sb-bench"}, nil)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer pc.Close()
	u := &udpServer{s: s, pc: pc, uc: pc.(*net.UDPConn)}
	for _, tc := range []struct {
		name, qname string
		rcode       int
	}{{"allowed", "pypi.org.", dns.RcodeSuccess}, {"denied", "evil.example.com.", dns.RcodeNameError}} {
		b.Run(tc.name, func(b *testing.B) {
			m := new(dns.Msg)
			m.SetQuestion(tc.qname, dns.TypeA)
			pkt, err := m.Pack()
			if err != nil {
				b.Fatal(err)
			}
			bt := u.takeBatch()
			defer putBatch(bt)
			serve := func() {
				bt.nOut = 0
				if p := u.serveNoWait(&bt.w[0], pkt, false, false); p != nil {
					b.Fatal("pending")
				}
			}
			serve()
			var r dns.Msg
			if err := r.Unpack(bt.reply[0]); err != nil || r.Rcode != tc.rcode {
				b.Fatalf("reply %v (%v), want rcode %s", &r, err, dns.RcodeToString[tc.rcode])
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				serve()
			}
		})
	}
}
