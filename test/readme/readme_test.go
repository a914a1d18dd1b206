package readme

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/containernetworking/cni/libcni"

	"github.com/airlock-dev/airlock/audit/report/reporttest"
	"github.com/airlock-dev/airlock/cniplugin"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/secrets"
	"github.com/airlock-dev/airlock/test/roottest"
)

type block struct {
	file, lang, text string
	line             int
}

// where is the block's file:line, for messages.
func (b block) where() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// notInstructions are the documents under docs/ whose code blocks show how
// the code works rather than what to type: the architecture map.
var notInstructions = map[string]bool{"docs/ARCHITECTURE.md": true}

// docFiles are the documents whose examples this package checks, relative to
// the repository: the README and the reference documents in docs/ it links
// (an example moved between them stays checked).
func docFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	for _, d := range docs {
		rel := strings.TrimPrefix(d, "../../")
		if !notInstructions[rel] {
			files = append(files, rel)
		}
	}
	return files
}

// readmeBlocks returns the fenced code blocks of every document docFiles
// names, README first.
func readmeBlocks(t *testing.T) []block {
	t.Helper()
	var out []block
	for _, name := range docFiles(t) {
		out = append(out, fileBlocks(t, name)...)
	}
	if len(out) < 5 {
		t.Fatalf("found %d code blocks in %v, want the examples", len(out), docFiles(t))
	}
	return out
}

// fileBlocks returns the fenced code blocks of one document.
func fileBlocks(t *testing.T, name string) []block {
	t.Helper()
	f, err := os.Open(filepath.Join("../..", name))
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
			cur = &block{file: name, lang: strings.TrimPrefix(line, "```"), line: n}
		case cur != nil && line == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
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
					t.Errorf("%s secrets example: %v", b.where(), err)
				}
				continue
			}
			if _, err := config.Decode(strings.NewReader(b.text)); err != nil {
				t.Errorf("%s config example: %v", b.where(), err)
			}
		case "rego":
			regos++
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "policy.rego"), []byte(b.text), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := policy.New(policy.Config{Dir: dir}, nil); err != nil {
				t.Errorf("%s policy example: %v", b.where(), err)
			}
		case "python":
			// Compiled here; TestRootReadmePython runs it against a daemon.
			pythons++
			cmd := exec.Command("/usr/bin/python3", "-c", "import ast, sys; ast.parse(sys.stdin.read())")
			cmd.Stdin = strings.NewReader(b.text)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s python example: %v\n%s", b.where(), err, out)
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
					t.Errorf("%s:%d: %q not checked", b.file, b.line+1+i, line)
				}
			}
		}
	}
	if yamls < 2 || regos < 1 || cmds < 8 || pythons < 1 || conflists < 1 {
		t.Fatalf("checked %d yaml, %d rego, %d commands, %d python, %d CNI conflists: the README and docs lost their examples", yamls, regos, cmds, pythons, conflists)
	}
}

