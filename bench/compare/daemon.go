package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

func slicesSort(v []float64) { slices.Sort(v) }

// daemonRounds runs the daemon measures with a daemon of each build in
// turn, z.daemonRounds times, the first build alternating, and merges them:
// the before build's numbers become each airlock subject's Before (n/a
// where that build's daemon lacks a feature the measures need).
func (e *env) daemonRounds(log *slog.Logger, z sizes) ([]measure, error) {
	var after, before []measure
	var beforeNA string
	for r := range z.daemonRounds {
		builds := []string{e.bin}
		if e.before != "" && beforeNA == "" {
			builds = append(builds, e.before)
			if r%2 == 1 {
				builds[0], builds[1] = builds[1], builds[0]
			}
		}
		for _, bin := range builds {
			t0 := time.Now()
			ms, err := e.daemonMeasures(z, bin)
			if bin == e.before && errors.Is(err, errLacks) {
				beforeNA = "n/a: " + err.Error()
				log.Info("before build's daemon lacks a feature", "err", err)
				continue
			}
			if err != nil {
				if bin == e.before {
					err = fmt.Errorf("before build: %w", err)
				}
				return nil, err
			}
			log.Info("measured", "daemon", bin, "round", r+1, "took", time.Since(t0).Round(time.Millisecond))
			if bin == e.bin {
				after = mergeRounds(after, ms)
			} else {
				before = mergeRounds(before, ms)
			}
		}
	}
	if e.before != "" {
		for i := range after {
			for j := range after[i].Subjects {
				s := &after[i].Subjects[j]
				if s.Peer {
					continue
				}
				b := subject{Name: "before", Note: beforeNA}
				if beforeNA == "" && i < len(before) && j < len(before[i].Subjects) {
					b = before[i].Subjects[j]
					b.Name, b.Goals = "before", nil
				}
				s.Before = &b
			}
		}
	}
	return after, nil
}

// mergeRounds appends the rounds of one daemon session's measures to those
// of the earlier sessions (the same measures in the same order).
func mergeRounds(into, ms []measure) []measure {
	if into == nil {
		return ms
	}
	for i := range into {
		for j := range into[i].Subjects {
			if i < len(ms) && j < len(ms[i].Subjects) {
				s, next := &into[i].Subjects[j], ms[i].Subjects[j]
				s.Rounds = append(s.Rounds, next.Rounds...)
				if next.Note != "" {
					s.Note = strings.TrimPrefix(s.Note+"; "+next.Note, "; ")
				}
			}
		}
	}
	return into
}

