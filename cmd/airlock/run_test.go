//go:build !airlock_front

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/test/roottest"
)

// runRunCmd runs `airlock run ARGS...` and returns stderr and the exit code.
func runRunCmd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	_, errs, code := runRunOut(t, args...)
	return errs, code
}

// runRunOut runs `airlock run ARGS...` and returns stdout, stderr (with the
// error main would print) and the exit code.
func runRunOut(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := newRunCmd()
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetIn(strings.NewReader(""))
	cmd.SetArgs(args)
	cmd.SilenceUsage = true
	cmd.SilenceErrors = true
	err := cmd.ExecuteContext(context.Background())
	if err == nil {
		return out.String(), errb.String(), 0
	}
	errb.WriteString(err.Error())
	var ec exitCoder
	if errors.As(err, &ec) {
		return out.String(), errb.String(), ec.ExitCode()
	}
	return out.String(), errb.String(), 2
}

// TestRunUsageErrors: every bad invocation is exit 2 with a message naming the
// problem, and the command never runs (it would create a file in the
// workspace). These fail before anything needs root.
func TestRunUsageErrors(t *testing.T) {
	ws := t.TempDir()
	marker := filepath.Join(ws, "ran")
	cmdline := []string{"--", "/bin/sh", "-c", "touch " + marker}
	tests := []struct {
		name  string
		flags []string
		argv  []string
		want  string
	}{
		{"missing command", nil, []string{}, "missing command"},
		{"unknown flag", []string{"--bogus"}, cmdline, "unknown flag: --bogus"},
		{"bad size", []string{"--memory", "12Q"}, cmdline, `unknown unit "Q"`},
		{"tiny memory", []string{"--memory", "1K"}, cmdline, "limits.memory"},
		{"bad duration", []string{"--timeout", "soon"}, cmdline, "--timeout"},
		{"negative duration", []string{"--timeout", "-5s"}, cmdline, "negative"},
		{"zero timeout", []string{"--timeout", "0s"}, cmdline, "limits.timeout"},
		{"nan cpus", []string{"--cpus", "NaN"}, cmdline, "limits.cpus"},
		{"zero cpus", []string{"--cpus", "0"}, cmdline, "limits.cpus"},
		{"zero pids", []string{"--pids", "0"}, cmdline, "limits.pids"},
		{"zero tmp size", []string{"--tmp-size", "0"}, cmdline, "limits.tmp_size"},
		{"nonexistent workspace", []string{"--workspace", filepath.Join(ws, "nope")}, cmdline, "--workspace"},
		{"bad mode", []string{"--mode", "audit"}, cmdline, "policy.mode"},
		{"bad label", []string{"--label", "=x"}, cmdline, "--label"},
		{"bad env", []string{"--env", "NOEQUALS"}, cmdline, "sandbox.env[0]"},
		{"missing config", []string{"--config", filepath.Join(ws, "nope.yaml")}, cmdline, "nope.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append([]string{"--workspace", ws, "--audit", filepath.Join(t.TempDir(), "audit.jsonl")}, tt.flags...), tt.argv...)
			msg, code := runRunCmd(t, args...)
			if code != 2 || !strings.Contains(msg, tt.want) {
				t.Fatalf("got exit %d, %q; want exit 2 naming %q", code, msg, tt.want)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the command ran")
			}
		})
	}
}

