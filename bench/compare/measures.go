package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
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
	// scanBytes are uploaded per body-scan run; loopN is the sustained
	// create + exec + delete loop's iterations (per client count);
	// daemonRounds are the daemon sessions of each build, alternating.
	scanBytes, loopN, daemonRounds int
}

// pathEnv is the environment of the commands run.
func pathEnv() []string {
	return []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
}

// inSandbox is argv run by `airlock run` of bin with the bench config and
// workspace.
func (e *env) inSandbox(bin string, argv ...string) []string {
	return e.inSandboxWith(bin, e.config, argv...)
}

// inSandboxWith is inSandbox with another config file.
func (e *env) inSandboxWith(bin, config string, argv ...string) []string {
	run := append([]string{bin, "run", "-q", "--config", config, "--workspace", e.dir, "--"}, argv...)
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
		viaSquid := append(append([]string{}, wrk...), "-s", script, "http://"+e.squid+"/")
		to := z.wrkFor + 2*time.Minute
		// Faster than squid at every concurrency; at keep-alive 1.5x, with
		// a p99 at or below squid's.
		goals := []goal{atLeast("req/s", 1, "squid")}
		if !c.close {
			goals = []goal{atLeast("req/s", 1.5, "squid"), atMost("p99 ms", 1, "squid")}
		}
		air := e.twin(func(bin string) subject {
			argv := e.inSandbox(bin, append(append([]string{}, wrk...), "-s", script, "http://127.0.0.1:3128/")...)
			return subject{Name: "airlock", Command: shellJoin(argv), run: e.exe(argv, to, parseWrk), Goals: goals}
		})
		ms = append(ms, measure{Name: c.name, Primary: "req/s", Higher: true, Subjects: []subject{
			{Name: "direct", Command: shellJoin(direct), run: e.exe(direct, to, parseWrk)},
			air,
			{Name: "squid", Peer: true, Command: shellJoin(viaSquid), run: e.exe(viaSquid, to, parseWrk)},
		}})
	}
	// Content inspection's cost: the same keep-alive load with it on (the
	// default) and off, in the same rounds.
	wrk := []string{"wrk", "-t2", "-c16", "-d" + strconv.Itoa(int(z.wrkFor.Seconds())) + "s", "--latency", "-H", "Host: " + benchHost,
		"-s", script, "http://127.0.0.1:3128/"}
	to := z.wrkFor + 2*time.Minute
	insp := func(name, config string, goals ...goal) subject {
		return e.twin(func(bin string) subject {
			argv := e.inSandboxWith(bin, config, wrk...)
			return subject{Name: name, Command: shellJoin(argv), run: e.exe(argv, to, parseWrk), Goals: goals}
		})
	}
	ms = append(ms, measure{Name: "HTTP keep-alive, 16 conns, content inspection on and off", Primary: "req/s", Higher: true,
		Subjects: []subject{
			insp("airlock, inspection on", e.config, atLeast("req/s", 0.9, "airlock, inspection off")),
			insp("airlock, inspection off", e.noInspect),
		}})
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
		sq := lc(url, append([]string{"-proxy", "http://" + e.squid, "-tunnel"}, tls...)...)
		// Plain HTTP inside a tunnel is parsed per request: at least
		// squid's byte relay. TLS end to end is spliced: 0.8x direct.
		g := atLeast("MB/s", 1, "squid")
		if c.scheme == "https" {
			g = atLeast("MB/s", 0.8, "direct")
		}
		air := e.twin(func(bin string) subject {
			argv := e.inSandbox(bin, lc(url, append([]string{"-proxy", "http://127.0.0.1:3128", "-tunnel"}, tls...)...)...)
			return subject{Name: "airlock", Command: shellJoin(argv), run: e.exe(argv, to, parseLoad(z.blob)), Goals: []goal{g}}
		})
		ms = append(ms, measure{Name: c.name + fmt.Sprintf(" (%d MiB)", z.blob>>20), Primary: "MB/s", Higher: true,
			Subjects: []subject{
				{Name: "direct", Command: shellJoin(direct), run: e.exe(direct, to, parseLoad(z.blob))},
				air,
				{Name: "squid", Peer: true, Command: shellJoin(sq), run: e.exe(sq, to, parseLoad(z.blob))},
			}})
	}
	url := "https://" + mitmHost + blob
	direct := lc(url, "-connect", e.host.IP.String()+":443", "-ca", e.caFile)
	air := e.twin(func(bin string) subject {
		argv := e.inSandbox(bin, lc(url, "-proxy", "http://127.0.0.1:3128")...)
		return subject{Name: "airlock", Command: shellJoin(argv), run: e.exe(argv, to, parseLoad(z.blob)),
			Goals: []goal{atLeast("MB/s", 0.5, "direct TLS")}}
	})
	sq := lc(url, "-proxy", "http://"+e.squidTLS, "-ca", e.squidCA)
	ms = append(ms, measure{Name: fmt.Sprintf("TLS interception bulk (%d MiB)", z.blob>>20), Primary: "MB/s", Higher: true,
		Subjects: []subject{
			{Name: "direct TLS", Command: shellJoin(direct), run: e.exe(direct, to, parseLoad(z.blob))},
			air,
			{Name: "squid ssl-bump", Peer: true, Command: shellJoin(sq), run: e.exe(sq, to, parseLoad(z.blob))},
		}})
	// The body scan: text uploads (scanned up to inspect.max_body_bytes, 8
	// MiB by default, so each is 4 MiB) through the gateway with content
	// inspection on and off, against direct.
	const part = 4 << 20
	n := z.scanBytes / part
	sink := "http://" + benchHost + "/sink"
	up := func(extra ...string) []string {
		return append([]string{e.client, "-url", sink, "-n", strconv.Itoa(n), "-c", "1", "-max", "4m", "-upload", strconv.Itoa(part)}, extra...)
	}
	scan := func(name, config string, goals ...goal) subject {
		return e.twin(func(bin string) subject {
			argv := e.inSandboxWith(bin, config, up("-proxy", "http://127.0.0.1:3128")...)
			return subject{Name: name, Command: shellJoin(argv), run: e.exe(argv, to, parseLoad(n*part)), Goals: goals}
		})
	}
	sd := up("-connect", e.host.IP.String()+":80")
	ms = append(ms, measure{Name: fmt.Sprintf("content inspection, body scan (%d text uploads of 4 MiB)", n), Primary: "MB/s", Higher: true,
		Subjects: []subject{
			{Name: "direct", Command: shellJoin(sd), run: e.exe(sd, to, parseLoad(n*part))},
			scan("airlock, inspection on", e.config, over("MB/s", 1000)),
			scan("airlock, inspection off", e.noInspect),
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
	for _, c := range []struct {
		name, qname string
		target      bool
	}{{"DNS cached allowed name", benchHost, true}, {"DNS denied name", deniedName, false}} {
		qf := filepath.Join(e.dir, "alk-queries-"+strings.ReplaceAll(c.qname, ".", "-"))
		if err := os.WriteFile(qf, []byte(c.qname+" A\n"), 0o644); err != nil {
			return nil, err
		}
		perf := func(server, port string) []string {
			return []string{"dnsperf", "-s", server, "-p", port, "-d", qf, "-l", secs, "-c", "8", "-T", "2", "-q", "200"}
		}
		direct := perf(e.net.DNSAddr.Addr().String(), "53")
		// Inside the sandbox the filter is the resolver of /etc/resolv.conf.
		cmd := `exec dnsperf -s "$(sed -n 's/^nameserver //p' /etc/resolv.conf | head -n1)" -p 53 -d ` + qf + " -l " + secs + " -c 8 -T 2 -q 200"
		hostPort := func(a string) (string, string) { h, p, _ := strings.Cut(a, ":"); return h, p }
		mh, mp := hostPort(e.dnsmasq)
		uh, up := hostPort(e.unbound)
		masq, unb := perf(mh, mp), perf(uh, up)
		to := z.dnsFor + time.Minute
		var goals []goal
		if c.target {
			goals = []goal{atLeast("q/s", 1, "dnsmasq")}
		}
		air := e.twin(func(bin string) subject {
			argv := e.inSandbox(bin, "/bin/sh", "-c", cmd)
			return subject{Name: "airlock", Command: shellJoin(argv), run: e.exe(argv, to, parseDnsperf), Goals: goals}
		})
		ms = append(ms, measure{Name: c.name, Primary: "q/s", Higher: true, Subjects: []subject{
			{Name: "direct (authoritative)", Command: shellJoin(direct), run: e.exe(direct, to, parseDnsperf)},
			air,
			{Name: "dnsmasq", Peer: true, Command: shellJoin(masq), run: e.exe(masq, to, parseDnsperf)},
			{Name: "unbound", Peer: true, Command: shellJoin(unb), run: e.exe(unb, to, parseDnsperf)},
		}})
	}
	return ms, nil
}

// --- sandbox start (hyperfine) ---

// startName is the sandbox-start measure's name (the daemon's row refers to
// its bubblewrap).
const startName = "sandbox start, whole process"

// hyperfine is a subject timing cmd (one command line, no shell) with
// hyperfine: median and p90 of runs after 2 warm-ups.
func (e *env) hyperfine(name string, runs int, cmd string) subject {
	e.hfN++
	jf := filepath.Join(e.dir, fmt.Sprintf("alk-hyperfine-%03d.json", e.hfN))
	argv := []string{"hyperfine", "-N", "--style", "none", "--warmup", "2", "--runs", strconv.Itoa(runs), "--export-json", jf, cmd}
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

// startMeasure: `airlock run -- /bin/true` in-process as root, and rootless
// as an unprivileged user, beside bubblewrap (as root and as that user),
// unshare and fork+exec (direct). The run through a daemon is measured with
// the daemon (daemon.go) and compared with this measure's bubblewrap.
func (e *env) startMeasure(z sizes) measure {
	hf := func(name, cmd string) subject { return e.hyperfine(name, z.startRuns, cmd) }
	bw := hf("bubblewrap", "bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc -- /bin/true")
	bw.Peer = true
	un := hf("unshare", "unshare --mount --uts --ipc --net --pid --cgroup --fork /bin/true")
	un.Peer = true
	air := e.twin(func(bin string) subject {
		s := hf("airlock run in-process (root)", shellJoin([]string{bin, "run", "-q", "--no-daemon", "--config", e.config, "--", "/bin/true"}))
		s.Goals = []goal{atMost("median ms", 3, "bubblewrap")}
		return s
	}, "--no-daemon")
	subjects := []subject{hf("direct", "/bin/true"), air, un, bw}
	// Rootless: airlock run and bubblewrap as an ordinary user (both make
	// a user namespace of their own).
	if e.user != nil {
		uname := "bubblewrap (" + e.user.name + ")"
		rl := e.twin(func(bin string) subject {
			d := e.rootless[bin]
			argv := append(e.user.asUser(d.run), d.bin, "--socket", d.sock, "run", "-q", "--rootless", "--workspace", "none",
				"--audit", filepath.Join(d.audit, "audit.jsonl"), "--", "/bin/true")
			s := hf("airlock run rootless ("+e.user.name+")", shellJoin(argv))
			s.Goals = []goal{atMost("median ms", 3, uname)}
			return s
		}, "--rootless")
		bwu := hf(uname, shellJoin(append(e.user.asUser("/nonexistent"), "bwrap", "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--", "/bin/true")))
		bwu.Peer = true
		subjects = append(subjects, rl, bwu)
	} else {
		subjects = append(subjects, subject{Name: "airlock run rootless", Note: "not measured: no -rootless-user (make bench-compare passes alk-ci)"})
	}
	return measure{Name: startName, Primary: "median ms", Higher: false, Subjects: subjects}
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