// daemonMeasures starts `airlock serve` of bin (warm pool of 2) and measures
// the pooled create + exec of /bin/true (as bench's BenchmarkSandboxLifecycle:
// create, exec, delete, the pool refilled untimed in between), a sustained
// create + exec + delete loop from 1 and 8 clients (the pool not waited
// for), `airlock run -- /bin/true` through it, the daemon's RSS with only its
// pool and with z.sandboxes idle sandboxes, and its tunnels (beside squid's,
// for this build only).
func (e *env) daemonMeasures(z sizes, bin string) ([]measure, error) {
	name := "serve"
	if bin == e.before {
		name = "serve-before"
	}
	// A build's sessions share its directory: its run directory is what a
	// daemon recovers from should the one before it not have cleaned up.
	dir := filepath.Join(e.dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	base, err := os.ReadFile(e.config)
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "serve.yaml")
	most := z.sandboxes + tunnelSandboxes + z.manySandboxes + 16
	// Metrics on a port of its own: another daemon on this machine may hold
	// the default one.
	extra := fmt.Sprintf("api: {group: \"\"}\nmetrics: {listen: \"127.0.0.1:0\"}\nsandbox: {pool_size: 2, max_sandboxes: %d, max_sandboxes_per_owner: %d}\n", most, most)
	if err := os.WriteFile(cfg, append(base, extra...), 0o600); err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "api.sock")
	argv := []string{bin, "serve", "--config", cfg, "--socket", sock, "--run-dir", filepath.Join(dir, "run")}
	logFile := filepath.Join(e.dir, name+".out")
	cmd, err := e.procs.start(logFile, argv...)
	if err != nil {
		return nil, err
	}
	defer stop(cmd)
	c := client.New(sock)
	defer c.Close()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Minute)
	defer cancel()
	if err := waitStarted(ctx, c, cmd.Process.Pid); err != nil {
		// A build that does not know a flag or key says so in its log.
		logged, _ := os.ReadFile(logFile)
		if line := lackLine(string(logged)); line != "" {
			return nil, fmt.Errorf("%w: %s", errLacks, line)
		}
		return nil, fmt.Errorf("%w: %s", err, tail(string(logged), 800))
	}
	pooled := subject{Name: "airlock serve (warm pool)", Command: "API: POST /sandboxes, exec /bin/true, DELETE (as bench's BenchmarkSandboxLifecycle); " + shellJoin(argv),
		Goals: []goal{under("create+exec p50 ms", 10)}}
	var create, both []float64
	for range z.pooledN {
		if err := waitPool(ctx, c); err != nil {
			return nil, err
		}
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			return nil, fmt.Errorf("create: %w", err)
		}
		t1 := time.Now()
		res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Argv: []string{"/bin/true"}}, client.ExecIO{})
		if err != nil || res.ExitStatus != 0 {
			return nil, fmt.Errorf("exec /bin/true: %v %+v", err, res)
		}
		t2 := time.Now()
		if _, err := c.DeleteSandbox(ctx, sb.ID); err != nil {
			return nil, fmt.Errorf("delete: %w", err)
		}
		create, both = append(create, ms(t1.Sub(t0))), append(both, ms(t2.Sub(t0)))
	}
	pooled.Rounds = [][]metric{{{"create+exec p50 ms", pct(both, 0.5)}, {"create p50 ms", pct(create, 0.5)}, {"create+exec p90 ms", pct(both, 0.9)}}}
	loop := measure{Name: fmt.Sprintf("sustained create + exec + delete (%d in a row, the pool not waited for)", z.loopN), Primary: "p50 ms"}
	for _, clients := range []int{1, 8} {
		if err := waitPool(ctx, c); err != nil {
			return nil, err
		}
		got, err := sustainedLoop(ctx, c, clients, z.loopN)
		if err != nil {
			return nil, fmt.Errorf("sustained loop, %d clients: %w", clients, err)
		}
		loop.Subjects = append(loop.Subjects, subject{Name: fmt.Sprintf("airlock serve, %d client%s", clients, map[bool]string{true: "s"}[clients > 1]),
			Command: fmt.Sprintf("API, %d clients at once, %d iterations in all: POST /sandboxes, exec /bin/true, DELETE, back to back; %s", clients, z.loopN, shellJoin(argv)),
			Rounds:  [][]metric{got}, Goals: []goal{under("p50 ms", 10), under("p99 ms", 25)}})
	}
	// `airlock run` through the daemon: the front alone, the sandbox from
	// the pool.
	if err := waitPool(ctx, c); err != nil {
		return nil, err
	}
	viaDaemon := e.hyperfine("airlock run through a daemon", z.startRuns, shellJoin([]string{bin, "--socket", sock, "run", "-q", "--workspace", e.dir, "--", "/bin/true"}))
	viaDaemon.Goals = []goal{{Metric: "median ms", Op: "<=", Factor: 2, Ref: "bubblewrap", RefMeasure: startName}}
	got, out, err := viaDaemon.run()
	if err != nil {
		return nil, fmt.Errorf("airlock run through the daemon: %w: %s", err, tail(out, 600))
	}
	viaDaemon.Rounds = [][]metric{got}
	idle := subject{Name: "airlock serve, pool only", Command: shellJoin(argv)}
	if err := waitPool(ctx, c); err != nil {
		return nil, err
	}
	time.Sleep(2 * time.Second)
	idle.Rounds = [][]metric{{{"RSS MiB", float64(rssKB(cmd.Process.Pid)) / 1024}}}
	for i := range z.sandboxes {
		if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Labels: map[string]string{"alk-compare": fmt.Sprint(i)}}); err != nil {
			return nil, fmt.Errorf("create sandbox %d of %d: %w", i+1, z.sandboxes, err)
		}
	}
	time.Sleep(3 * time.Second)
	full := subject{Name: fmt.Sprintf("airlock serve, %d idle sandboxes", z.sandboxes), Command: shellJoin(argv) + fmt.Sprintf("; %d × POST /sandboxes", z.sandboxes),
		Goals: []goal{under("RSS MiB", 64)}}
	full.Rounds = [][]metric{{{"RSS MiB", float64(rssKB(cmd.Process.Pid)) / 1024}}}
	tunnels, err := e.tunnelMeasure(ctx, z, c, cmd.Process.Pid, bin == e.bin)
	if err != nil {
		return nil, err
	}
	many, err := e.manyTunnelsMeasure(ctx, z, c, cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	return []measure{
		{Name: daemonStartName, Primary: "median ms", Subjects: []subject{viaDaemon}},
		tunnels, many,
		{Name: "pooled create + exec (daemon API)", Primary: "create+exec p50 ms", Subjects: []subject{pooled}},
		loop,
		{Name: fmt.Sprintf("daemon RSS (gateway in process), %d idle sandboxes", z.sandboxes), Primary: "RSS MiB",
			Subjects: []subject{idle, full}},
	}, nil
}

