package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/client/clienttest"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/netns"
	"github.com/airlock-dev/airlock/sandboxd"
)

// mainEnv makes the test binary run the CLI on its arguments instead of the
// tests (TestMain), so a test can run `airlock` as another user.
const mainEnv = "AIRLOCK_TEST_CLI_MAIN"

func TestMain(m *testing.M) {
	if sandboxd.IsStage() {
		// The executor re-executes this binary as a sandbox's init; a
		// rootless one builds its island through the hook.
		sandboxd.InitMainWith(sandboxd.InitHooks{Island: netns.BuildIsland})
	}
	if os.Getenv(mainEnv) == "1" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// TestRunViaDaemon: with a daemon answering, run creates a sandbox, streams
// the command's output and stdin through an exec, removes the sandbox and
// exits with the command's status; the flags go with the create request.
func TestRunViaDaemon(t *testing.T) {
	srv, cli := fakeCLI(t)
	ws := t.TempDir()
	out, errs, code := cli("two\nlines\n", "run", "--label", "agent=coder", "--memory", "64M", "--timeout", "1m",
		"--allow", "api.example", "--mode", "report", "--env", "GREETING=hi", "--workspace", ws, "--",
		"sh", "-c", `echo "$GREETING"; wc -l; echo oops >&2; exit 3`)
	if code != 3 || out != "hi\n2\n" || !strings.HasPrefix(errs, "oops\n") {
		t.Errorf("got exit %d, %q, %q; want 3, %q, oops", code, out, errs, "hi\n2\n")
	}
	for _, want := range []string{"egress summary: 0 allowed, 0 denied", "exit 3", "sandbox sb-1"} {
		if !strings.Contains(errs, want) {
			t.Errorf("summary: want %q in %q", want, errs)
		}
	}
	created := srv.Created()
	if len(created) != 1 {
		t.Fatalf("got %d sandboxes created, want 1", len(created))
	}
	got := created[0]
	if got.Labels["agent"] != "coder" || got.Limits.Memory != 64<<20 || got.Limits.ExecTimeout != config.Duration(60e9) ||
		strings.Join(got.Allow, ",") != "api.example" || got.Mode != "report" || got.Workspace != ws ||
		strings.Join(got.Env, ",") != "GREETING=hi" {
		t.Errorf("create request: got %+v", got)
	}
	wantReqs := []string{"POST /v1/sandboxes", "POST /v1/sandboxes/sb-1/exec",
		"PUT /v1/sandboxes/sb-1/execs/x1/stdin", "DELETE /v1/sandboxes/sb-1"}
	reqs := strings.Join(srv.Requests(), "\n")
	for _, w := range wantReqs {
		if !strings.Contains(reqs, w) {
			t.Errorf("requests: want %q in\n%s", w, reqs)
		}
	}
	if strings.Contains(reqs, "/v1/health") {
		t.Errorf("requests: run probed the daemon before its create:\n%s", reqs)
	}
	if n := len(srv.Created()); n != 1 || srv.Dir("sb-1") != "" {
		t.Errorf("after run: sandbox sb-1 still exists (dir %q)", srv.Dir("sb-1"))
	}
}

// TestRunViaDaemonNullStdin: a run whose stdin is /dev/null makes no stdin
// call (the command's stdin is empty either way); any other stdin file is
// streamed.
func TestRunViaDaemonNullStdin(t *testing.T) {
	srv := clienttest.New(t)
	file := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(file, []byte("a\nb\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		in     string
		stdin  bool
		stdout string
	}{{os.DevNull, false, "0\n"}, {file, true, "2\n"}} {
		f, err := os.Open(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		before := len(srv.Requests())
		root := newRootCmd()
		root.SetContext(t.Context())
		var out, errb bytes.Buffer
		root.SetIn(f)
		root.SetOut(&out)
		root.SetErr(&errb)
		code := execute(root, []string{"--socket", srv.Socket, "run", "-q", "--workspace", "none", "--", "wc", "-l"})
		f.Close()
		if code != 0 || strings.TrimSpace(out.String()) != strings.TrimSpace(tt.stdout) {
			t.Errorf("%s: got exit %d, %q, %q; want 0, %q", tt.in, code, out.String(), errb.String(), tt.stdout)
		}
		reqs := strings.Join(srv.Requests()[before:], "\n")
		if got := strings.Contains(reqs, "/stdin"); got != tt.stdin {
			t.Errorf("%s: stdin call made %v, want %v:\n%s", tt.in, got, tt.stdin, reqs)
		}
	}
}

// TestRunHungDaemon: a daemon that takes the connection and never answers
// does not hang run past its bound, nor is it taken for no daemon (run does
// not go in-process under another policy): run fails naming the socket.
func TestRunHungDaemon(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "hung.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	defer func() {
		select {
		case c := <-accepted:
			c.Close()
		default:
		}
	}()
	old := createTimeout
	createTimeout = 100 * time.Millisecond
	defer func() { createTimeout = old }()
	_, errs, code := cli(t, "", "--socket", sock, "run", "--workspace", "none", "--", "true")
	if code != exitSetupFailed || !strings.Contains(errs, "did not answer") || !strings.Contains(errs, sock) {
		t.Errorf("got exit %d, %q; want %d naming the socket and the silence", code, errs, exitSetupFailed)
	}
	if len(accepted) != 1 {
		t.Error("the hung daemon saw no connection")
	}
}

// TestRunViaDaemonStatus: run's exit status through a daemon is the
// command's, and its own failures keep their codes.
func TestRunViaDaemonStatus(t *testing.T) {
	_, cli := fakeCLI(t)
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"success", []string{"--", "true"}, 0, "exit 0"},
		{"not found", []string{"--", "/no/such/command"}, 127, "/no/such/command"},
		{"timed out", []string{"--timeout", "100ms", "--", "sleep", "30"}, 124, "timed out"},
		{"verbose ends with the sandbox", []string{"-v", "--", "true"}, 0, "exit 0"},
		{"quiet", []string{"-q", "--", "sh", "-c", "exit 4"}, 4, ""},
		{"daemon refuses a field", []string{"--mode", "audit", "--", "true"}, exitUsage, "mode"},
		{"daemon refuses a limit", []string{"--memory", "1K", "--", "true"}, exitUsage, "limits.memory"},
		{"bad label", []string{"--label", "nokey", "--", "true"}, exitUsage, "--label"},
		{"missing command", nil, exitUsage, "missing command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs, code := cli("", append([]string{"run"}, tt.args...)...)
			if code != tt.code || !strings.Contains(errs, tt.msg) {
				t.Errorf("got exit %d, %q; want %d naming %q", code, errs, tt.code, tt.msg)
			}
		})
	}
}

