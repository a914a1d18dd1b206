package main

import (
	"bufio"
	"context"
	"fmt"
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

func ctxBG() context.Context { return context.Background() }

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
	extra := fmt.Sprintf("api: {group: \"\"}\nsandbox: {pool_size: 2, max_sandboxes: %d, max_sandboxes_per_owner: %d}\n", z.sandboxes+8, z.sandboxes+8)
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
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
	return []measure{
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

// tunnelMeasure holds z.tunnels CONNECT tunnels open through airlock (the
// client in `airlock run`, whose process is the gateway) and through squid,
// then sends one request on each; it reports the proxy's peak RSS.
func (e *env) tunnelMeasure(z sizes) measure {
	hold := func(proxy string) []string {
		return []string{e.client, "-hold", fmt.Sprint(z.tunnels), "-url", "http://" + benchHost + "/small", "-proxy", proxy, "-max", z.tunnelHold.String()}
	}
	air := e.inSandbox(hold("http://127.0.0.1:3128")...)
	sq := hold("http://" + e.squid)
	return measure{Name: fmt.Sprintf("%d open CONNECT tunnels", z.tunnels), Primary: "peak RSS MiB", Target: "1,000 without errors",
		Subjects: []subject{
			{Name: "airlock", Command: shellJoin(air), run: func() ([]metric, string, error) { return holdRun(air, 0) }},
			{Name: "squid", Peer: true, Command: shellJoin(sq), run: func() ([]metric, string, error) { return holdRun(sq, e.squidPID) }},
		}}
}

// holdRun runs a loadclient -hold and samples the RSS of pid (0: the
// command's own process, `airlock run`) until it exits.
func holdRun(argv []string, pid int) ([]metric, string, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = pathEnv
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
