package readme

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/airlock-dev/airlock/audit/report/reporttest"
	"github.com/airlock-dev/airlock/cniplugin"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/secrets"
	"github.com/airlock-dev/airlock/test/roottest"
)

type block struct {
	lang, text string
	line       int
}

func readmeBlocks(t *testing.T) []block {
	t.Helper()
	f, err := os.Open("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []block
	var cur *block
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &block{lang: strings.TrimPrefix(line, "```"), line: n}
		case cur != nil && line == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	if len(out) < 5 {
		t.Fatalf("found %d code blocks in README.md, want the examples", len(out))
	}
	return out
}

func TestReadmeExamples(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "airlock")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/airlock").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cniBin := filepath.Join(t.TempDir(), "airlock-cni")
	if out, err := exec.Command("go", "build", "-o", cniBin, "../../cmd/airlock-cni").CombinedOutput(); err != nil {
		t.Fatalf("build airlock-cni: %v\n%s", err, out)
	}
	var yamls, regos, cmds, pythons, conflists int
	for _, b := range readmeBlocks(t) {
		switch b.lang {
		case "json":
			if strings.Contains(b.text, `"airlock-cni"`) {
				conflists++
				checkConflist(t, b)
			}
		case "yaml":
			yamls++
			// A secrets file: bindings, or a list of secrets (the
			// config's secrets key is a map).
			if strings.Contains(b.text, "bindings:") || strings.HasPrefix(b.text, "secrets:\n  -") {
				if _, err := secrets.Parse([]byte(b.text)); err != nil {
					t.Errorf("README.md:%d secrets example: %v", b.line, err)
				}
				continue
			}
			if _, err := config.Decode(strings.NewReader(b.text)); err != nil {
				t.Errorf("README.md:%d config example: %v", b.line, err)
			}
		case "rego":
			regos++
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "policy.rego"), []byte(b.text), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := policy.New(policy.Config{Dir: dir}, nil); err != nil {
				t.Errorf("README.md:%d policy example: %v", b.line, err)
			}
		case "python":
			// Compiled here; TestRootReadmePython runs it against a daemon.
			pythons++
			cmd := exec.Command("/usr/bin/python3", "-c", "import ast, sys; ast.parse(sys.stdin.read())")
			cmd.Stdin = strings.NewReader(b.text)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("README.md:%d python example: %v\n%s", b.line, err, out)
			}
		case "sh":
			if isDaemonBlock(t, b) || strings.Contains(b.text, "-replace github.com/airlock-dev/airlock=") {
				cmds++ // TestRootReadmeDaemon, TestReadmeGoClient run it
				continue
			}
			for i, line := range strings.Split(b.text, "\n") {
				if c := checkCNICommand(t, cniBin, line); c {
					cmds++
				} else if c := checkCommand(t, bin, line); c {
					cmds++
				} else if strings.Contains(line, "airlock ") && !strings.HasPrefix(strings.TrimSpace(line), "make") {
					t.Errorf("README.md:%d: %q not checked", b.line+1+i, line)
				}
			}
		}
	}
	if yamls < 2 || regos < 1 || cmds < 8 || pythons < 1 || conflists < 1 {
		t.Fatalf("checked %d yaml, %d rego, %d commands, %d python, %d CNI conflists: the README lost its examples", yamls, regos, cmds, pythons, conflists)
	}
}

// checkConflist parses a README conflist as a runtime does (libcni) and its
// airlock-cni entry as the plugin does (strictly: a misspelt field fails).
func checkConflist(t *testing.T, b block) {
	t.Helper()
	list, err := libcni.ConfListFromBytes([]byte(b.text))
	if err != nil {
		t.Errorf("README.md:%d conflist: %v", b.line, err)
		return
	}
	found := false
	for _, p := range list.Plugins {
		if p.Network.Type != "airlock-cni" {
			continue
		}
		found = true
		if _, err := cniplugin.ParseConfig(p.Bytes); err != nil {
			t.Errorf("README.md:%d airlock-cni entry: %v", b.line, err)
		}
	}
	if !found || len(list.Plugins) < 2 || list.Plugins[len(list.Plugins)-1].Network.Type != "airlock-cni" {
		t.Errorf("README.md:%d conflist: airlock-cni must be chained last, after the main plugin", b.line)
	}
}

// checkCNICommand runs an airlock-cni command line from the README; it must
// exit 0.
func checkCNICommand(t *testing.T, bin, line string) bool {
	t.Helper()
	line, _, _ = strings.Cut(line, "#")
	fields := strings.Fields(line)
	if len(fields) == 0 || fields[0] != "airlock-cni" {
		return false
	}
	cmd := exec.Command(bin, fields[1:]...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"} // no CNI_COMMAND: the person's view
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("airlock-cni %s: %v\n%s", strings.Join(fields[1:], " "), err, out)
	}
	return true
}

