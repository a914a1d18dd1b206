package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/client/clienttest"
	"github.com/airlock-dev/airlock/test/poll"
)

// cliTimeout bounds one command of a test.
const cliTimeout = 60 * time.Second

// cli runs `airlock ARGS...` in this process with stdin and returns stdout,
// stderr and the exit status.
func cli(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	root := newRootCmd()
	// A command that hangs fails its test instead of the whole run.
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	root.SetContext(ctx)
	var out, errb bytes.Buffer
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errb)
	code := execute(root, args)
	return out.String(), errb.String(), code
}

// fakeCLI runs the CLI against a fake daemon.
func fakeCLI(t *testing.T) (*clienttest.Server, func(stdin string, args ...string) (string, string, int)) {
	t.Helper()
	srv := clienttest.New(t)
	return srv, func(stdin string, args ...string) (string, string, int) {
		return cli(t, stdin, append([]string{"--socket", srv.Socket}, args...)...)
	}
}

func mustCreate(t *testing.T, run func(string, ...string) (string, string, int), args ...string) string {
	t.Helper()
	out, errs, code := run("", append([]string{"sandbox", "create"}, args...)...)
	if code != 0 {
		t.Fatalf("create: exit %d: %s", code, errs)
	}
	return strings.TrimSpace(out)
}

func TestSandboxCommands(t *testing.T) {
	srv, run := fakeCLI(t)
	id := mustCreate(t, run, "--label", "agent=coder", "--memory", "64M", "--env", "GREETING=hi")
	if id == "" || strings.Contains(id, "\n") {
		t.Fatalf("create printed %q, want one id", id)
	}
	other := mustCreate(t, run, "--label", "agent=other")

	out, _, code := run("", "sandbox", "ls", "--label", "agent=coder")
	if code != 0 || !strings.HasPrefix(out, "ID ") || !strings.Contains(out, id) || strings.Contains(out, other) || !strings.Contains(out, "agent=coder") {
		t.Errorf("ls --label: exit %d\n%s", code, out)
	}
	out, _, _ = run("", "sandbox", "ls", "--json")
	var list []api.Sandbox
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 2 {
		t.Errorf("ls --json: got %d sandboxes, %v\n%s", len(list), err, out)
	}
	out, _, code = run("", "sandbox", "inspect", id)
	for _, want := range []string{"ID:", id, "State:", "running", "Labels:", "agent=coder", "memory 64M", "Egress:", "0 allowed, 0 denied"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("inspect: exit %d, want %q in\n%s", code, want, out)
		}
	}
	out, _, _ = run("", "sandbox", "inspect", "--json", id)
	var sb api.Sandbox
	if err := json.Unmarshal([]byte(out), &sb); err != nil || sb.ID != id || sb.Limits.MemoryBytes != 64<<20 {
		t.Errorf("inspect: got %+v, %v", sb, err)
	}

	out, errs, code := run("", "sandbox", "exec", id, "--", "sh", "-c", `echo "$GREETING $EXTRA"; echo oops >&2; exit 3`, "--env")
	if code != 3 || out != "hi \n" || errs != "oops\n" {
		t.Errorf("exec: got exit %d, %q, %q; want 3, %q, %q", code, out, errs, "hi \n", "oops\n")
	}
	out, _, code = run("", "sandbox", "exec", "--env", "EXTRA=there", id, "--", "sh", "-c", `echo "$GREETING $EXTRA"`)
	if code != 0 || out != "hi there\n" {
		t.Errorf("exec --env: got exit %d, %q", code, out)
	}
	out, _, code = run("line one\nline two\n", "sandbox", "exec", "-i", id, "--", "wc", "-l")
	if code != 0 || strings.TrimSpace(out) != "2" {
		t.Errorf("exec -i: got exit %d, %q; want 2 lines counted", code, out)
	}

	src := filepath.Join(t.TempDir(), "proj")
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "sub", "f.txt"), []byte("content"), 0o644)
	if _, errs, code := run("", "sandbox", "cp", src, id+":"); code != 0 {
		t.Fatalf("cp in: exit %d: %s", code, errs)
	}
	if b, err := os.ReadFile(filepath.Join(srv.Dir(id), "proj", "sub", "f.txt")); err != nil || string(b) != "content" {
		t.Fatalf("cp in: got %q, %v", b, err)
	}
	dst := t.TempDir()
	if _, errs, code := run("", "sandbox", "cp", id+":proj/sub", dst); code != 0 {
		t.Fatalf("cp out: exit %d: %s", code, errs)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "sub", "f.txt")); err != nil || string(b) != "content" {
		t.Fatalf("cp out: got %q, %v", b, err)
	}
	tarOut, _, code := run("", "sandbox", "cp", id+":/workspace/proj/sub/f.txt", "-")
	if code != 0 || !strings.Contains(tarOut, "content") || !strings.HasPrefix(tarOut, "f.txt") {
		t.Errorf("cp to -: exit %d, %q", code, tarOut)
	}
	// Regression: one entry was reported as "copied 1 entries".
	if _, errs, code := run(tarOut, "sandbox", "cp", "-", id+":/workspace/again"); code != 0 || !strings.Contains(errs, "copied 1 entry, 7 bytes\n") {
		t.Errorf("cp from -: exit %d: %q; want copied 1 entry, 7 bytes", code, errs)
	}
	if _, err := os.Stat(filepath.Join(srv.Dir(id), "again", "f.txt")); err != nil {
		t.Errorf("cp from -: %v", err)
	}

	srv.CountEgress(id, false, "connect")
	out, _, code = run("", "sandbox", "logs", id)
	if code != 0 || !strings.Contains(out, id+" running") || !strings.Contains(out, "1 denied (connect 1)") {
		t.Errorf("logs: exit %d, %q", code, out)
	}
	// The sandbox's kept records, after its state: a report-mode denial
	// shows as would_deny.
	srv.Remember(id, map[string]any{"ts": "2026-01-02T03:04:05Z", "kind": "http", "decision": "deny", "mode": "report",
		"host": "reported.example", "port": 80, "method": "POST", "path": "/upload"})
	out, _, code = run("", "sandbox", "logs", id)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 2 ||
		!strings.Contains(lines[1], "would_deny http    reported.example:80 POST /upload") {
		t.Errorf("logs with history: exit %d, %q; want the state, then the kept record", code, out)
	}

	out, _, code = run("", "sandbox", "rm", id, other)
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, other) {
		t.Errorf("rm: exit %d, %q", code, out)
	}
	if _, errs, code := run("", "sandbox", "inspect", id); code != exitFailed || !strings.Contains(errs, "not_found") {
		t.Errorf("inspect after rm: exit %d, %q; want 1, not_found", code, errs)
	}
}

