package readme

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/test/poll"
	"github.com/airlock-dev/airlock/test/roottest"
)

// TestRootReadmePython runs the README's Python agent loop against a real
// `airlock serve` (its own config, socket, audit log and run directory) with
// the client from clients/python. $AIRLOCK_BIN names the binary to serve
// with; without it this tree's cmd/airlock is built.
func TestRootReadmePython(t *testing.T) {
	roottest.Require(t)
	var loop string
	for _, b := range readmeBlocks(t) {
		if b.lang == "python" && strings.Contains(b.text, "airlock_client") {
			loop = b.text
			break
		}
	}
	if loop == "" {
		t.Fatal("the README and docs have no python example using airlock_client")
	}
	bin := os.Getenv("AIRLOCK_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "airlock")
		if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/airlock").CombinedOutput(); err != nil {
			t.Fatalf("build: %v\n%s", err, out)
		}
	}
	sock := startServe(t, bin)

	pkg, err := filepath.Abs("../../clients/python")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-")
	cmd.Stdin = strings.NewReader(loop)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), client.SocketEnv+"="+sock, "PYTHONPATH="+pkg, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's agent loop: %v\n%s", err, out)
	}
	for _, want := range []string{"$ python3 answer.py  (exit 0)\n42\n", "answer.py"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	c := client.New(sock)
	defer c.Close()
	if list, err := c.ListSandboxes(t.Context(), map[string]string{"agent": "readme"}); err != nil || len(list) != 0 {
		t.Errorf("after the loop: got %d sandboxes, %v; want none (the with block deletes it)", len(list), err)
	}
}

// startServe runs `bin serve` as root with everything in a temporary
// directory until the test ends, and returns its socket once it answers.
func startServe(t *testing.T, bin string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "alk-readme-") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "airlock.sock")
	cfg := filepath.Join(dir, "airlock.yaml")
	yaml := fmt.Sprintf("api:\n  socket: %s\n  group: \"\"\naudit:\n  file: %s\nmetrics:\n  listen: 127.0.0.1:0\nsandbox:\n  pool_size: 1\n",
		sock, filepath.Join(dir, "audit.jsonl"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	runServe(t, exec.Command(bin, "serve", "--config", cfg, "--run-dir", filepath.Join(dir, "run"), "--drain-timeout", "5s"), sock)
	return sock
}

// runServe starts serve (an airlock serve command) until the test ends,
// stopping it with SIGTERM, and returns once it answers on sock; its output
// is logged when the test failed.
func runServe(t *testing.T, serve *exec.Cmd, sock string) {
	t.Helper()
	var log bytes.Buffer
	serve.Stdout, serve.Stderr = &log, &log
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	t.Cleanup(func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = serve.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("airlock serve:\n%s", log.String())
		}
	})
	c := client.New(sock)
	defer c.Close()
	poll.Until(t, 60*time.Second, "airlock serve to answer", func() bool {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("airlock serve exited: %v\n%s", err, log.String())
		default:
		}
		_, err := c.Health(t.Context())
		return err == nil
	})
}