// TestRunBrokenInputsAsRoot: a policy that does not compile and a secrets file
// that does not parse stop `airlock run` before the sandbox exists (exit 2, the
// file named, the command never ran). Past the usage checks run needs root.
func TestRunBrokenInputsAsRoot(t *testing.T) {
	roottest.Require(t)
	ws := t.TempDir()
	marker := filepath.Join(ws, "ran")
	badPolicy := t.TempDir()
	if err := os.WriteFile(filepath.Join(badPolicy, "p.rego"), []byte("package airlock.egress\nallow if {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badSecrets := filepath.Join(t.TempDir(), "secrets.yaml")
	if err := os.WriteFile(badSecrets, []byte("secrets: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		flags []string
		want  string
	}{
		{"broken policy", []string{"--policy", badPolicy}, "p.rego"},
		{"missing policy dir", []string{"--policy", filepath.Join(badPolicy, "nope")}, "nope"},
		{"broken secrets", []string{"--secrets", badSecrets}, "secrets"},
		{"missing secrets", []string{"--secrets", badSecrets + ".nope"}, "secrets.yaml.nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--workspace", ws, "--audit", filepath.Join(t.TempDir(), "audit.jsonl")}, tt.flags...)
			args = append(args, "--", "/bin/sh", "-c", "touch "+marker)
			msg, code := runRunCmd(t, args...)
			if code != 2 || !strings.Contains(msg, tt.want) {
				t.Fatalf("got exit %d, %q; want exit 2 naming %q", code, msg, tt.want)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the command ran")
			}
		})
	}
}

// TestRootRunInProjectDir: `airlock run` with no --workspace runs the
// command in the current directory (bound at the same path): ./agent.sh and
// python3 agent.py find the project's files and what they write lands in it.
// Regression: run used to start in an empty /workspace, so the README's
// `./agent.sh` failed with "no such file or directory", printed three times.
func TestRootRunInProjectDir(t *testing.T) {
	roottest.Require(t)
	proj := t.TempDir()
	writeProject(t, proj)
	t.Chdir(proj)
	tests := []struct {
		name, out string
		argv      []string
	}{
		{"shell script", "sh-out.txt", []string{"./agent.sh"}},
		{"python", "py-out.txt", []string{"python3", "agent.py"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--audit", filepath.Join(t.TempDir(), "audit.jsonl"), "--"}, tt.argv...)
			out, errs, code := runRunOut(t, args...)
			if want := proj + "\nproject-data\n"; code != 0 || out != want {
				t.Fatalf("got exit %d, stdout %q; want 0, %q\nstderr: %s", code, out, want, errs)
			}
			if _, err := os.Stat(filepath.Join(proj, tt.out)); err != nil {
				t.Errorf("the file the command wrote is not in the project: %v", err)
			}
		})
	}
}

// TestRootRunWorkspaceNone: --workspace none runs in an empty /workspace;
// the current directory is neither seen nor written.
func TestRootRunWorkspaceNone(t *testing.T) {
	roottest.Require(t)
	proj := t.TempDir()
	writeProject(t, proj)
	t.Chdir(proj)
	out, errs, code := runRunOut(t, "--workspace", "none", "--audit", filepath.Join(t.TempDir(), "audit.jsonl"), "--",
		"sh", "-c", "pwd; ls -A; ls "+proj+" 2>/dev/null; touch "+proj+"/none-out.txt 2>/dev/null; true")
	if want := "/workspace\n"; code != 0 || out != want {
		t.Fatalf("got exit %d, stdout %q; want 0, %q\nstderr: %s", code, out, want, errs)
	}
	if _, err := os.Stat(filepath.Join(proj, "none-out.txt")); err == nil {
		t.Error("the command wrote into the current directory with --workspace none")
	}
}