// sustainedLoop runs n create + exec /bin/true + delete iterations from
// clients at once, back to back (the pool is not waited for): p50, p90 and
// p99 of an iteration, and sandboxes a second. Any failure fails it.
func sustainedLoop(ctx context.Context, c *client.Client, clients, n int) ([]metric, error) {
	var mu sync.Mutex
	var lat []float64
	var first error
	var wg sync.WaitGroup
	var next atomic.Int64
	t0 := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				s := time.Now()
				sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Labels: map[string]string{"alk-compare": "loop"}})
				if err == nil {
					var res *api.ExecResult
					res, err = c.Exec(ctx, sb.ID, api.ExecRequest{Argv: []string{"/bin/true"}}, client.ExecIO{})
					if err == nil && res.ExitStatus != 0 {
						err = fmt.Errorf("exec /bin/true: exit status %d (%s)", res.ExitStatus, res.Error)
					}
					if _, derr := c.DeleteSandbox(ctx, sb.ID); err == nil {
						err = derr
					}
				}
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				lat = append(lat, ms(time.Since(s)))
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(t0)
	if first != nil {
		return nil, first
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return []metric{{"p50 ms", pct(lat, 0.5)}, {"p90 ms", pct(lat, 0.9)}, {"p99 ms", pct(lat, 0.99)},
		{"sandboxes/s", float64(len(lat)) / took.Seconds()}}, nil
}

// daemonStartName is the measure of `airlock run` through the daemon.
const daemonStartName = "sandbox start through a daemon"

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// waitStarted is waitPool for a daemon just started: it gives up as soon as
// the daemon has exited (a zombie: nothing waited for it yet).
func waitStarted(ctx context.Context, c *client.Client, pid int) error {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		h, err := c.Health(hctx)
		cancel()
		if err == nil && h.PoolDepth >= 2 {
			return nil
		}
		if exited(pid) {
			return fmt.Errorf("the daemon exited")
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the daemon's warm pool did not fill within a minute")
}

// exited says whether pid is gone or a zombie.
func exited(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command's closing parenthesis.
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

func waitPool(ctx context.Context, c *client.Client) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		h, err := c.Health(hctx)
		cancel()
		if err == nil && h.PoolDepth >= 2 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the daemon's warm pool did not fill within a minute")
}

// tunnelSandboxes share the daemon's tunnels: the gateway caps one
// sandbox at gateway.DefaultMaxTunnelsPerSandbox (512).
const tunnelSandboxes = 4

// tunnelMeasure holds z.tunnels CONNECT tunnels to the fake host's TCP echo
// port open through the daemon's gateway (spread over tunnelSandboxes new
// sandboxes, the client exec'd in each) and through squid (one client on the
// host, withSquid only: once is enough, with this build's daemon), then
// echoes a line on each; it reports the proxy's peak RSS. (An HTTP origin would close the idle connections: its
// read-header timeout is 10 s.)
func (e *env) tunnelMeasure(ctx context.Context, z sizes, c *client.Client, daemonPID int, withSquid bool) (measure, error) {
	hold := func(n int, proxy string) []string {
		return []string{e.client, "-hold", fmt.Sprint(n), "-url", "tcp://" + benchHost + ":7", "-proxy", proxy, "-max", z.tunnelHold.String()}
	}
	per := z.tunnels / tunnelSandboxes
	ids := make([]string, tunnelSandboxes)
	for i := range ids {
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Workspace: e.dir, Labels: map[string]string{"alk-compare": "tunnels"}})
		if err != nil {
			return measure{}, fmt.Errorf("create tunnel sandbox: %w", err)
		}
		ids[i] = sb.ID
	}
	air := hold(per, "http://127.0.0.1:3128")
	sq := hold(z.tunnels, "http://"+e.squid)
	m := measure{Name: fmt.Sprintf("%d open CONNECT tunnels", z.tunnels), Primary: "peak RSS MiB",
		Subjects: []subject{
			{Name: "airlock serve", Command: fmt.Sprintf("in each of %d sandboxes of the daemon above (workspace %s), at once: %s", tunnelSandboxes, e.dir, shellJoin(air)),
				Goals: []goal{atMost("peak RSS MiB", 1, "squid"), equal("errors", 0)}},
			{Name: "squid", Peer: true, Command: shellJoin(sq)},
		}}
	// One hold through the daemon per session (the sessions are its
	// rounds), then squid's (with this build's daemon only).
	t0 := time.Now()
	got, err := daemonHold(ctx, c, ids, air, daemonPID)
	if err != nil {
		return m, fmt.Errorf("tunnels: %w", err)
	}
	m.Subjects[0].Rounds = append(m.Subjects[0].Rounds, got)
	m.Subjects[0].Note = e.whyFailed(got, t0)
	if withSquid {
		got, _, err := holdRun(ctx, sq, e.squidPID)
		if err != nil {
			return m, fmt.Errorf("squid's tunnels: %w", err)
		}
		m.Subjects[1].Rounds = append(m.Subjects[1].Rounds, got)
	}
	return m, nil
}

