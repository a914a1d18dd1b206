package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/client"
)

// sizes are the durations and sizes of one run (full or quick).
type sizes struct {
	rounds     int
	wrkFor     time.Duration
	blob       int
	dnsFor     time.Duration
	startRuns  int
	pooledN    int
	sandboxes  int
	tunnels    int
	tunnelHold time.Duration
	// manyTunnels over manySandboxes: the daemon's descriptors and caps at
	// scale (airlock alone: one squid process is not the comparison).
	manyTunnels, manySandboxes int
}

// pathEnv is the environment of the commands run.
func pathEnv() []string {
	return []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
}

// inSandbox is argv run by `airlock run` with the bench config and workspace.
func (e *env) inSandbox(argv ...string) []string {
	run := append([]string{e.bin, "run", "-q", "--config", e.config, "--workspace", e.dir, "--"}, argv...)
	if e.perfDir == "" {
		return run
	}
	e.perfN++
	data := filepath.Join(e.perfDir, fmt.Sprintf("alk-%02d-%s.perf", e.perfN, filepath.Base(argv[0])))
	return append([]string{"perf", "record", "-q", "-F", "999", "-g", "-o", data, "--"}, run...)
}

// exe returns a subject run function executing argv and parsing its output.
func (e *env) exe(argv []string, timeout time.Duration, parse func(string) ([]metric, error)) func() ([]metric, string, error) {
	return func() ([]metric, string, error) {
		out, err := output(e.ctx, timeout, argv...)
		if err != nil {
			return nil, out, err
		}
		m, err := parse(out)
		return m, out, err
	}
}

// --- HTTP forward proxy (wrk) ---

