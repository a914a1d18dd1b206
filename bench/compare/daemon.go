package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

func slicesSort(v []float64) { slices.Sort(v) }

// daemonMeasures starts `airlock serve` (warm pool of 2) and measures the
// pooled create + exec of /bin/true (as bench's BenchmarkSandboxLifecycle:
// create, exec, delete, the pool refilled untimed in between), then the
// daemon's RSS with only its pool and with z.sandboxes idle sandboxes.
func (e *env) daemonMeasures(z sizes) ([]measure, error) {
	dir := filepath.Join(e.dir, "serve")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	base, err := os.ReadFile(e.config)
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "serve.yaml")
	most := z.sandboxes + tunnelSandboxes + z.manySandboxes + 16
	// The metrics listener on a free port: another daemon on this machine
	// (a developer's, a test's) may hold the default one.
	extra := fmt.Sprintf("api: {group: \"\"}\nmetrics: {listen: \"127.0.0.1:0\"}\nsandbox: {pool_size: 2, max_sandboxes: %d, max_sandboxes_per_owner: %d}\n", most, most)
	if err := os.WriteFile(cfg, append(base, extra...), 0o600); err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "api.sock")
	argv := []string{e.bin, "serve", "--config", cfg, "--socket", sock, "--run-dir", filepath.Join(dir, "run")}
	cmd, err := e.procs.start(filepath.Join(e.dir, "serve.out"), argv...)
	if err != nil {
		return nil, err
	}
	defer stop(cmd)
	c := client.New(sock)
	defer c.Close()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Minute)
	defer cancel()
	if err := waitPool(ctx, c); err != nil {
		return nil, err
	}
	pooled := subject{Name: "airlock serve (warm pool)", Command: "API: POST /sandboxes, exec /bin/true, DELETE (as bench's BenchmarkSandboxLifecycle); " + shellJoin(argv)}
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
	full := subject{Name: fmt.Sprintf("airlock serve, %d idle sandboxes", z.sandboxes), Command: shellJoin(argv) + fmt.Sprintf("; %d × POST /sandboxes", z.sandboxes)}
	full.Rounds = [][]metric{{{"RSS MiB", float64(rssKB(cmd.Process.Pid)) / 1024}}}
	tunnels, err := e.tunnelMeasure(ctx, z, c, cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	many, err := e.manyTunnelsMeasure(ctx, z, c, cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	return []measure{tunnels, many,
		{Name: "pooled create + exec (daemon API)", Primary: "create+exec p50 ms", Target: "< 10 ms", Subjects: []subject{pooled}},
		{Name: fmt.Sprintf("daemon RSS (gateway in process), %d idle sandboxes", z.sandboxes), Primary: "RSS MiB",
			Target: "< 64 MiB with 100", Subjects: []subject{idle, full}},
	}, nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

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
// host), then echoes a line on each; it reports the proxy's peak RSS, the
// rounds alternating. (An HTTP origin would close the idle connections: its
// read-header timeout is 10 s.)
func (e *env) tunnelMeasure(ctx context.Context, z sizes, c *client.Client, daemonPID int) (measure, error) {
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
	m := measure{Name: fmt.Sprintf("%d open CONNECT tunnels", z.tunnels), Primary: "peak RSS MiB", Target: "1,000 without errors",
		Subjects: []subject{
			{Name: "airlock serve", Command: fmt.Sprintf("in each of %d sandboxes of the daemon above (workspace %s), at once: %s", tunnelSandboxes, e.dir, shellJoin(air))},
			{Name: "squid", Peer: true, Command: shellJoin(sq)},
		}}
	for r := range z.rounds {
		for k := range 2 {
			var got []metric
			var err error
			if (k+r)%2 == 0 {
				got, err = daemonHold(ctx, c, ids, air, daemonPID)
				m.Subjects[0].Rounds = append(m.Subjects[0].Rounds, got)
			} else {
				got, _, err = holdRun(ctx, sq, e.squidPID)
				m.Subjects[1].Rounds = append(m.Subjects[1].Rounds, got)
			}
			if err != nil {
				return m, fmt.Errorf("tunnels round %d: %w", r+1, err)
			}
		}
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
	got, err := daemonHold(ctx, c, ids, argv, daemonPID)
	if err != nil {
		return measure{}, fmt.Errorf("%d tunnels: %w", z.manyTunnels, err)
	}
	return measure{Name: name, Primary: "answered",
		Higher: true, Target: fmt.Sprintf("%d without an error", z.manyTunnels),
		Subjects: []subject{{Name: "airlock serve", Rounds: [][]metric{got},
			Command: fmt.Sprintf("in each of %d sandboxes of the daemon above, at once: %s", z.manySandboxes, shellJoin(argv))}}}, nil
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
