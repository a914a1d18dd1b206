//go:build !airlock_front

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

// TestPolicyEvalRecord: eval given one audit record evaluates the input the
// record stands for (rebuilt as replay rebuilds it) and prints it beside the
// decision; a record that is no decision, or several, are refused naming
// why. Regression: a record was refused as "unknown field seq".
func TestPolicyEvalRecord(t *testing.T) {
	lines := strings.Split(strings.TrimSpace(readFile(t, filepath.Join("testdata", "learn", "audit.jsonl"))), "\n")
	get, post, tcp := lines[1], lines[2], lines[10] // GET and POST pypi.org, tcp to db.corp.example
	exec := `{"seq":40,"ts":"0001-01-01T00:00:00Z","prev":"","id":"x/start","sandbox":"sb-1","kind":"exec","decision":"allow","exec":{"phase":"start","argv":["true"]}}`
	tests := []struct {
		name, in string
		code     int
		allowed  bool
		want     string // in stdout (code 0) or stderr
	}{
		{"allowed GET", get, 0, true, `"method": "GET"`},
		{"denied POST", post, 0, false, `"method": "POST"`},
		{"tcp by name", tcp, 0, false, `"host": "db.corp.example"`},
		{"not a decision", exec, 2, false, "stands for no policy input: not_a_decision"},
		{"two records", get + "\n" + post, 2, false, "more than one audit record"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runPolicy(t, tt.in, "eval", "-i", "-")
			if code != tt.code {
				t.Fatalf("got exit %d, want %d\n%s%s", code, tt.code, out, errOut)
			}
			if code != 0 {
				if !strings.Contains(errOut, tt.want) {
					t.Errorf("got %q, want %q", errOut, tt.want)
				}
				return
			}
			var d struct {
				Allowed bool            `json:"allowed"`
				Input   json.RawMessage `json:"input"`
			}
			if err := json.Unmarshal([]byte(out), &d); err != nil || d.Allowed != tt.allowed || !strings.Contains(out, tt.want) {
				t.Errorf("got allowed %v, %v; want %v and %q in\n%s", d.Allowed, err, tt.allowed, tt.want, out)
			}
		})
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
