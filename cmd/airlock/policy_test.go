package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runPolicy runs `airlock policy ARGS...` and returns stdout, stderr and the exit code.
func runPolicy(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := newPolicyCmd()
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(args)
	cmd.SilenceUsage = true
	cmd.SilenceErrors = true
	err := cmd.ExecuteContext(context.Background())
	code := 0
	if err != nil {
		var ec exitCoder
		if errors.As(err, &ec) {
			code = ec.ExitCode()
		} else {
			code = 2
		}
		errb.WriteString(err.Error())
	}
	return out.String(), errb.String(), code
}

func TestPolicyTestCommand(t *testing.T) {
	for _, dir := range []string{filepath.Join("..", "..", "policies"), ""} {
		args := []string{"test"}
		if dir != "" {
			args = append(args, dir)
		}
		out, errOut, code := runPolicy(t, "", args...)
		if code != 0 {
			t.Fatalf("policy test %q: got exit %d, stderr %s\n%s", dir, code, errOut, out)
		}
		for _, want := range []string{"PASS ", "[examples/git-fetch-only]", "coverage 100.0%", "PASS: "} {
			if !strings.Contains(out, want) {
				t.Fatalf("policy test %q: got\n%s\nwant it to contain %q", dir, out, want)
			}
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x_test.rego"), []byte("package x_test\n\ntest_fails if false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code := runPolicy(t, "", "test", dir)
	if code != 1 || !strings.Contains(out, "FAIL x_test.test_fails") {
		t.Fatalf("failing test: got exit %d\n%s", code, out)
	}
}

func TestPolicyCheckCommand(t *testing.T) {
	if out, errOut, code := runPolicy(t, "", "check"); code != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("embedded: got exit %d %s %s", code, out, errOut)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "p.rego")
	if err := os.WriteFile(p, []byte("package airlock.egress\n\nallow if input.destination.hostname == \"x\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runPolicy(t, "", "check", dir)
	if code != 1 || !strings.Contains(errOut, p+":3:") {
		t.Fatalf("bad policy: got exit %d, stderr %s, want 1 and %s:3:", code, errOut, p)
	}
}

func TestPolicyEvalCommand(t *testing.T) {
	in := `{"kind":"http","sandbox":{"id":"sb-1"},"destination":{"host":"PyPI.org","port":443},"http":{"method":"GET","scheme":"https","path":"/simple/"}}`
	out, _, code := runPolicy(t, in, "eval", "--input", "-")
	var d struct {
		Allowed bool   `json:"allowed"`
		Permit  bool   `json:"permit"`
		Mode    string `json:"mode"`
		Rev     string `json:"policy_rev"`
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil || code != 0 || !d.Allowed || !d.Permit || d.Mode != "enforce" || d.Rev == "" {
		t.Fatalf("got exit %d, %v, %s", code, err, out)
	}
	file := filepath.Join(t.TempDir(), "in.json")
	post := strings.Replace(in, `"GET"`, `"POST"`, 1)
	if err := os.WriteFile(file, []byte(post), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runPolicy(t, "", "eval", "--input", file, "--mode", "report")
	if code != 0 || !strings.Contains(out, `"allowed": false`) || !strings.Contains(out, `"permit": true`) || !strings.Contains(errOut, "reason default_deny: no rule allows POST to pypi.org") {
		t.Fatalf("got exit %d\n%s\n%s", code, out, errOut)
	}
	if _, errOut, code := runPolicy(t, `{"kind":"http"}`, "eval", "-i", "-"); code != 2 || !strings.Contains(errOut, "sandbox.id") {
		t.Fatalf("bad input: got exit %d, %s", code, errOut)
	}
	if _, errOut, code := runPolicy(t, in, "eval", "-i", "-", "--preset", "nosuch"); code != 2 || !strings.Contains(errOut, "unknown preset") {
		t.Fatalf("bad preset: got exit %d, %s", code, errOut)
	}
}