var (
	wrkRPS     = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkPct     = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([0-9.]+)(us|ms|s)\s*$`)
	wrkErrs    = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	wrkNon2xx  = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkUnitsMS = map[string]float64{"us": 1e-3, "ms": 1, "s": 1e3}
)

func parseWrk(out string) ([]metric, error) {
	m := wrkRPS.FindStringSubmatch(out)
	if m == nil {
		return nil, fmt.Errorf("no Requests/sec in wrk output")
	}
	rps, _ := strconv.ParseFloat(m[1], 64)
	res := []metric{{"req/s", rps}}
	for _, p := range wrkPct.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(p[2], 64)
		res = append(res, metric{"p" + p[1] + " ms", v * wrkUnitsMS[p[3]]})
	}
	errs := 0.0
	if n := wrkNon2xx.FindStringSubmatch(out); n != nil {
		v, _ := strconv.ParseFloat(n[1], 64)
		errs += v
	}
	if n := wrkErrs.FindStringSubmatch(out); n != nil {
		for _, x := range n[1:] {
			v, _ := strconv.ParseFloat(x, 64)
			errs += v
		}
	}
	return append(res, metric{"errors", errs}), nil
}

// httpMeasures: keep-alive at 16 and 64 connections, and a new connection
// per request (Connection: close) at 16, against direct, airlock and squid.
// wrk sends absolute-form request lines to a proxy through a Lua script.
func (e *env) httpMeasures(z sizes) ([]measure, error) {
	script := filepath.Join(e.dir, "alk-proxy.lua")
	lua := fmt.Sprintf("wrk.path = %q\nwrk.headers[\"Host\"] = %q\n", "http://"+benchHost+"/small", benchHost)
	if err := os.WriteFile(script, []byte(lua), 0o644); err != nil {
		return nil, err
	}
	var ms []measure
	for _, c := range []struct {
		name  string
		conns int
		close bool
	}{{"HTTP keep-alive, 16 conns", 16, false}, {"HTTP keep-alive, 64 conns", 64, false}, {"HTTP new connection per request, 16 conns", 16, true}} {
		wrk := []string{"wrk", "-t2", "-c" + strconv.Itoa(c.conns), "-d" + strconv.Itoa(int(z.wrkFor.Seconds())) + "s", "--latency", "-H", "Host: " + benchHost}
		if c.close {
			wrk = append(wrk, "-H", "Connection: close")
		}
		direct := append(append([]string{}, wrk...), "http://"+e.host.IP.String()+"/small")
		viaAirlock := e.inSandbox(append(append([]string{}, wrk...), "-s", script, "http://127.0.0.1:3128/")...)
		viaSquid := append(append([]string{}, wrk...), "-s", script, "http://"+e.squid+"/")
		to := z.wrkFor + 2*time.Minute
		target := ""
		if !c.close {
			target = "airlock ≥ 1.5x squid req/s, p99 ≤ squid's"
		}
		ms = append(ms, measure{Name: c.name, Primary: "req/s", Higher: true, Target: target, Subjects: []subject{
			{Name: "direct", Command: shellJoin(direct), run: e.exe(direct, to, parseWrk)},
			{Name: "airlock", Command: shellJoin(viaAirlock), run: e.exe(viaAirlock, to, parseWrk)},
			{Name: "squid", Peer: true, Command: shellJoin(viaSquid), run: e.exe(viaSquid, to, parseWrk)},
		}})
	}
	return ms, nil
}

// --- bulk (loadclient) ---

func parseLoad(want int) func(string) ([]metric, error) {
	return func(out string) ([]metric, error) {
		var r struct {
			Requests, Errors, Bytes int64
			Seconds                 float64
			FirstErr                string `json:"first_error"`
		}
		if err := json.Unmarshal([]byte(lastJSON(out)), &r); err != nil {
			return nil, fmt.Errorf("loadclient output %q: %w", tail(out, 300), err)
		}
		if r.Errors > 0 || r.Bytes != int64(want) {
			return nil, fmt.Errorf("loadclient: %d bytes, want %d; %d errors (first: %s)", r.Bytes, want, r.Errors, r.FirstErr)
		}
		return []metric{{"MB/s", float64(r.Bytes) / r.Seconds / 1e6}}, nil
	}
}

// bulkMeasures: one download of z.blob bytes through a CONNECT tunnel to a
// plain and a TLS origin (TLS end to end), and through TLS interception
// (airlock's default for registries; squid ssl-bump), against direct.
func (e *env) bulkMeasures(z sizes) []measure {
	to := 5 * time.Minute
	lc := func(url string, extra ...string) []string {
		return append([]string{e.client, "-url", url, "-n", "1", "-c", "1", "-max", "4m"}, extra...)
	}
	blob := "/blob?size=" + strconv.Itoa(z.blob)
	var ms []measure
	for _, c := range []struct{ name, scheme, port string }{{"CONNECT bulk, plain origin", "http", "80"}, {"CONNECT bulk, TLS end to end", "https", "443"}} {
		url := c.scheme + "://" + benchHost + blob
		var tls []string
		if c.scheme == "https" {
			tls = []string{"-ca", e.caFile}
		}
		direct := lc(url, append([]string{"-connect", e.host.IP.String() + ":" + c.port}, tls...)...)
		air := e.inSandbox(lc(url, append([]string{"-proxy", "http://127.0.0.1:3128", "-tunnel"}, tls...)...)...)
		sq := lc(url, append([]string{"-proxy", "http://" + e.squid, "-tunnel"}, tls...)...)
		ms = append(ms, measure{Name: c.name + fmt.Sprintf(" (%d MiB)", z.blob>>20), Primary: "MB/s", Higher: true,
			Target: "airlock ≥ 0.8x direct", Subjects: []subject{
				{Name: "direct", Command: shellJoin(direct), run: e.exe(direct, to, parseLoad(z.blob))},
				{Name: "airlock", Command: shellJoin(air), run: e.exe(air, to, parseLoad(z.blob))},
				{Name: "squid", Peer: true, Command: shellJoin(sq), run: e.exe(sq, to, parseLoad(z.blob))},
			}})
	}
	url := "https://" + mitmHost + blob
	direct := lc(url, "-connect", e.host.IP.String()+":443", "-ca", e.caFile)
	air := e.inSandbox(lc(url, "-proxy", "http://127.0.0.1:3128")...)
	sq := lc(url, "-proxy", "http://"+e.squidTLS, "-ca", e.squidCA)
	ms = append(ms, measure{Name: fmt.Sprintf("TLS interception bulk (%d MiB)", z.blob>>20), Primary: "MB/s", Higher: true,
		Target: "airlock ≥ 0.6x direct TLS", Subjects: []subject{
			{Name: "direct TLS", Command: shellJoin(direct), run: e.exe(direct, to, parseLoad(z.blob))},
			{Name: "airlock", Command: shellJoin(air), run: e.exe(air, to, parseLoad(z.blob))},
			{Name: "squid ssl-bump", Peer: true, Command: shellJoin(sq), run: e.exe(sq, to, parseLoad(z.blob))},
		}})
	return ms
}

// --- DNS (dnsperf) ---

var (
	dnsQPS  = regexp.MustCompile(`Queries per second:\s+([0-9.]+)`)
	dnsAvg  = regexp.MustCompile(`Average Latency \(s\):\s+([0-9.]+)`)
	dnsLost = regexp.MustCompile(`Queries lost:\s+(\d+)`)
)

func parseDnsperf(out string) ([]metric, error) {
	m := dnsQPS.FindStringSubmatch(out)
	if m == nil {
		return nil, fmt.Errorf("no queries per second in dnsperf output: %s", tail(out, 400))
	}
	q, _ := strconv.ParseFloat(m[1], 64)
	res := []metric{{"q/s", q}}
	if a := dnsAvg.FindStringSubmatch(out); a != nil {
		v, _ := strconv.ParseFloat(a[1], 64)
		res = append(res, metric{"avg ms", v * 1e3})
	}
	if l := dnsLost.FindStringSubmatch(out); l != nil {
		v, _ := strconv.ParseFloat(l[1], 64)
		res = append(res, metric{"lost", v})
	}
	return res, nil
}

// dnsMeasures: one name asked over and over (a cached answer after the
// first), allowed and denied, against the fake internet's authoritative
// server (direct), airlock's filter (dnsperf inside the sandbox, at its
// resolver), dnsmasq and unbound.
func (e *env) dnsMeasures(z sizes) ([]measure, error) {
	var ms []measure
	secs := strconv.Itoa(int(z.dnsFor.Seconds()))
	for _, c := range []struct{ name, qname, target string }{
		{"DNS cached allowed name", benchHost, "airlock ≥ dnsmasq q/s"}, {"DNS denied name", deniedName, ""}} {
		qf := filepath.Join(e.dir, "alk-queries-"+strings.ReplaceAll(c.qname, ".", "-"))
		if err := os.WriteFile(qf, []byte(c.qname+" A\n"), 0o644); err != nil {
			return nil, err
		}
		perf := func(server, port string) []string {
			return []string{"dnsperf", "-s", server, "-p", port, "-d", qf, "-l", secs, "-c", "8", "-T", "2", "-q", "200"}
		}
		direct := perf(e.net.DNSAddr.Addr().String(), "53")
		// Inside the sandbox the filter is the resolver of /etc/resolv.conf.
		air := e.inSandbox("/bin/sh", "-c", `exec dnsperf -s "$(sed -n 's/^nameserver //p' /etc/resolv.conf | head -n1)" -p 53 -d `+qf+" -l "+secs+" -c 8 -T 2 -q 200")
		hostPort := func(a string) (string, string) { h, p, _ := strings.Cut(a, ":"); return h, p }
		mh, mp := hostPort(e.dnsmasq)
		uh, up := hostPort(e.unbound)
		masq, unb := perf(mh, mp), perf(uh, up)
		to := z.dnsFor + time.Minute
		ms = append(ms, measure{Name: c.name, Primary: "q/s", Higher: true, Target: c.target, Subjects: []subject{
			{Name: "direct (authoritative)", Command: shellJoin(direct), run: e.exe(direct, to, parseDnsperf)},
			{Name: "airlock", Command: shellJoin(air), run: e.exe(air, to, parseDnsperf)},
			{Name: "dnsmasq", Peer: true, Command: shellJoin(masq), run: e.exe(masq, to, parseDnsperf)},
			{Name: "unbound", Peer: true, Command: shellJoin(unb), run: e.exe(unb, to, parseDnsperf)},
		}})
	}
	return ms, nil
}

// --- sandbox start (hyperfine) ---

func (e *env) startMeasure(z sizes) measure {
	hf := func(name string, cmd string) subject {
		jf := filepath.Join(e.dir, "alk-hyperfine-"+strings.NewReplacer(" ", "-", "(", "", ")", "").Replace(name)+".json")
		argv := []string{"hyperfine", "-N", "--style", "none", "--warmup", "2", "--runs", strconv.Itoa(z.startRuns), "--export-json", jf, cmd}
		return subject{Name: name, Command: shellJoin(argv), run: func() ([]metric, string, error) {
			out, err := output(e.ctx, 5*time.Minute, argv...)
			if err != nil {
				return nil, out, err
			}
			raw, err := os.ReadFile(jf)
			if err != nil {
				return nil, out, err
			}
			var r struct {
				Results []struct {
					Mean, Median float64
					Times        []float64
				}
			}
			if err := json.Unmarshal(raw, &r); err != nil || len(r.Results) != 1 {
				return nil, out, fmt.Errorf("hyperfine json %s: %v", jf, err)
			}
			res := r.Results[0]
			return []metric{{"median ms", res.Median * 1e3}, {"p90 ms", pct(res.Times, 0.9) * 1e3}}, out, nil
		}}
	}
	bw := hf("bubblewrap", "bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc -- /bin/true")
	bw.Peer = true
	un := hf("unshare", "unshare --mount --uts --ipc --net --pid --cgroup --fork /bin/true")
	un.Peer = true
	subjects := []subject{
		hf("direct", "/bin/true"),
		hf("airlock", shellJoin([]string{e.bin, "run", "-q", "--no-daemon", "--config", e.config, "--", "/bin/true"})),
		e.throughDaemon(hf),
		un, bw,
	}
	// Rootless: airlock run and bubblewrap as an ordinary user (both make
	// a user namespace of their own).
	asUser, air, err := e.rootlessRun()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-compare: no rootless start rows: %v\n", err)
	} else {
		bwu := hf("bubblewrap (uid 65534)", shellJoin(append(asUser, "bwrap", "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--", "/bin/true")))
		bwu.Peer = true
		subjects = append(subjects, hf("airlock rootless (uid 65534)", shellJoin(append(asUser, air...))), bwu)
	}
	return measure{Name: "sandbox start, whole process", Primary: "median ms", Higher: false,
		Target: "airlock run ≤ 3x bubblewrap, through a daemon ≤ 2x (rootless: ≤ 3x bubblewrap as the same user)", Subjects: subjects}
}

// throughDaemon is the start row of `airlock run` through a running daemon
// (the front alone asks it for a sandbox): each round starts `airlock serve`
// (default warm pool) with a socket, run directory, audit log and metrics
// port of its own, times the runs once its pool is full, and stops it.
func (e *env) throughDaemon(hf func(name, cmd string) subject) subject {
	dir := filepath.Join(e.dir, "start-serve")
	sock := filepath.Join(dir, "api.sock")
	s := hf("airlock through a daemon", shellJoin([]string{e.bin, "--socket", sock, "run", "-q", "--", "/bin/true"}))
	timed := s.run
	s.run = func() ([]metric, string, error) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, "", err
		}
		base, err := os.ReadFile(e.config)
		if err != nil {
			return nil, "", err
		}
		// Its own audit log (one writer per file: the in-process row writes
		// the config's) and metrics port (the daemon measures' serve has the
		// default one).
		audit := filepath.Join(dir, "audit", "audit.jsonl")
		cfg := strings.Replace(string(base), filepath.Join(e.dir, "state", "audit", "audit.jsonl"), audit, 1)
		if cfg == string(base) {
			return nil, "", fmt.Errorf("start-serve config: the audit file of %s not found", e.config)
		}
		cfg += "api: {group: \"\"}\nmetrics: {listen: \"127.0.0.1:0\"}\n"
		conf := filepath.Join(dir, "serve.yaml")
		if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
			return nil, "", err
		}
		argv := []string{e.bin, "serve", "--config", conf, "--socket", sock, "--run-dir", filepath.Join(dir, "run")}
		cmd, err := e.procs.start(filepath.Join(e.dir, "start-serve.out"), argv...)
		if err != nil {
			return nil, "", err
		}
		defer stop(cmd)
		c := client.New(sock)
		defer c.Close()
		ctx, cancel := context.WithTimeout(e.ctx, 2*time.Minute)
		defer cancel()
		if err := waitPool(ctx, c); err != nil {
			return nil, "", fmt.Errorf("start-serve: %w", err)
		}
		return timed()
	}
	return s
}

// rootlessUID is the ordinary user the rootless rows run as.
const rootlessUID = "65534"

// rootlessRun prepares the rootless rows: a copy of airlock with the core
// and the sandbox init beside it (the front executes the core for an
// in-process run, the core starts airlock-init), an audit directory and a
// runtime directory the user owns, under the bench's directory (removed
// with it). It returns the command prefix that runs as the user and
// airlock's arguments.
func (e *env) rootlessRun() (asUser, air []string, err error) {
	dir := filepath.Join(e.dir, "rootless")
	bin := filepath.Join(dir, "airlock")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	// Copied in build order with their times kept: the front and the core
	// refuse a sibling older than themselves from a modified tree.
	for _, name := range []string{"airlock", "airlock-core", "airlock-init"} {
		if err := copyExecutable(filepath.Join(filepath.Dir(e.bin), name), filepath.Join(dir, name)); err != nil {
			return nil, nil, err
		}
	}
	for _, d := range []string{"audit", "run"} {
		p := filepath.Join(dir, d)
		if err := os.Mkdir(p, 0o700); err != nil {
			return nil, nil, err
		}
		if out, err := exec.Command("chown", rootlessUID+":"+rootlessUID, p).CombinedOutput(); err != nil {
			return nil, nil, fmt.Errorf("chown %s: %v: %s", p, err, out)
		}
	}
	asUser = []string{"setpriv", "--reuid", rootlessUID, "--regid", rootlessUID, "--clear-groups", "--",
		"env", "-i", "PATH=/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/nonexistent", "XDG_RUNTIME_DIR=" + filepath.Join(dir, "run")}
	air = []string{bin, "--socket", filepath.Join(dir, "none.sock"), "run", "-q", "--rootless", "--workspace", "none",
		"--audit", filepath.Join(dir, "audit", "audit.jsonl"), "--", "/bin/true"}
	return asUser, air, nil
}

// copyExecutable copies src to dst (mode 0755) with src's modification time.
func copyExecutable(src, dst string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		return err
	}
	return os.Chtimes(dst, fi.ModTime(), fi.ModTime())
}

func pct(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	slicesSort(s)
	return s[int(float64(len(s)-1)*p)]
}

// lastJSON is the last line of out that starts with "{": airlock run may log
// after the command's own output.
func lastJSON(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "{") {
			return lines[i]
		}
	}
	return ""
}
