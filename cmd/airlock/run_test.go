package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/test/roottest"
)

// runRunCmd runs `airlock run ARGS...` and returns stderr and the exit code.
func runRunCmd(t *testing.T, args ...string) (string, int) {
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
		return errb.String(), 0
	}
	errb.WriteString(err.Error())
	var ec exitCoder
	if errors.As(err, &ec) {
		return errb.String(), ec.ExitCode()
	}
	return errb.String(), 2
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
