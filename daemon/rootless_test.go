package daemon

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/sandboxd"
	"github.com/airlock-dev/airlock/test/poll"
	"github.com/airlock-dev/airlock/test/roottest"
)

// rootlessAPIEnv names the directory TestRootlessAPIUser works in; set, the
// test binary runs as the unprivileged user TestRootRootlessAPISandbox
// started it as.
const rootlessAPIEnv = "ALK_ROOTLESS_API_DIR"

// TestRootRootlessAPISandbox: a daemon built by a user who is not root
// (Options.Rootless, as `serve --user` builds it) creates an API sandbox
// whose init builds its own island, execs in it and ends it.
func TestRootRootlessAPISandbox(t *testing.T) {
	roottest.Require(t)
	dir, err := os.MkdirTemp("", "alk-rootless-api-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "daemon.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(work, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, "-test.run", "^TestRootlessAPIUser$", "-test.v")
	cmd.Env = []string{rootlessAPIEnv + "=" + work, "PATH=/usr/bin:/bin", "HOME=/nonexistent", "XDG_RUNTIME_DIR=" + work}
	cmd.Dir = work
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestRootlessAPIUser") {
		t.Fatalf("the user's daemon: %v\n%s", err, out)
	}
}

// TestRootlessAPIUser is TestRootRootlessAPISandbox's user side; it skips
// unless started by it.
func TestRootlessAPIUser(t *testing.T) {
	work := os.Getenv(rootlessAPIEnv)
	if work == "" {
		t.Skip("started by TestRootRootlessAPISandbox only")
	}
	cfg := config.Default()
	cfg.Audit.File = filepath.Join(work, "audit", "audit.jsonl")
	cfg.Audit.MinFree = config.FreeSpace{}
	cfg.DNS.Upstreams = []string{"127.0.0.1:53"}
	cfg.Sandbox.PoolSize = 2 // asked for, and left empty: no warm pool rootless
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d, err := New(ctx, Options{Config: cfg, EphemeralCA: true, Pool: true,
		Rootless: &sandboxd.Rootless{UID: os.Getuid(), GID: os.Getgid()},
		Executor: &sandboxd.Config{InitArgs: []string{}}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	srv := httptest.NewUnstartedServer(d.Handler())
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return withCaller(ctx, caller{uid: os.Getuid()})
	}
	srv.Start()
	defer srv.Close()
	c := &apiClient{base: srv.URL, c: srv.Client()}
	sb := c.create(t, `{"labels": {"agent": "rootless"}}`)
	frames := c.exec(t, sb.ID, api.ExecRequest{Argv: []string{"/bin/sh", "-c",
		"id -u; grep -c . /proc/net/dev; getent hosts evil.example || echo denied"}})
	res := lastResult(t, frames)
	if res == nil || res.ExitCode != 0 {
		t.Fatalf("exec: got %+v, want exit 0\n%v", res, frames)
	}
	// uid 0 inside (the user), only lo (2 header lines + lo), DNS filtered.
	if got := output(frames, "stdout"); got != "0\n3\ndenied\n" {
		t.Errorf("stdout: got %q, want the user as 0, only lo, a refused name", got)
	}
	if r := c.do(t, http.MethodDelete, "/v1/sandboxes/"+sb.ID, nil); r.status/100 != 2 {
		t.Errorf("delete: got %d %s", r.status, r.body)
	}
	// The teardown runs in the background after the end.
	poll.Until(t, 10*time.Second, "the island no longer served", func() bool { return len(d.netns.IDs()) == 0 })
}