// manyTunnelsMeasure holds z.manyTunnels CONNECT tunnels open at once
// through the daemon's gateway, spread over z.manySandboxes new sandboxes
// (the gateway caps one sandbox at 512), then echoes a line on each: every
// one must be answered. It reports the daemon's peak RSS and descriptors.
// The hold (12 s after the last one opened) stays inside the fake host's
// echo deadline (60 s from accept).
//
// Every tunnel is two of the daemon's descriptors: where its RLIMIT_NOFILE
// (raised at start as far as the machine lets it) cannot hold z.manyTunnels
// besides what it already has open, the measure holds as many as it can and
// its name says the limit.
func (e *env) manyTunnelsMeasure(ctx context.Context, z sizes, c *client.Client, daemonPID int) (measure, error) {
	n, name := z.manyTunnels, fmt.Sprintf("%d open CONNECT tunnels, %d sandboxes", z.manyTunnels, z.manySandboxes)
	if limit := nofileSoft(daemonPID); limit > 0 {
		// Headroom: the sandboxes' own descriptors (about 25 each), the API,
		// the audit log, DNS.
		room := (limit - openFDs(daemonPID) - 40*z.manySandboxes - 256) / 2
		if room < n {
			n = max(room/z.manySandboxes*z.manySandboxes, z.manySandboxes)
			name = fmt.Sprintf("%d open CONNECT tunnels, %d sandboxes (the daemon's descriptor limit, %d, holds no more)", n, z.manySandboxes, limit)
		}
	}
	per := n / z.manySandboxes
	argv := []string{e.client, "-hold", fmt.Sprint(per), "-url", "tcp://" + benchHost + ":7", "-proxy", "http://127.0.0.1:3128", "-max", "24s"}
	ids := make([]string, z.manySandboxes)
	for i := range ids {
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Workspace: e.dir, Labels: map[string]string{"alk-compare": "many-tunnels"}})
		if err != nil {
			return measure{}, fmt.Errorf("create sandbox %d of %d for %d tunnels: %w", i+1, len(ids), z.manyTunnels, err)
		}
		ids[i] = sb.ID
	}
	t0 := time.Now()
	got, err := daemonHold(ctx, c, ids, argv, daemonPID)
	if err != nil {
		return measure{}, fmt.Errorf("%d tunnels: %w", z.manyTunnels, err)
	}
	return measure{Name: name, Primary: "answered",
		Higher: true,
		Subjects: []subject{{Name: "airlock serve", Rounds: [][]metric{got}, Goals: []goal{over("answered", float64(n)), equal("errors", 0)},
			Note:    e.whyFailed(got, t0),
			Command: fmt.Sprintf("in each of %d sandboxes of the daemon above, at once: %s", z.manySandboxes, shellJoin(argv))}}}, nil
}

// whyFailed says, when a hold counted errors, which refusals the audit log
// recorded for the echo port since t0 ("" when there were no errors).
func (e *env) whyFailed(got []metric, t0 time.Time) string {
	for _, m := range got {
		if m.Name == "errors" && m.Value > 0 {
			return fmt.Sprintf("%.0f errors; the audit log's refusals of port 7 since the hold began: %s", m.Value,
				denials(filepath.Join(e.dir, "state", "audit", "audit.jsonl"), 7, t0))
		}
	}
	return ""
}

