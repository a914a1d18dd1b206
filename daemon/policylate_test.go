package daemon

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/sandboxd"
	"github.com/airlock-dev/airlock/test/roottest"
)

// newLateDaemon is newTestDaemon for airlock run's New (Options.PolicyLate)
// with hook run before the policy's compile.
func newLateDaemon(t *testing.T, hook func() error, edit ...func(*config.Config)) (*Daemon, *testNet, config.Config) {
	t.Helper()
	tn, cfg, dir := newTestConfig(t, edit...)
	// New returns with the compile held (or not started): it does not wait
	// for the built-in policy.
	d, err := New(context.Background(), Options{Config: cfg, EphemeralCA: true, RunDir: filepath.Join(dir, "run"),
		Executor: &sandboxd.Config{InitArgs: []string{}}, PolicyLate: true, policyHook: hook})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, tn, cfg
}

// gateWriter collects a command's output and closes gate once the output
// says "started": the command runs before the policy has compiled.
type gateWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	once sync.Once
	gate chan struct{}
}

func (w *gateWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), "started") {
		w.once.Do(func() { close(w.gate) })
	}
	return len(p), nil
}

func (w *gateWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestRootRunBeforePolicyCompiled: airlock run starts the command while the
// policy still compiles (Options.PolicyLate). The command connects at once,
// to a denied host and to an allowed one, before the compile may end: every
// decision waits for the engine, so the denied host sees nothing, the
// allowed one gets its one request, and the audit log records both.
func TestRootRunBeforePolicyCompiled(t *testing.T) {
	gate := make(chan struct{})
	d, n, cfg := newLateDaemon(t, func() error { <-gate; return nil })
	out := &gateWriter{gate: gate}
	var stderr bytes.Buffer
	res, err := d.Run(context.Background(), Task{ID: uniqueID("alk-late-run"), Argv: []string{"sh", "-c",
		"echo started; curl -sS --max-time 20 -o /dev/null -w '%{http_code}\\n' https://evil.example/; " +
			"curl -sS --max-time 20 https://pypi.org/simple/; exit 0"},
		Stdout: out, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitStatus() != 0 || !strings.Contains(out.String(), "hello from pypi.org /simple/") {
		t.Fatalf("exit %d, stdout %q, stderr %q", res.ExitStatus(), out.String(), stderr.String())
	}
	if got := n.pypi.Requests(); got != 1 {
		t.Errorf("pypi.org saw %d requests, want 1", got)
	}
	if got := n.evil.Conns(); got != 0 {
		t.Errorf("evil.example saw %d connections, want 0", got)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range audittest.ReadLog(t, cfg.Audit.File) {
		kinds = append(kinds, r.Kind+":"+r.Decision+":"+r.Host)
	}
	for _, want := range []string{"connect:deny:evil.example", "http:allow:pypi.org"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("audit %v lacks %s", kinds, want)
		}
	}
}

// TestRootRunPolicyFailsLate: a policy compile that fails after the
// command started (the hook fails it once the command said so) ends the
// run with the compile's error; the command's connections were refused
// (neither host saw one) and it was ended before it could finish.
func TestRootRunPolicyFailsLate(t *testing.T) {
	gate := make(chan struct{})
	d, n, _ := newLateDaemon(t, func() error { <-gate; return errors.New("alk-test: the policy broke") })
	out := &gateWriter{gate: gate}
	_, err := d.Run(context.Background(), Task{ID: uniqueID("alk-late-bad"), Argv: []string{"sh", "-c",
		"echo started; curl -sS --max-time 20 https://pypi.org/simple/; curl -sS --max-time 20 https://evil.example/; " +
			"sleep 60; echo finished"},
		Stdout: out})
	if err == nil || !strings.Contains(err.Error(), "alk-test: the policy broke") {
		t.Fatalf("Run: got %v, want the policy's compile error", err)
	}
	if strings.Contains(out.String(), "finished") {
		t.Errorf("the command ran to its end after the policy failed: %q", out.String())
	}
	if got, want := n.pypi.Conns()+n.evil.Conns(), int64(0); got != want {
		t.Errorf("the hosts saw %d connections, want %d", got, want)
	}
}

// TestRootRunPolicyDirFailsBeforeCommand: with PolicyLate, a policy
// directory that does not compile is still New's error: the command never
// starts (airlock run exits 2, as TestRunBrokenInputsAsRoot pins).
func TestRootRunPolicyDirFailsBeforeCommand(t *testing.T) {
	roottest.Require(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.rego"), []byte("package airlock.egress\n\nallow if {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Policy.Dir = dir
	cfg.DNS.Upstreams = []string{"127.0.0.1:53"} // never asked: New fails first
	cfg.Audit.File = filepath.Join(t.TempDir(), "audit.jsonl")
	d, err := New(context.Background(), Options{Config: cfg, EphemeralCA: true, RunDir: filepath.Join(t.TempDir(), "run"),
		Executor: &sandboxd.Config{InitArgs: []string{}}, PolicyLate: true})
	if err == nil {
		d.Close()
		t.Fatal("New: got nil, want the policy directory's compile error")
	}
	if !strings.Contains(err.Error(), "p.rego") {
		t.Fatalf("New: got %v, want an error naming p.rego", err)
	}
}

// TestLazyPolicyCompile: airlock run's built-in policy compiles only when
// something asks. New's pace starts nothing; the first decision starts the
// compile, waits for it and gets the engine's answer (not the fail-closed
// error); a daemon closed before anything asked starts no compile.
func TestLazyPolicyCompile(t *testing.T) {
	cfg := config.Default()
	cfg.Policy.Allow = []string{"pypi.org"}
	d := &Daemon{log: slog.New(slog.DiscardHandler)}
	b := d.compileEngine(cfg, nil, true)
	t.Cleanup(func() { d.Close() })
	if b.started() {
		t.Fatal("the lazy compile started before anything asked")
	}
	if err := b.waitStarted(); err != nil {
		t.Fatalf("waitStarted before the start: got %v, want nil", err)
	}
	got := b.dec.Decide(context.Background(), &policy.Input{Kind: policy.KindDNS,
		Destination: policy.Destination{Host: "pypi.org", Port: 53}, DNS: &policy.DNS{QName: "pypi.org", QType: "A"}})
	if !b.started() || d.engine == nil {
		t.Fatalf("after a decision: started %v, engine %v; want the compile done", b.started(), d.engine)
	}
	if got.Err != nil || !got.Permit() {
		t.Errorf("decision for an allowed name: got %+v, want an allow from the engine", got)
	}

	idle := &Daemon{log: slog.New(slog.DiscardHandler)}
	ib := idle.compileEngine(cfg, nil, true)
	if err := idle.Close(); err != nil {
		t.Fatal(err)
	}
	if ib.started() {
		t.Error("Close started a lazy compile nothing asked for")
	}
}

// TestLazyPolicy: only airlock run's built-in policy without presets is
// compiled lazily, and its one input, the allowed hosts, is checked at once.
func TestLazyPolicy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		late    bool
		edit    func(*config.Policy)
		want    bool
		wantErr string
	}{
		{name: "run, built-in policy", late: true, edit: func(p *config.Policy) { p.Allow = []string{"pypi.org", "*.github.com"} }, want: true},
		{name: "serve", late: false},
		{name: "policy dir", late: true, edit: func(p *config.Policy) { p.Dir = "/etc/airlock/policy" }},
		{name: "presets", late: true, edit: func(p *config.Policy) { p.Presets = []string{"pypi"} }},
		{name: "bad host", late: true, edit: func(p *config.Policy) { p.Allow = []string{"exa mple.com"} }, wantErr: "exa mple.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			if tc.edit != nil {
				tc.edit(&cfg.Policy)
			}
			got, err := lazyPolicy(Options{Config: cfg, PolicyLate: tc.late})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, %v; want an error naming %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