// TestRunInProcessFlagsSkipDaemon: flags only a gateway of run's own can
// honour, and --no-daemon, make run work in-process even when a daemon
// answers: the daemon sees no request.
func TestRunInProcessFlagsSkipDaemon(t *testing.T) {
	srv, cli := fakeCLI(t)
	for _, flags := range [][]string{
		{"--no-daemon"},
		{"--policy", filepath.Join(t.TempDir(), "none")},
		{"--audit", filepath.Join(t.TempDir(), "a.jsonl")},
		{"--config", filepath.Join(t.TempDir(), "none.yaml")},
	} {
		// --timeout 0s is refused by the in-process config check before
		// anything runs, so nothing needs root.
		args := append(append([]string{"run"}, flags...), "--timeout", "0s", "--", "true")
		_, errs, code := cli("", args...)
		if code != exitUsage || errs == "" {
			t.Errorf("%v: got exit %d, %q; want 2", flags, code, errs)
		}
	}
	if reqs := srv.Requests(); len(reqs) != 0 {
		t.Errorf("the daemon saw %v, want nothing", reqs)
	}
}

// TestRunNotRootMessage: without a daemon, a caller that is not root is told
// why (the socket and what failed) and what to do.
func TestRunNotRootMessage(t *testing.T) {
	dead := filepath.Join(t.TempDir(), "none.sock")
	c := client.New(dead)
	defer c.Close()
	_, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{})
	var why *noDaemon
	if !errors.As(daemonAbsent(err), &why) {
		t.Fatalf("create on a missing socket: got %v, want a *noDaemon", err)
	}
	msg := notRootMessage(why)
	for _, want := range []string{"user namespaces", "no daemon answers", dead, "airlock serve", "usermod -aG airlock"} {
		if !strings.Contains(msg, want) {
			t.Errorf("want %q in %q", want, msg)
		}
	}
	msg = notRootMessage(&inProcessRequest{"--no-daemon asks for it"})
	if !strings.Contains(msg, "--no-daemon") || !strings.Contains(msg, "uses the daemon") {
		t.Errorf("got %q, want --no-daemon named and the daemon offered", msg)
	}
}

// TestDaemonSummaryListsHosts pins what a user trial found: through a daemon,
// run's egress summary had counts but no hosts. It now prints the sandbox's
// destinations with the in-process printer, report mode's would-denials
// apart, and how many destinations the daemon left out.
func TestDaemonSummaryListsHosts(t *testing.T) {
	rows := []api.SummaryRow{
		{Decision: "deny", Kind: "http", Host: "evil.example", Port: 80, Count: 3},
		{Decision: "would_deny", Kind: "connect", Host: "reported.example", Port: 443, Count: 2},
		{Decision: "allow", Kind: "connect", Host: "pypi.org", Port: 443, Count: 5},
	}
	var b bytes.Buffer
	writeDaemonSummary(&b, &api.ExecResult{}, &api.Sandbox{ID: "sb-1",
		Egress: api.Egress{Allowed: 5, Denied: 3, WouldDeny: 2, Destinations: rows, DestinationsOmitted: 4}})
	want := "airlock: egress summary: 5 allowed, 3 denied, 2 would deny (report mode: let through)\n" +
		"  deny  http    evil.example:80                          x3\n" +
		"  would deny (report) connect reported.example:443                     x2\n" +
		"  allow connect pypi.org:443                             x5\n" +
		"  ... 4 more destinations (airlock audit query)\n"
	if got, _, _ := strings.Cut(b.String(), "airlock: exit"); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