// checkConflist parses a README conflist as a runtime does (libcni) and its
// airlock-cni entry as the plugin does (strictly: a misspelt field fails).
func checkConflist(t *testing.T, b block) {
	t.Helper()
	list, err := libcni.ConfListFromBytes([]byte(b.text))
	if err != nil {
		t.Errorf("%s conflist: %v", b.where(), err)
		return
	}
	found := false
	for _, p := range list.Plugins {
		if p.Network.Type != "airlock-cni" {
			continue
		}
		found = true
		if _, err := cniplugin.ParseConfig(p.Bytes); err != nil {
			t.Errorf("%s airlock-cni entry: %v", b.where(), err)
		}
	}
	if !found || len(list.Plugins) < 2 || list.Plugins[len(list.Plugins)-1].Network.Type != "airlock-cni" {
		t.Errorf("%s conflist: airlock-cni must be chained last, after the main plugin", b.where())
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
	line, _, _ = strings.Cut(line, " > ")
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
		"config", "example", "doctor":
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

// buildShipped builds what make build ships into a new directory, in its
// order: the airlock front, then the core and the sandbox init beside it.
// It returns the front's path.
func buildShipped(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, b := range []struct{ out, tags, pkg string }{
		{"airlock", "airlock_front", "../../cmd/airlock"},
		{"airlock-core", "", "../../cmd/airlock"},
		{"airlock-init", "", "../../cmd/airlock-init"},
	} {
		if out, err := exec.Command("go", "build", "-tags", b.tags, "-o", filepath.Join(dir, b.out), b.pkg).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", b.out, err, out)
		}
	}
	return filepath.Join(dir, "airlock")
}

// TestRootDemo runs `make demo`'s script, the README's first command, and checks
// that it shows what it promises: registries reached, leaks refused, the log
// verified with its signatures, a tampered copy caught at the right line, and
// an HTML report whose numbers, opened in headless chromium, are the log's.
func TestRootDemo(t *testing.T) {
	roottest.Require(t)
	bin := buildShipped(t)
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
		"what the demo leaves in " + artifacts,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	checkPrintedPathsExist(t, string(out), artifacts)
	checkDemoReport(t, artifacts)
	// The log the demo points the reader at is still there and verifies.
	verify := exec.Command(bin, "audit", "verify", "--pubkey", filepath.Join(artifacts, "audit.pub"), filepath.Join(artifacts, "audit.jsonl"))
	if out, err := verify.CombinedOutput(); err != nil || !strings.Contains(string(out), "signatures ok") {
		t.Errorf("verifying the log the demo left: %v\n%s", err, out)
	}
}

// checkPrintedPathsExist: every path the demo told the reader about is still
// there after it returned (it used to print its work directory's log and
// tampered copy, removed on exit). The demo's output directory must be named.
func checkPrintedPathsExist(t *testing.T, out, artifacts string) {
	t.Helper()
	// A path under the temporary directory or the output directory as the
	// demo prints it: up to a space, a colon or a bracket.
	printed := regexp.MustCompile(`(?:/tmp/|` + regexp.QuoteMeta(artifacts) + `)[^\s:;,()'"\x1b]*`)
	named := false
	for _, p := range printed.FindAllString(out, -1) {
		p = strings.TrimRight(p, ".")
		named = named || strings.HasPrefix(p, artifacts)
		if _, err := os.Stat(p); err != nil {
			t.Errorf("the demo printed %s, which is gone after it returned: %v", p, err)
		}
	}
	if !named {
		t.Errorf("the demo printed no path under its output directory %s:\n%s", artifacts, out)
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

// TestEveryCommandHasExample: every airlock command (each leaf of the tree
// `airlock --help` shows, cobra's help and completion aside) has an example
// line in an sh block of the README or docs/, which TestReadmeExamples then
// checks. A new command without one fails here, naming it.
func TestEveryCommandHasExample(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "airlock")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/airlock").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	var shown []string // each example's words after airlock, up to the first flag
	for _, b := range readmeBlocks(t) {
		if b.lang != "sh" {
			continue
		}
		for _, line := range commandLines(b.text) {
			line, _, _ = strings.Cut(line, "#")
			fields := strings.Fields(line)
			if len(fields) > 0 && fields[0] == "sudo" {
				fields = fields[1:]
			}
			if len(fields) > 0 && fields[0] == "airlock" {
				shown = append(shown, strings.Join(fields[1:], " ")+" ")
			}
		}
	}
	leaves := commandLeaves(t, bin, nil)
	if len(leaves) < 20 {
		t.Fatalf("found %d commands in airlock --help, want the whole tree: %v", len(leaves), leaves)
	}
	for _, leaf := range leaves {
		path := strings.Join(leaf, " ") + " "
		found := false
		for _, s := range shown {
			found = found || strings.HasPrefix(s, path)
		}
		if !found {
			t.Errorf("airlock %s has no example in an sh block of %v", strings.TrimSpace(path), docFiles(t))
		}
	}
}

// commandLeaves walks `airlock PATH --help`'s "Available Commands" and
// returns the commands that have none below them.
func commandLeaves(t *testing.T, bin string, path []string) [][]string {
	t.Helper()
	out, err := exec.Command(bin, append(slices.Clone(path), "--help")...).Output()
	if err != nil {
		t.Fatalf("airlock %s --help: %v", strings.Join(path, " "), err)
	}
	_, list, ok := strings.Cut(string(out), "\nAvailable Commands:\n")
	if !ok {
		return [][]string{path}
	}
	list, _, _ = strings.Cut(list, "\n\n")
	var leaves [][]string
	for _, line := range strings.Split(list, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == "help" || f[0] == "completion" {
			continue
		}
		leaves = append(leaves, commandLeaves(t, bin, append(slices.Clone(path), f[0]))...)
	}
	return leaves
}

// TestDocLinks: every relative link of the README, docs/ and the other
// documents a reader is sent to names a file that exists and, with a
// #fragment into a markdown file, a heading of it (GitHub's anchors), so
// moving a section between documents cannot leave a link behind.
func TestDocLinks(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	checked := 0
	for _, name := range append(docFiles(t), "SECURITY.md", "policies/README.md", "deploy/README.md", "clients/python/README.md") {
		data, err := os.ReadFile(filepath.Join("../..", name))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := filepath.Join("../..", filepath.Dir(name), file)
			if file == "" {
				path = filepath.Join("../..", name)
			}
			checked++
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %s: %v", name, target, err)
				continue
			}
			if frag != "" && strings.HasSuffix(path, ".md") && !slices.Contains(anchors(t, path), frag) {
				t.Errorf("%s: link %s: %s has no heading with anchor #%s", name, target, file, frag)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d links, want the documents' cross references", checked)
	}
}

// anchors are the anchors GitHub gives a markdown file's headings: lower
// case, punctuation but - and _ dropped, spaces as -.
func anchors(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	inCode := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}
