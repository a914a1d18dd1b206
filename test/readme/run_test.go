package readme

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/roottest"
)

// readmeProject is the project directory the README's `airlock run`
// examples are run from: what `cd my-agent` stands for.
var readmeProject = map[string]string{
	"data.txt":              "project-data\n",
	"agent.sh":              "#!/bin/sh\necho \"agent.sh in $(pwd)\"\ncat data.txt\necho from-sh > sh-out.txt\n",
	"agent.py":              "import os\nprint('agent.py in', os.getcwd())\nopen('py-out.txt', 'w').write('from-py')\n",
	"test_agent.py":         "def test_sees_the_project():\n    assert open('data.txt').read() == 'project-data\\n'\n",
	"policies/default.rego": "",
}

// TestRootReadmeRun runs the README's `airlock run` examples for real, as
// root and in-process, from a project directory holding what they name
// (agent.sh, agent.py, a test for pytest, ./policies): every line of the
// block under "Running an agent's command" and the report-mode line of
// "Policies". Each gets --audit with a temporary log (the machine's
// /var/log/airlock is left alone; the report-mode line's own log path is
// moved to a temporary directory). The line that installs from a registry
// would reach the internet, so it is only parsed (TestReadmeExamples).
func TestRootReadmeRun(t *testing.T) {
	roottest.Require(t)
	var lines []string
	for _, b := range readmeBlocks(t) {
		if b.lang != "sh" {
			continue
		}
		for _, l := range strings.Split(b.text, "\n") {
			if strings.Contains(b.text, "airlock run -- ./agent.sh") || strings.Contains(l, "airlock run --mode report") {
				lines = append(lines, l)
			}
		}
	}
	if len(lines) < 5 {
		t.Fatalf("found %d lines of airlock run examples in the README and docs, want the run section's and the report-mode one", len(lines))
	}
	bin := buildShipped(t)
	proj := writeReadmeProject(t)
	ran := 0
	for _, line := range lines {
		args, ok := runArgs(t, line)
		if !ok {
			continue
		}
		ran++
		name, _, _ := strings.Cut(line, "#")
		t.Run(strings.TrimSpace(name), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, args...)
			cmd.Dir = proj
			cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
		})
	}
	if ran < 4 {
		t.Fatalf("ran %d README lines, want at least 4", ran)
	}
	for _, f := range []string{"sh-out.txt", "py-out.txt"} {
		if _, err := os.Stat(filepath.Join(proj, f)); err != nil {
			t.Errorf("the agent's %s is not in the project: %v", f, err)
		}
	}
}

// runArgs turns a README line into airlock's arguments with a temporary
// audit log; false for a line that is not run here (cd, a registry fetch).
func runArgs(t *testing.T, line string) ([]string, bool) {
	line, _, _ = strings.Cut(line, "#")
	f := strings.Fields(line)
	if len(f) > 0 && f[0] == "sudo" {
		f = f[1:]
	}
	if len(f) < 2 || f[0] != "airlock" || f[1] != "run" || slices.Contains(f, "pip") {
		return nil, false
	}
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	args := slices.Clone(f[1:])
	if i := slices.Index(args, "--audit"); i >= 0 && i+1 < len(args) {
		args[i+1] = audit
		return args, true
	}
	return slices.Insert(args, 1, "--audit", audit), true
}

// writeReadmeProject makes the project directory, its policies the
// embedded default's.
func writeReadmeProject(t *testing.T) string {
	t.Helper()
	proj := t.TempDir()
	for name, body := range readmeProject {
		if name == "policies/default.rego" {
			b, err := os.ReadFile("../../policies/default/default.rego")
			if err != nil {
				t.Fatal(err)
			}
			body = string(b)
		}
		p := filepath.Join(proj, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return proj
}

// TestRootReadmeRootless runs the README's `airlock run` lines without sudo
// as an ordinary user (nobody, no daemon): they get the rootless sandbox, say
// so on stderr, and the agent's output lands in the project.
func TestRootReadmeRootless(t *testing.T) {
	roottest.Require(t)
	var lines []string
	for _, b := range readmeBlocks(t) {
		if b.lang != "sh" || !strings.Contains(b.text, "airlock run -- ./agent.sh") {
			continue
		}
		for _, l := range strings.Split(b.text, "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "airlock run") {
				lines = append(lines, l)
			}
		}
	}
	if len(lines) == 0 {
		t.Fatal("the README shows no `airlock run` without sudo beside the root one")
	}
	dir, err := os.MkdirTemp("/var/tmp", "alk-readme-rootless-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "airlock")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/airlock").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	proj, runtime, audit := filepath.Join(dir, "my-agent"), filepath.Join(dir, "run"), filepath.Join(dir, "audit")
	for name, body := range readmeProject {
		p := filepath.Join(proj, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{runtime, audit} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("chown", "-R", "65534:65534", proj, runtime, audit).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v\n%s", err, out)
	}
	for _, line := range lines {
		name, _, _ := strings.Cut(line, "#")
		t.Run(strings.TrimSpace(name), func(t *testing.T) {
			args := strings.Fields(name)[1:]
			args = slices.Insert(args, 1, "--socket", filepath.Join(dir, "none.sock"), "--audit", filepath.Join(audit, "audit.jsonl"))
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "setpriv", append([]string{"--reuid", "65534", "--regid", "65534", "--clear-groups", "--",
				"env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/nonexistent", "LANG=C.UTF-8", "XDG_RUNTIME_DIR=" + runtime, bin}, args...)...)
			cmd.Dir = proj
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "airlock: rootless:") {
				t.Fatalf("%s as nobody: %v, want success and the rootless line\n%s", line, err, out)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(proj, "sh-out.txt")); err != nil {
		t.Errorf("the agent's sh-out.txt is not in the project: %v", err)
	}
}