// TestSandboxExecExitStatus: exec exits with the command's status, and its
// own failures have their own codes.
func TestSandboxExecExitStatus(t *testing.T) {
	_, run := fakeCLI(t)
	id := mustCreate(t, run)
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"success", []string{id, "--", "true"}, 0, ""},
		{"exit code", []string{id, "--", "sh", "-c", "exit 42"}, 42, ""},
		{"killed by a signal", []string{id, "--", "sh", "-c", "kill -TERM $$"}, 128 + 15, ""},
		{"not found", []string{id, "--", "/no/such/command"}, 127, "exec:"},
		{"timed out", []string{"--timeout", "100ms", id, "--", "sleep", "30"}, 124, ""},
		{"unknown sandbox", []string{"sb-nope", "--", "true"}, exitSetupFailed, "not_found"},
		{"bad cwd", []string{"--cwd", "/etc", id, "--", "true"}, exitUsage, "cwd"},
		{"missing command", []string{id}, exitUsage, "want a sandbox id and a command"},
		{"bad timeout", []string{"--timeout", "soon", id, "--", "true"}, exitUsage, "--timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs, code := run("", append([]string{"sandbox", "exec"}, tt.args...)...)
			if code != tt.code || !strings.Contains(errs, tt.msg) {
				t.Errorf("got exit %d, %q; want %d naming %q", code, errs, tt.code, tt.msg)
			}
		})
	}
}

func TestSandboxUsageAndFailures(t *testing.T) {
	srv, run := fakeCLI(t)
	id := mustCreate(t, run)
	dead := filepath.Join(t.TempDir(), "none.sock")
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"cp both local", []string{"sandbox", "cp", "a", "b"}, exitUsage, "one of SRC and DST"},
		{"cp both remote", []string{"sandbox", "cp", id + ":/workspace/a", id + ":/workspace/b"}, exitUsage, "only one"},
		{"cp escape", []string{"sandbox", "cp", id + ":/workspace/../etc/passwd", t.TempDir()}, exitUsage, "invalid_path"},
		{"cp outside", []string{"sandbox", "cp", id + ":/etc/passwd", t.TempDir()}, exitUsage, "outside"},
		{"cp missing source", []string{"sandbox", "cp", filepath.Join(t.TempDir(), "nope"), id + ":"}, exitFailed, "no such file"},
		{"bad label", []string{"sandbox", "create", "--label", "nokey"}, exitUsage, "--label"},
		{"absurd memory", []string{"sandbox", "create", "--memory", "1K"}, exitUsage, "limits.memory"},
		{"bad mode", []string{"sandbox", "create", "--mode", "audit"}, exitUsage, "mode"},
		{"missing workspace", []string{"sandbox", "create", "--workspace", filepath.Join(t.TempDir(), "nope")}, exitUsage, "--workspace"},
		{"rm unknown", []string{"sandbox", "rm", "sb-nope"}, exitFailed, "sb-nope"},
		{"inspect without id", []string{"sandbox", "inspect"}, exitUsage, "accepts 1 arg"},
		{"daemon unreachable", []string{"--socket", dead, "sandbox", "ls"}, exitFailed, "airlock serve"},
		{"exec daemon unreachable", []string{"--socket", dead, "sandbox", "exec", id, "--", "true"}, exitSetupFailed, dead},
		{"logs unknown", []string{"sandbox", "logs", "sb-nope"}, exitFailed, "not_found"},
		{"secret binding not granted", []string{"sandbox", "create", "--secret-binding", clienttest.FakeForbiddenBindingID}, exitFailed, "not granted"},
		{"secret binding unknown", []string{"sandbox", "create", "--secret-binding", "/etc/secret"}, exitUsage, "secret_bindings"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs, code := run("", tt.args...)
			if code != tt.code || !strings.Contains(errs, tt.msg) {
				t.Errorf("got exit %d, %q; want %d naming %q", code, errs, tt.code, tt.msg)
			}
		})
	}
	_ = srv
}

