//go:build !airlock_front

package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/client/clienttest"
	"github.com/airlock-dev/airlock/test/roottest"
	"github.com/airlock-dev/airlock/test/servetest"
)

// TestRunFallsBackInProcess: with no daemon answering, run works in-process:
// its own config checks apply (a daemon would take --timeout 0s as its
// default).
func TestRunFallsBackInProcess(t *testing.T) {
	dead := filepath.Join(t.TempDir(), "none.sock")
	_, errs, code := cli(t, "", "--socket", dead, "run", "--timeout", "0s", "--", "true")
	if code != exitUsage || !strings.Contains(errs, "limits.timeout") {
		t.Errorf("got exit %d, %q; want 2 naming limits.timeout", code, errs)
	}
}

// TestRootRunAsUserThroughDaemon: a user who is not root runs `airlock run`
// through a daemon whose socket it may use, and in-process without root
// (rootless, said on stderr) when no daemon answers.
func TestRootRunAsUserThroughDaemon(t *testing.T) {
	roottest.Require(t)
	srv := clienttest.New(t)
	// The fake's socket directory is private; open it to the test user as
	// the daemon's group would.
	if err := os.Chmod(filepath.Dir(srv.Socket), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(srv.Socket, 0o666); err != nil {
		t.Fatal(err)
	}
	bin := userBinary(t)
	out, errs, code := runAsNobody(t, bin, "--socket", srv.Socket, "run", "--", "sh", "-c", "echo hello")
	if code != 0 || !strings.HasPrefix(out, "hello\n") {
		t.Errorf("through the daemon: got exit %d, %q, %q; want 0, hello", code, out, errs)
	}
	if len(srv.Created()) != 1 {
		t.Errorf("got %d sandboxes created, want 1", len(srv.Created()))
	}

	dead := filepath.Join(t.TempDir(), "none.sock")
	// The user's runtime directory (the rootless run directory, the audit
	// log), removed with the test.
	xdg, err := os.MkdirTemp("", "alk-xdg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(xdg) })
	if err := os.Chown(xdg, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	out, errs, code = runAsNobodyEnv(t, "/", []string{"XDG_RUNTIME_DIR=" + xdg, "XDG_STATE_HOME=" + xdg}, bin,
		"--socket", dead, "run", "--workspace", "none", "--", "sh", "-c", "echo rootless")
	if code != 0 || !strings.HasPrefix(out, "rootless\n") || !strings.Contains(errs, "airlock: rootless:") {
		t.Errorf("no daemon: got exit %d, %q, %q; want 0, the output, and the rootless line", code, out, errs)
	}
}

// TestRootRunViaDaemonWorkspace: through a real daemon, `airlock run` by a
// user who is not root binds the current directory: ./agent.sh and python3
// agent.py see the project and write into it as its owner. A directory the
// caller does not own is refused by the daemon's owner check with one message
// naming the directory and the fix, and nothing runs; --workspace none runs
// in an empty /workspace from there.
func TestRootRunViaDaemonWorkspace(t *testing.T) {
	roottest.Require(t)
	bin := userBinary(t)
	dir, err := os.MkdirTemp("", "alk-rund-") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock, cfg := filepath.Join(dir, "airlock.sock"), filepath.Join(dir, "airlock.yaml")
	yaml := "api:\n  group: \"\"\naudit:\n  file: " + filepath.Join(dir, "audit", "audit.jsonl") +
		"\nmetrics:\n  listen: 127.0.0.1:0\nsandbox:\n  pool_size: -1\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	servetest.StartWith(t, servetest.Options{Env: []string{mainEnv + "=1"}}, bin, cfg, sock, filepath.Join(dir, "run"))
	if err := os.Chmod(sock, 0o666); err != nil { // as the daemon's group would
		t.Fatal(err)
	}

	mine := filepath.Join(dir, "mine")
	notMine := filepath.Join(dir, "not-mine")
	for _, d := range []string{mine, notMine} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		writeProject(t, d)
	}
	for _, name := range []string{"", "data.txt", "agent.sh", "agent.py"} {
		if err := os.Chown(filepath.Join(mine, name), 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name, out string
		argv      []string
	}{
		{"shell script", "sh-out.txt", []string{"./agent.sh"}},
		{"python", "py-out.txt", []string{"python3", "agent.py"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, errs, code := runAsNobodyIn(t, mine, bin, append([]string{"--socket", sock, "run", "--"}, tt.argv...)...)
			if want := mine + "\nproject-data\n"; code != 0 || out != want {
				t.Fatalf("got exit %d, stdout %q; want 0, %q\nstderr: %s", code, out, want, errs)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join(mine, tt.out), &st); err != nil || st.Uid != 65534 {
				t.Errorf("the file the command wrote: %v, owner %d; want it in the project, owned by its owner 65534", err, st.Uid)
			}
		})
	}
	t.Run("not the caller's", func(t *testing.T) {
		_, errs, code := runAsNobodyIn(t, notMine, bin, "--socket", sock, "run", "--", "sh", "-c", "echo ran > ran")
		want := []string{notMine + `" is owned by uid 0; you (uid 65534) may bind only a directory you own`, "--workspace none"}
		if code != exitUsage {
			t.Errorf("got exit %d, want %d\n%s", code, exitUsage, errs)
		}
		for _, w := range want {
			if n := strings.Count(errs, w); n != 1 {
				t.Errorf("%q appears %d times, want once in:\n%s", w, n, errs)
			}
		}
		if _, err := os.Stat(filepath.Join(notMine, "ran")); err == nil {
			t.Error("the command ran")
		}
	})
	t.Run("workspace none", func(t *testing.T) {
		out, errs, code := runAsNobodyIn(t, notMine, bin, "--socket", sock, "run", "--workspace", "none", "--", "sh", "-c", "pwd; ls -A")
		if code != 0 || out != "/workspace\n" {
			t.Errorf("got exit %d, stdout %q; want 0, %q\nstderr: %s", code, out, "/workspace\n", errs)
		}
	})
	t.Run("command not found", func(t *testing.T) {
		_, errs, code := runAsNobodyIn(t, mine, bin, "--socket", sock, "run", "--", "./nope.sh")
		if n := strings.Count(errs, "nope.sh: no such file or directory"); code != 127 || n != 1 {
			t.Errorf("got exit %d and the error %d times, want 127 and once:\n%s", code, n, errs)
		}
	})
}

// userBinary copies the test binary where another user can run it.
func userBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "alk-cli-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "airlock")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}

// runAsNobody runs the CLI in bin as uid and gid 65534.
func runAsNobody(t *testing.T, bin string, args ...string) (string, string, int) {
	t.Helper()
	return runAsNobodyIn(t, "/", bin, args...)
}

// runAsNobodyIn runs the CLI in bin as uid and gid 65534 in directory dir.
func runAsNobodyIn(t *testing.T, dir, bin string, args ...string) (string, string, int) {
	t.Helper()
	return runAsNobodyEnv(t, dir, nil, bin, args...)
}

// runAsNobodyEnv is runAsNobodyIn with env added to the child's environment.
func runAsNobodyEnv(t *testing.T, dir string, env []string, bin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Env = append([]string{mainEnv + "=1", "PATH=/usr/bin:/bin", "HOME=/"}, env...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errb.String(), 0
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	}
	t.Fatalf("running %s as nobody: %v", bin, err)
	return "", "", 0
}

var writeProjectFiles = map[string]string{
	"data.txt": "project-data\n",
	"agent.sh": "#!/bin/sh\npwd\ncat data.txt\necho from-sh > sh-out.txt\n",
	"agent.py": "import os\nprint(os.getcwd())\nprint(open('data.txt').read().strip())\nopen('py-out.txt', 'w').write('from-py')\n",
}

// writeProject makes a project directory for `airlock run`'s default
// workspace: agent.sh and agent.py print where they run and the project's
// data.txt, and each leaves a file of its own in the directory.
func writeProject(t *testing.T, dir string) {
	t.Helper()
	for name, body := range writeProjectFiles {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}
