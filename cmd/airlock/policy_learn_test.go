//go:build !airlock_front

package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// learnLog is the records of a report-mode run of the default policy: registry
// reads, hosts only the allowlist refused, and requests refused for other
// reasons (a metadata address, a DNS port, a secret).
var learnLog = filepath.Join("testdata", "learn", "audit.jsonl")

// suggestDir runs `policy suggest` on learnLog into a new directory.
func suggestDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "suggested")
	out, errOut, code := runPolicy(t, "", "suggest", "--from", learnLog, "--out", dir)
	if code != 0 {
		t.Fatalf("suggest: got exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"wrote " + dir, "learned 21", "denied for other reasons 3", "skipped (not_a_decision): close 8"} {
		if !strings.Contains(out, want) {
			t.Fatalf("suggest: got\n%s\nwant it to contain %q", out, want)
		}
	}
	return dir
}

// tighten copies dir without host (and without the generated tests, which
// pin what the log allowed).
func tighten(t *testing.T, dir, host string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "data.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]map[string]map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if _, ok := doc["suggested"]["hosts"][host]; !ok {
		t.Fatalf("no host %s in %s", host, b)
	}
	delete(doc["suggested"]["hosts"], host)
	out := filepath.Join(t.TempDir(), "tight")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(doc)
	if err := os.WriteFile(filepath.Join(out, "data.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	// The rest of the policy as suggest wrote it: rules, table, manifest.
	for _, f := range []string{"suggested.rego", "http_allow.rego", "airlock-policy.yaml"} {
		src, err := os.ReadFile(filepath.Join(dir, f))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, f), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestPolicySuggestCommand(t *testing.T) {
	dir := suggestDir(t)
	// airlock loads it as it is, and its generated tests pass.
	out, errOut, code := runPolicy(t, "", "test", dir)
	if code != 0 || !strings.Contains(out, "test_allowed_1") || !strings.Contains(out, "test_denied_1") {
		t.Fatalf("policy test: got exit %d\n%s\n%s", code, out, errOut)
	}
	if _, _, code := runPolicy(t, "", "suggest", "--from", learnLog, "--out", dir); code != 2 {
		t.Fatalf("suggest into a non-empty directory: got exit %d, want 2", code)
	}
	if _, errOut, code := runPolicy(t, "", "suggest", "--from", learnLog, "--out", t.TempDir()+"/x", "--sandbox", "nosuch"); code != 1 || !strings.Contains(errOut, "nothing to suggest") {
		t.Fatalf("suggest for an unknown sandbox: got exit %d, %s", code, errOut)
	}
}

func TestPolicyReplayCommand(t *testing.T) {
	dir := suggestDir(t)
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     []string
		dontWant []string
	}{
		{
			name:     "the policy that decided: nothing changes",
			args:     []string{"replay", "--policy", filepath.Join("..", "..", "policies"), "--from", learnLog},
			wantCode: 0,
			want:     []string{"replayed 26", "newly allowed 0, newly denied 0", "skipped (not_a_decision): close 8"},
		},
		{
			name:     "the suggestion allows what the run logged as denied",
			args:     []string{"replay", "--policy", dir, "--from", learnLog},
			wantCode: exitNewlyAllowed,
			want:     []string{"newly allowed 21,", "newly allowed:\n", "connect a.cdn.corp.example:443", "http api.example-ai.dev:443", "(was: default_deny; now: allowed)"},
			dontWant: []string{"metadata.google.internal", "/v1/files", ":53"},
		},
		{
			name:     "a change that only tightens exits 0 and lists what it denies",
			args:     []string{"diff", dir, tighten(t, dir, "db.corp.example"), "--from", learnLog},
			wantCode: 0,
			want:     []string{"newly allowed 0, newly denied 2", "newly denied:\n", "tcp db.corp.example:5432", "dns db.corp.example", "(was: allowed; now: default_deny)"},
		},
		{
			name:     "a change that opens a host exits 3",
			args:     []string{"diff", tighten(t, dir, "db.corp.example"), dir, "--from", learnLog},
			wantCode: exitNewlyAllowed,
			want:     []string{"newly allowed 2, newly denied 0", "tcp db.corp.example:5432"},
		},
		{
			name:     "a bad format",
			args:     []string{"replay", "--policy", dir, "--from", learnLog, "--format", "xml"},
			wantCode: 2,
		},
		{
			name:     "a policy that does not load",
			args:     []string{"diff", dir, filepath.Join(t.TempDir(), "nosuch"), "--from", learnLog},
			wantCode: 2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runPolicy(t, "", tc.args...)
			if code != tc.wantCode {
				t.Fatalf("got exit %d, want %d\n%s\n%s", code, tc.wantCode, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("got\n%s\nwant it to contain %q", out, w)
				}
			}
			for _, w := range tc.dontWant {
				if strings.Contains(out, w) {
					t.Errorf("got\n%s\nwant it not to contain %q", out, w)
				}
			}
		})
	}
}

func TestPolicyReplayJSON(t *testing.T) {
	dir := suggestDir(t)
	out, _, code := runPolicy(t, "", "replay", "--policy", dir, "--from", learnLog, "--format", "json")
	var rep struct {
		Records      int                       `json:"records"`
		NewlyAllowed int                       `json:"newly_allowed"`
		Skipped      map[string]map[string]int `json:"skipped"`
		Allowed      []struct {
			Kind, Host string
			Count      int
		} `json:"newly_allowed_by_destination"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitNewlyAllowed {
		t.Fatalf("got exit %d, %v\n%s", code, err, out)
	}
	if rep.Records != 34 || rep.NewlyAllowed != 21 || rep.Skipped["not_a_decision"]["close"] != 8 || len(rep.Allowed) == 0 {
		t.Fatalf("got %+v, want 34 records, 21 newly allowed, 8 close skipped", rep)
	}
}

// TestReadmePolicyLearnExample runs the documents' suggest/replay/diff example
// for real, on the fixture log copied as audit.jsonl, which stands for the
// README's log outside the project (/var/tmp/agent.jsonl).
func TestReadmePolicyLearnExample(t *testing.T) {
	var lines []string
	for _, l := range strings.Split(docsText(t), "\n") {
		if strings.HasPrefix(l, "airlock policy suggest") || strings.HasPrefix(l, "airlock policy replay") || strings.HasPrefix(l, "airlock policy diff") {
			lines = append(lines, l)
		}
	}
	if len(lines) < 3 {
		t.Fatalf("got %d lines of policy suggest/replay/diff in the README and docs, want 3", len(lines))
	}
	log, err := os.ReadFile(learnLog)
	if err != nil {
		t.Fatal(err)
	}
	policies, _ := filepath.Abs(filepath.Join("..", "..", "policies"))
	t.Chdir(t.TempDir())
	if err := os.WriteFile("audit.jsonl", log, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(policies, "policies"); err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		cmdline, comment, _ := strings.Cut(l, "#")
		want := 0
		if strings.Contains(comment, "exit 3") {
			want = exitNewlyAllowed
		}
		args := strings.Fields(cmdline)[2:]
		for i, a := range args {
			if a == "/var/tmp/agent.jsonl" {
				args[i] = "audit.jsonl"
			}
		}
		if out, errOut, code := runPolicy(t, "", args...); code != want {
			t.Fatalf("README %q: got exit %d, want %d\n%s\n%s", l, code, want, out, errOut)
		}
	}
}