// TestSocketFlag: --socket beats $AIRLOCK_SOCKET, which beats the default.
func TestSocketFlag(t *testing.T) {
	srv := clienttest.New(t)
	t.Setenv(client.SocketEnv, filepath.Join(t.TempDir(), "none.sock"))
	if _, errs, code := cli(t, "", "sandbox", "ls"); code != exitFailed || !strings.Contains(errs, "none.sock") {
		t.Errorf("$%s: got exit %d, %q; want its socket named", client.SocketEnv, code, errs)
	}
	if _, errs, code := cli(t, "", "--socket", srv.Socket, "sandbox", "ls"); code != 0 {
		t.Errorf("--socket: got exit %d, %q", code, errs)
	}
	t.Setenv(client.SocketEnv, srv.Socket)
	if _, errs, code := cli(t, "", "sandbox", "ls"); code != 0 {
		t.Errorf("$%s alone: got exit %d, %q", client.SocketEnv, code, errs)
	}
}

func TestSandboxLogsFollow(t *testing.T) {
	srv, run := fakeCLI(t)
	id := mustCreate(t, run)
	done := make(chan string, 1)
	go func() {
		out, _, _ := run("", "sandbox", "logs", "-f", id)
		done <- out
	}()
	waitSubscribed(t, srv, id)
	srv.Emit(id, client.EventDecision, api.Event{Record: map[string]any{
		"ts": "2025-01-02T03:04:05Z", "kind": "connect", "decision": "deny", "host": "evil.example", "port": 443,
		"reasons": []map[string]any{{"id": "host_not_allowed"}}}})
	if _, _, code := run("", "sandbox", "rm", id); code != 0 {
		t.Fatal("rm failed")
	}
	out := <-done
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], id+" running") ||
		!strings.Contains(lines[1], "deny  connect evil.example:443 host_not_allowed") ||
		!strings.Contains(lines[2], "stopped (deleted)") {
		t.Errorf("got %q, want the state, the decision and the end", lines)
	}
}

func waitSubscribed(t *testing.T, srv *clienttest.Server, id string) {
	t.Helper()
	poll.Until(t, 10*time.Second, "the events stream", func() bool { return srv.Subscribers(id) > 0 })
}

