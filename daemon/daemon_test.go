package daemon

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/netns"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/sandboxd"
	"github.com/airlock-dev/airlock/test/fakenet"
	"github.com/airlock-dev/airlock/test/roottest"
)

func TestMain(m *testing.M) {
	if sandboxd.IsStage() {
		// A rootless sandbox's init builds its island through the hook.
		sandboxd.InitMainWith(sandboxd.InitHooks{Island: netns.BuildIsland})
	}
	if os.Getenv(unprivAllowEnv) != "" {
		os.Exit(unprivAllowClient()) // TestRootAllowInvisibleWildcardRefused's user
	}
	if os.Getenv(unprivBindEnv) != "" {
		os.Exit(unprivBindClient()) // TestRootSecretBindingAttached's user
	}
	if os.Getenv(unprivSocketEnv) != "" {
		os.Exit(unprivClient()) // TestRootSandboxOwners' other user
	}
	if os.Getenv(floodModeEnv) != "" {
		os.Exit(floodClient()) // TestRootAPIConnFlood's other users
	}
	os.Exit(m.Run())
}

func TestResolvConfUpstreams(t *testing.T) {
	tests := []struct {
		name, text string
		want       []string
		wantErr    bool
	}{
		{name: "two", text: "# c\nnameserver 1.1.1.1\nsearch x\nnameserver 2606:4700::1111\n", want: []string{"1.1.1.1:53", "[2606:4700::1111]:53"}},
		{name: "stub", text: "nameserver 127.0.0.53\noptions edns0\n", want: []string{"127.0.0.53:53"}},
		{name: "zone skipped", text: "nameserver fe80::1%eth0\nnameserver 9.9.9.9\n", want: []string{"9.9.9.9:53"}},
		{name: "none", text: "search example\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "resolv.conf")
			if err := os.WriteFile(p, []byte(tt.text), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := resolvConfUpstreams(p)
			if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, %v; want %v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestHiddenPaths(t *testing.T) {
	cfg := config.Default()
	cfg.Secrets.File = "/etc/airlock/secrets.yaml"
	cfg.Audit.File = "/srv/log/audit.jsonl"
	h := hiddenPaths(Options{ConfigPath: "/srv/airlock.yaml", RunDir: "/run/airlock/run-1"}, cfg, "/run/airlock/run-1/ca/ca.key")
	for _, want := range []string{"/srv/airlock.yaml", "/etc/airlock/ca.key", "/run/airlock/run-1/ca/ca.key",
		"/etc/airlock/secrets.yaml", "/srv/log", "/srv/log/audit.jsonl.key", cfg.API.Socket, "/run/airlock/run-1"} {
		if !slices.Contains(h, want) {
			t.Errorf("hidden paths %v lack %s", h, want)
		}
	}
}

type testNet struct {
	*fakenet.Net
	pypi, evil *fakenet.Host
}

// newTestDaemon builds a daemon against a fresh fake internet with pypi.org
// and evil.example on it; the caller closes the daemon.
func newTestDaemon(t *testing.T, edit ...func(*config.Config)) (*Daemon, *testNet, config.Config, string) {
	t.Helper()
	return newTestDaemonPool(t, false, edit...)
}

// newTestDaemonPool is newTestDaemon, with the warm pool when pool is set.
func newTestDaemonPool(t *testing.T, pool bool, edit ...func(*config.Config)) (*Daemon, *testNet, config.Config, string) {
	t.Helper()
	tn, cfg, dir := newTestConfig(t, edit...)
	runDir := filepath.Join(dir, "run")
	d, err := New(context.Background(), Options{Config: cfg, EphemeralCA: true, RunDir: runDir, Pool: pool,
		Executor: &sandboxd.Config{InitArgs: []string{}}})
	if err != nil {
		t.Fatal(err)
	}
	return d, tn, cfg, runDir
}

// newTestConfig starts a fake internet with pypi.org and evil.example on it
// and returns a daemon config for it (edit applied) and the directory its
// files are in.
func newTestConfig(t *testing.T, edit ...func(*config.Config)) (*testNet, config.Config, string) {
	t.Helper()
	roottest.Require(t)
	n := fakenet.Start(t)
	pypi, evil := n.Host(t, "pypi.org"), n.Host(t, "evil.example")
	dir := t.TempDir()
	if err := n.WriteCA(filepath.Join(dir, "upstream-ca.pem")); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.DNS.Upstreams = []string{n.DNSAddr.String()}
	cfg.Upstream.AllowCIDRs = []string{n.Subnet.String()}
	cfg.Upstream.CAFile = filepath.Join(dir, "upstream-ca.pem")
	cfg.Audit.File = filepath.Join(dir, "audit.jsonl")
	cfg.CA.Cert, cfg.CA.Key = filepath.Join(dir, "none.pem"), filepath.Join(dir, "none.key")
	// The default 100ms evaluation deadline is for production; a -race run
	// on a loaded 2-core machine passes it now and then, and the fail-closed
	// policy_error deny (decision "error") is not what these tests count.
	cfg.Policy.EvalTimeout = config.Duration(config.MaxEvalTimeout)
	for _, e := range edit {
		e(&cfg)
	}
	return &testNet{Net: n, pypi: pypi, evil: evil}, cfg, dir
}

// TestRootRun runs a real task against a fake internet: an allowed registry is
// reached through the gateway (intercepted with the per-run CA the sandbox
// trusts), a denied host sees no connection, and the namespace is gone after.
func TestRootRun(t *testing.T) {
	d, n, cfg, runDir := newTestDaemon(t)
	pypi, evil := n.pypi, n.evil
	// A daemon for one task prepares no pooled sandboxes (Options.Pool).
	if d.pool.size != 0 {
		t.Fatalf("pool of %d for a single run, want none", d.pool.size)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			d.Close()
		}
	})
	var stdout, stderr bytes.Buffer
	runID := uniqueID("alk-daemon-run")
	res, err := d.Run(context.Background(), Task{ID: runID, Argv: []string{"sh", "-c",
		"curl -sS --max-time 20 https://pypi.org/simple/ && curl -sS --max-time 20 -o /dev/null -w '%{http_code}' https://evil.example/ ; exit 0"},
		Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitStatus() != 0 || !strings.Contains(stdout.String(), "hello from pypi.org /simple/") {
		t.Fatalf("exit %d, stdout %q, stderr %q", res.ExitStatus(), stdout.String(), stderr.String())
	}
	if pypi.Requests() != 1 {
		t.Fatalf("pypi.org saw %d requests, want 1", pypi.Requests())
	}
	if evil.Conns() != 0 {
		t.Fatalf("evil.example saw %d connections, want 0", evil.Conns())
	}
	if _, err := os.Stat("/run/netns/airlock-" + runID); !os.IsNotExist(err) {
		t.Fatalf("namespace left behind: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if _, err := os.Stat(runDir); !os.IsNotExist(err) {
		t.Fatalf("run dir left behind: %v", err)
	}
	var kinds []string
	for _, r := range audittest.ReadLog(t, cfg.Audit.File) {
		kinds = append(kinds, r.Kind+":"+r.Decision+":"+r.Host)
	}
	for _, want := range []string{"connect:allow:pypi.org", "http:allow:pypi.org", "connect:deny:evil.example", "exec:allow:"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("audit %v lacks %s", kinds, want)
		}
	}
}

// TestRootOwnAddressRefused: a name the policy allows that resolves to one of
// the gateway host's own addresses (here the fake internet's host-side veth,
// inside upstream.allow_cidrs) is refused, and a server on that address sees no
// connection. Regression: the daemon gave neither the gateway nor the DNS filter
// the host's addresses.
func TestRootOwnAddressRefused(t *testing.T) {
	d, n, _, _ := newTestDaemon(t, func(c *config.Config) { c.Policy.Allow = []string{"host.example"} })
	t.Cleanup(func() { d.Close() })
	n.SetRecord("host.example", n.HostAddr)
	ln, err := net.Listen("tcp4", n.HostAddr.String()+":80")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	var stdout bytes.Buffer
	res, err := d.Run(context.Background(), Task{ID: uniqueID("alk-daemon-own"), Argv: []string{"sh", "-c",
		"curl -sS --max-time 20 -o /dev/null -w '%{http_code}' http://host.example/; echo; curl -sS --noproxy '*' --max-time 20 -o /dev/null -w '%{http_code}' http://host.example/; exit 0"},
		Stdout: &stdout})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitStatus() != 0 || strings.Contains(stdout.String(), "200") {
		t.Fatalf("exit %d, stdout %q: the host's own address was reachable", res.ExitStatus(), stdout.String())
	}
	if got := conns.Load(); got != 0 {
		t.Fatalf("the host's own address saw %d connections, want 0", got)
	}
}

// TestEngineRefRev: the placeholder decider names the engine's revision once it
// is set (the DNS filter's decision cache keys on it) and nothing before.
func TestEngineRefRev(t *testing.T) {
	r := newEngineRef()
	if got := r.Rev(); got != "" {
		t.Fatalf("Rev before the engine = %q, want empty", got)
	}
	e, err := policy.New(policy.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r.set(e)
	if got := r.Rev(); got == "" || got != e.Rev() {
		t.Fatalf("Rev = %q, want the engine's %q", got, e.Rev())
	}
	failed := newEngineRef()
	failed.set(nil)
	if got := failed.Rev(); got != "" {
		t.Fatalf("Rev of a failed compile = %q, want empty", got)
	}
	if d := failed.Decide(context.Background(), &policy.Input{Kind: policy.KindDNS}); d.Permit() || d.Err == nil {
		t.Fatalf("decision of a failed compile = %+v, want the fail-closed deny", d)
	}
}