// checkCommand runs an airlock command line from the README with --help put
// after its subcommand words, so cobra parses every flag (an unknown flag or
// subcommand fails) without doing the work.
func checkCommand(t *testing.T, bin, line string) bool {
	t.Helper()
	line, _, _ = strings.Cut(line, "#")
	line, _, _ = strings.Cut(line, "|")
	fields := strings.Fields(line)
	if len(fields) > 0 && fields[0] == "sudo" {
		fields = fields[1:]
	}
	if len(fields) == 0 || fields[0] != "airlock" {
		return false
	}
	args := fields[1:]
	if i := indexOf(args, "--"); i >= 0 {
		args = args[:i]
	}
	words := 0
	for words < len(args) && !strings.HasPrefix(args[words], "-") && words < 2 && isSubcommand(args[words]) {
		words++
	}
	full := append(append(append([]string{}, args[:words]...), "--help"), args[words:]...)
	for i, a := range full {
		full[i] = strings.Trim(a, `"`)
	}
	out, err := exec.Command(bin, full...).CombinedOutput()
	if err != nil {
		t.Errorf("airlock %s: %v\n%s", strings.Join(full, " "), err, out)
	}
	return true
}

func isSubcommand(w string) bool {
	switch w {
	case "run", "serve", "attach", "policy", "audit", "ca", "version", "test", "check", "eval", "verify", "query", "tail", "init", "show", "pubkey", "export",
		"sandbox", "create", "exec", "cp", "ls", "inspect", "update", "logs", "rm", "approve", "suggest", "replay", "diff", "explain", "bundle",
		"config", "example":
		return true
	case "report": // airlock audit report
		return true
	}
	return false
}

func indexOf(ss []string, s string) int {
	for i, x := range ss {
		if x == s {
			return i
		}
	}
	return -1
}

// TestRootDemo runs `make demo`'s script, the README's first command, and checks
// that it shows what it promises: registries reached, leaks refused, the log
// verified with its signatures, a tampered copy caught at the right line, and
// an HTML report whose numbers, opened in headless chromium, are the log's.
func TestRootDemo(t *testing.T) {
	roottest.Require(t)
	bin := filepath.Join(t.TempDir(), "airlock")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/airlock").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	artifacts := reporttest.ArtifactsDir(t)
	cmd := exec.Command("bash", "scripts/demo.sh")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "AIRLOCK_BIN="+bin, "AIRLOCK_DEMO_OUT="+artifacts)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	for _, want := range []string{
		"hello from pypi.org/simple/requests/",
		"CONNECT tunnel failed, response 403",
		"not resolved",
		"egress summary:",
		"deny  connect evil.example:443",
		"chain ok",
		"signatures ok",
		"prev mismatch",
		"report: " + artifacts + "/report.html",
		"log: " + artifacts + "/audit.jsonl",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	checkDemoReport(t, artifacts)
	// The log the demo points the reader at is still there and verifies.
	verify := exec.Command(bin, "audit", "verify", "--pubkey", filepath.Join(artifacts, "audit.pub"), filepath.Join(artifacts, "audit.jsonl"))
	if out, err := verify.CombinedOutput(); err != nil || !strings.Contains(string(out), "signatures ok") {
		t.Errorf("verifying the log the demo left: %v\n%s", err, out)
	}
}

// checkDemoReport opens the demo's report in headless chromium (no network)
// and checks that it shows the numbers of the JSON report of the same log,
// that the decision filter works, and that the page asked for nothing; the
// screenshot stays in the artifacts directory.
func checkDemoReport(t *testing.T, dir string) {
	raw, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Totals map[string]int64 `json:"totals"`
	}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if want.Totals["allowed"] == 0 || want.Totals["denied"] == 0 {
		t.Fatalf("the demo's report counts %v: want allowed and denied requests", want.Totals)
	}
	page := reporttest.Open(t, reporttest.Chromium(t), filepath.Join(dir, "report.html"))
	page.Screenshot(filepath.Join(dir, "report.png"))
	shown := page.Shown()
	for k, v := range want.Totals {
		if shown.Totals[k] != v {
			t.Errorf("the page shows %s=%d, the log's JSON report %d", k, shown.Totals[k], v)
		}
	}
	if shown.Banner != "banner ok" {
		t.Errorf("verification banner %q, want \"banner ok\" (the demo's log verifies with its key)", shown.Banner)
	}
	page.Choose("f-decision", "deny")
	if got := page.Shown().Totals; got["allowed"] != 0 || got["denied"] != want.Totals["denied"] {
		t.Errorf("filtered to denials, the page shows %v; want 0 allowed and %d denied", got, want.Totals["denied"])
	}
	page.Screenshot(filepath.Join(dir, "report-denied.png"))
	if got := page.Requests(); len(got) != 0 {
		t.Errorf("the report sent requests: %v", got)
	}
}