// TestSandboxHelp: every sandbox command has a description and examples, and
// --help works without a daemon.
func TestSandboxHelp(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Long == "" || c.Example == "" {
			t.Errorf("%s: want a Long help and an Example", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newSandboxCmd())
	for _, sub := range []string{"create", "exec", "cp", "ls", "inspect", "update", "logs", "rm"} {
		out, errs, code := cli(t, "", "--socket", "/nonexistent.sock", "sandbox", sub, "--help")
		if code != 0 || !strings.Contains(out, "Examples:") {
			t.Errorf("sandbox %s --help: exit %d, %q %q", sub, code, out, errs)
		}
	}
}

// cliStreaming runs `airlock ARGS...` in the background with its stdout and
// stderr read line by line as they come (each pipe drained on its own, so the
// command never blocks writing one while the test waits on the other); the
// exit status arrives on the returned channel.
func cliStreaming(t *testing.T, args ...string) (stdout, stderr *lineReader, code <-chan int) {
	t.Helper()
	root := newRootCmd()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	root.SetContext(ctx)
	or, ow := io.Pipe()
	er, ew := io.Pipe()
	root.SetIn(strings.NewReader(""))
	root.SetOut(ow)
	root.SetErr(ew)
	done, finished := make(chan int, 1), make(chan struct{})
	go func() {
		defer close(finished)
		defer cancel()
		c := execute(root, args)
		ow.Close()
		ew.Close()
		done <- c
	}()
	stdout, stderr = readLines(or), readLines(er)
	t.Cleanup(func() {
		cancel()
		or.Close()
		er.Close()
		<-finished
	})
	return stdout, stderr, done
}

// lineReader hands out the lines a pipe carries, read by its own goroutine.
type lineReader struct{ c chan string }

// lineBuffer is how many unread lines a lineReader holds before its pipe's
// writer waits.
const lineBuffer = 1024

func readLines(r io.Reader) *lineReader {
	l := &lineReader{c: make(chan string, lineBuffer)}
	go func() {
		defer close(l.c)
		br := bufio.NewReader(r)
		for {
			s, err := br.ReadString('\n')
			if s != "" {
				l.c <- s
			}
			if err != nil {
				return
			}
		}
	}()
	return l
}

// ReadString returns the next line (delim must be '\n'), or io.EOF once the
// pipe is closed, or an error when none comes within cliTimeout.
func (l *lineReader) ReadString(delim byte) (string, error) {
	if delim != '\n' {
		return "", fmt.Errorf("lineReader reads lines only")
	}
	select {
	case s, ok := <-l.c:
		if !ok {
			return "", io.EOF
		}
		return s, nil
	case <-time.After(cliTimeout):
		return "", fmt.Errorf("no line within %s", cliTimeout)
	}
}

// TestSandboxExecStreams: exec writes the command's output as it is
// produced, stdout and stderr apart, while the command still runs.
func TestSandboxExecStreams(t *testing.T) {
	srv, run := fakeCLI(t)
	id := mustCreate(t, run)
	out, errs, code := cliStreaming(t, "--socket", srv.Socket, "sandbox", "exec", id, "--",
		"sh", "-c", "echo first; echo warn >&2; exec sleep 60")
	if line, err := out.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("stdout: got %q, %v; want first", line, err)
	}
	if line, err := errs.ReadString('\n'); err != nil || line != "warn\n" {
		t.Fatalf("stderr: got %q, %v; want warn", line, err)
	}
	if n := srv.Running(id); n != 1 {
		t.Fatalf("got %d execs running while the output was read, want 1", n)
	}
	if _, errs, c := run("", "sandbox", "rm", id); c != 0 {
		t.Fatalf("rm: exit %d, %s", c, errs)
	}
	if c := <-code; c != 128+int(syscall.SIGKILL) {
		t.Errorf("exec of a removed sandbox: got exit %d, want %d (killed)", c, 128+int(syscall.SIGKILL))
	}
}

// TestSandboxExecForwardsInterrupt: the first interrupt is passed to the
// command, which may handle it and decide the exit status.
func TestSandboxExecForwardsInterrupt(t *testing.T) {
	srv, run := fakeCLI(t)
	id := mustCreate(t, run)
	out, _, code := cliStreaming(t, "--socket", srv.Socket, "sandbox", "exec", id, "--",
		"sh", "-c", `trap 'echo got INT; exit 5' INT; echo ready; while :; do sleep 0.05; done`)
	if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("got %q, %v; want ready", line, err)
	}
	// exec has registered for SIGINT before it reads output, so this one
	// goes to it, not to the test process.
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if line, err := out.ReadString('\n'); err != nil || line != "got INT\n" {
		t.Errorf("got %q, %v; want the command's trap output", line, err)
	}
	if c := <-code; c != 5 {
		t.Errorf("got exit %d, want 5 (the command's)", c)
	}
}

// TestCopiedLine: cp's report says entry and entries, byte and bytes, as
// the count asks. Regression: it said "copied 1 entries".
func TestCopiedLine(t *testing.T) {
	tests := []struct {
		name           string
		entries, bytes int64
		want           string
	}{
		{"none", 0, 0, "copied 0 entries, 0 bytes"},
		{"one", 1, 1, "copied 1 entry, 1 byte"},
		{"two", 2, 4096, "copied 2 entries, 4096 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := copiedLine(tt.entries, tt.bytes); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestSandboxCreateSecretBinding: --secret-binding reaches the API and
// inspect shows the binding with its fingerprint.
func TestSandboxCreateSecretBinding(t *testing.T) {
	srv, run := fakeCLI(t)
	id := mustCreate(t, run, "--secret-binding", clienttest.FakeBindingID)
	if got := srv.Created(); len(got) != 1 || len(got[0].SecretBindings) != 1 || got[0].SecretBindings[0] != clienttest.FakeBindingID {
		t.Fatalf("create request: got %+v", got)
	}
	out, _, code := run("", "sandbox", "inspect", id)
	want := clienttest.FakeBinding(clienttest.FakeBindingID)
	for _, s := range []string{"Secret bindings:", want.ID, want.Host + ":443", want.Fingerprint} {
		if code != 0 || !strings.Contains(out, s) {
			t.Errorf("inspect: exit %d, want %q in\n%s", code, s, out)
		}
	}
}