// denials counts the deny and error records for port in the audit file at
// or after since, by their first reason ("none" when there are none).
func denials(file string, port int, since time.Time) string {
	f, err := os.Open(file)
	if err != nil {
		return "unread: " + err.Error()
	}
	defer f.Close()
	count := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte(`"decision":"deny"`)) && !bytes.Contains(line, []byte(`"decision":"error"`)) {
			continue
		}
		var r struct {
			TS       time.Time `json:"ts"`
			Decision string    `json:"decision"`
			Port     int       `json:"port"`
			Status   int       `json:"status"`
			Reasons  []struct {
				ID string `json:"id"`
			} `json:"reasons"`
		}
		if json.Unmarshal(line, &r) != nil || r.Port != port || r.TS.Before(since) {
			continue
		}
		why := r.Decision
		if len(r.Reasons) > 0 {
			why += " " + r.Reasons[0].ID
		}
		count[fmt.Sprintf("%s (%d)", why, r.Status)]++
	}
	if len(count) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(count)) {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, count[k]))
	}
	return strings.Join(parts, ", ")
}

// daemonHold execs argv (a loadclient -hold) in every sandbox of ids at once
// and samples the daemon's RSS until all have finished.
func daemonHold(ctx context.Context, c *client.Client, ids []string, argv []string, daemonPID int) ([]metric, error) {
	base := rssKB(daemonPID)
	type result struct {
		out string
		err error
	}
	done := make(chan result, len(ids))
	for _, id := range ids {
		go func() {
			var out strings.Builder
			res, err := c.Exec(ctx, id, api.ExecRequest{Argv: argv}, client.ExecIO{Stdout: &out, Stderr: io.Discard})
			if err == nil && res.ExitStatus != 0 {
				err = fmt.Errorf("exit status %d (%s)", res.ExitStatus, res.Error)
			}
			done <- result{out.String(), err}
		}()
	}
	var peak int64
	var fds int
	var answered, errs float64
	var firstErr string
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for left := len(ids); left > 0; {
		select {
		case r := <-done:
			left--
			if r.err != nil {
				return nil, fmt.Errorf("hold in a sandbox: %w: %s", r.err, tail(r.out, 400))
			}
			var h struct {
				Answered, Errors int
				FirstErr         string `json:"first_error"`
			}
			if err := jsonUnmarshal(lastJSON(r.out), &h); err != nil {
				return nil, err
			}
			if h.FirstErr != "" && firstErr == "" {
				firstErr = h.FirstErr
			}
			answered += float64(h.Answered)
			errs += float64(h.Errors)
		case <-tick.C:
			peak = max(peak, rssKB(daemonPID))
			fds = max(fds, openFDs(daemonPID))
		}
	}
	if firstErr != "" {
		slog.Warn("tunnels failed", "errors", errs, "first", firstErr)
	}
	return []metric{{"peak RSS MiB", float64(peak) / 1024}, {"answered", answered}, {"errors", errs}, {"RSS before MiB", float64(base) / 1024}, {"peak fds", float64(fds)}}, nil
}

// holdRun runs a loadclient -hold and samples the RSS of pid (0: the
// command's own process, `airlock run`) until it exits.
func holdRun(ctx context.Context, argv []string, pid int) ([]metric, string, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	terminate(cmd)
	cmd.Env = pathEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	own := pid == 0
	if own {
		pid = cmd.Process.Pid
	}
	base := rssKB(pid)
	done := make(chan string)
	go func() {
		var b strings.Builder
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
		}
		done <- b.String()
	}()
	var peak int64
	var out string
	for tick := time.NewTicker(100 * time.Millisecond); ; {
		select {
		case out = <-done:
			tick.Stop()
		case <-tick.C:
			peak = max(peak, rssKB(pid))
			continue
		}
		break
	}
	err = cmd.Wait()
	all := out + stderr.String()
	if err != nil {
		return nil, all, fmt.Errorf("%s: %w: %s", argv[0], err, tail(all, 600))
	}
	var r struct {
		Opened, Answered, Errors int
		FirstErr                 string `json:"first_error"`
	}
	if err := jsonUnmarshal(lastJSON(out), &r); err != nil {
		return nil, all, err
	}
	m := []metric{{"peak RSS MiB", float64(peak) / 1024}, {"answered", float64(r.Answered)}, {"errors", float64(r.Errors)}}
	if !own {
		m = append(m, metric{"RSS before MiB", float64(base) / 1024})
	}
	return m, all, nil
}