// TestRootRunWorkspaceRefused: a current directory that holds the audit log
// (or is /) is refused before anything runs, with one message naming the
// file and the fix; a command that is not found is reported once.
// Regression: the refusal was sandboxd's "workspace ... is inside hidden path
// ..." and an exec failure was printed three times (the command's stderr,
// an error log line, run's own error).
func TestRootRunWorkspaceRefused(t *testing.T) {
	roottest.Require(t)
	proj := t.TempDir()
	writeProject(t, proj)
	marker := filepath.Join(proj, "ran")
	tests := []struct {
		name string
		dir  string
		args []string
		code int
		want []string
	}{
		{"holds the audit log", proj, []string{"--audit", filepath.Join(proj, "audit.jsonl")}, 2,
			[]string{"the workspace " + proj + " holds the audit log " + filepath.Join(proj, "audit.jsonl"), "--audit PATH", "--workspace none"}},
		{"is /", "/", nil, 2, []string{"the workspace / is the host's root directory", "--workspace none"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Chdir(tt.dir)
			args := tt.args
			if len(args) == 0 {
				args = []string{"--audit", filepath.Join(t.TempDir(), "audit.jsonl")}
			}
			_, errs, code := runRunOut(t, append(args, "--", "touch", marker)...)
			if code != tt.code {
				t.Errorf("got exit %d, want %d\n%s", code, tt.code, errs)
			}
			for _, w := range tt.want {
				if n := strings.Count(errs, w); n != 1 {
					t.Errorf("%q appears %d times, want once in:\n%s", w, n, errs)
				}
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the command ran")
			}
			if ents, _ := os.ReadDir(proj); len(ents) != len(writeProjectFiles) {
				t.Errorf("the refused run left files in the project: %v", ents)
			}
		})
	}
	t.Run("command not found", func(t *testing.T) {
		t.Chdir(proj)
		_, errs, code := runRunOut(t, "--audit", filepath.Join(t.TempDir(), "audit.jsonl"), "--", "./nope.sh")
		if n := strings.Count(errs, "nope.sh: no such file or directory"); code != 127 || n != 1 {
			t.Errorf("got exit %d and the error %d times, want 127 and once:\n%s", code, n, errs)
		}
	})
}

// TestRootRunRecordsOwnerAndLabels pins a bug from a user trial: the records
// of an in-process airlock run carried no owner and no labels, so audit query
// --owner/--label and policy suggest --label found nothing of it. Run through
// sudo (SUDO_UID), every record of the sandbox names the invoking user, and
// its creation record its labels.
func TestRootRunRecordsOwnerAndLabels(t *testing.T) {
	roottest.Require(t)
	t.Setenv("SUDO_UID", "4242")
	t.Setenv("AIRLOCK_SOCKET", filepath.Join(t.TempDir(), "no-daemon.sock"))
	logPath := filepath.Join(t.TempDir(), "audit.jsonl")
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := "alk-runown-" + hex.EncodeToString(b[:])
	msg, code := runRunCmd(t, "--no-daemon", "--audit", logPath, "--id", id, "--label", "team=ml", "--", "/bin/sh", "-c", "exit 3")
	if code != 3 {
		t.Fatalf("got exit %d (%s), want the command's 3", code, msg)
	}
	out, err := runAudit(t, "query", "--file", logPath, "--sandbox", id, "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r audit.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, r.Kind)
		if r.Owner != "4242" {
			t.Errorf("%s record: got owner %q, want 4242", r.Kind, r.Owner)
		}
		if r.Kind == audit.KindSandbox && string(r.Extra["labels"]) != `{"team":"ml"}` {
			t.Errorf("creation record: got labels %s, want {\"team\":\"ml\"}", r.Extra["labels"])
		}
	}
	if len(kinds) < 3 || kinds[0] != audit.KindSandbox || !slices.Contains(kinds, audit.KindExec) {
		t.Fatalf("got records of kinds %v, want the creation record first and the exec's", kinds)
	}
	out, err = runAudit(t, "query", "--file", logPath, "--label", "team=ml", "--owner", "4242", "--kind", "exec", "--format", "json")
	if err != nil || strings.Count(out, "\n") != 2 {
		t.Errorf("query --label team=ml --owner 4242 --kind exec: got %q, %v; want the exec's start and end", out, err)
	}
}

func TestInvokingUser(t *testing.T) {
	tests := []struct {
		name string
		uid  int
		env  map[string]string
		want int
	}{
		{"not root", 1000, map[string]string{"SUDO_UID": "4242"}, 1000},
		{"root", 0, nil, 0},
		{"sudo uid", 0, map[string]string{"SUDO_UID": "4242", "SUDO_USER": "root"}, 4242},
		{"sudo user", 0, map[string]string{"SUDO_USER": "root"}, 0},
		{"bad sudo uid", 0, map[string]string{"SUDO_UID": "-1"}, 0},
		{"unknown sudo user", 0, map[string]string{"SUDO_USER": "airlock-no-such-user-x"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := invokingUser(tt.uid, func(k string) string { return tt.env[k] }); got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
}
