package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// maxDocLines bounds a package doc comment: owner, entry point, import rule.
// A manual belongs in docs/ or the README.
const maxDocLines = 30

// docFileName is the one file that carries a package's doc comment.
const docFileName = "doc.go"

// listed is one package as `go list -json` reports it.
type listed struct {
	ImportPath   string
	Dir          string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Module       *struct{ Path string }
	Error        *struct{ Err string }
}

// module is what the checks need of the module: its path and its packages by
// path relative to the module ("gateway", "cmd/airlock").
type module struct {
	path string
	pkgs map[string]*listed
	// deps are the module-internal imports of each package's non-test code,
	// by relative path.
	deps map[string][]string
}

// loadModule runs `go list` over the module this test lives in.
func loadModule(t *testing.T) *module {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Dir,Imports,TestImports,XTestImports,Module,Error", "./...")
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	m := &module{pkgs: map[string]*listed{}, deps: map[string][]string{}}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := new(listed)
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			t.Errorf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		if p.Module == nil {
			t.Fatalf("go list: %s has no module", p.ImportPath)
		}
		if m.path == "" {
			m.path = p.Module.Path
		}
		m.pkgs[m.rel(p.ImportPath)] = p
	}
	if len(m.pkgs) == 0 {
		t.Fatal("go list found no packages")
	}
	for rel, p := range m.pkgs {
		m.deps[rel] = m.internal(p.Imports, rel)
	}
	return m
}

// rel is an import path relative to the module ("" for a path outside it).
func (m *module) rel(importPath string) string {
	if r, ok := strings.CutPrefix(importPath, m.path+"/"); ok {
		return r
	}
	return ""
}

// internal returns the module-internal paths among imports, relative, sorted,
// without self.
func (m *module) internal(imports []string, self string) []string {
	var out []string
	for _, imp := range imports {
		if r := m.rel(imp); r != "" && r != self && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	sort.Strings(out)
	return out
}

// docComment is a file's package doc comment.
type docComment struct {
	file  string
	text  string // as ast.CommentGroup.Text gives it
	lines int
}

// packageDocs returns the package doc comments of the .go files in dir (not
// below it), test files included, and the names of its non-test .go files.
func packageDocs(dir string) (docs []docComment, code []string, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") {
			continue
		}
		if !strings.HasSuffix(name, "_test.go") {
			code = append(code, name)
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return nil, nil, err
		}
		if f.Doc == nil {
			continue
		}
		docs = append(docs, docComment{file: name, text: f.Doc.Text(), lines: commentLines(fset, f.Doc)})
	}
	return docs, code, nil
}

func commentLines(fset *token.FileSet, g *ast.CommentGroup) int {
	return fset.Position(g.End()).Line - fset.Position(g.Pos()).Line + 1
}

// checkDocPlacement says what is wrong with a package's doc comments: there
// must be exactly one, in doc.go, of at most maxDocLines lines.
func checkDocPlacement(docs []docComment) []string {
	var problems []string
	var inDoc *docComment
	for i, d := range docs {
		if d.file == docFileName {
			inDoc = &docs[i]
			continue
		}
		problems = append(problems, fmt.Sprintf("%s carries a package doc comment: move it to %s", d.file, docFileName))
	}
	switch {
	case inDoc == nil:
		problems = append(problems, fmt.Sprintf("no package doc comment in %s", docFileName))
	case inDoc.lines > maxDocLines:
		problems = append(problems, fmt.Sprintf("%s: package doc is %d lines, want at most %d (move the manual to docs/ or the README)", docFileName, inDoc.lines, maxDocLines))
	}
	return problems
}

// rule is a package's import rule.
type rule struct {
	subject  string
	anyOther bool     // "any other airlock package" [but except...]
	except   []string // with anyOther: patterns that may be imported
	forbid   []string // patterns that must not be imported
}

// The fixed form of the rule, the doc's last paragraph.
var (
	ruleRE    = regexp.MustCompile(`^(\S+) must never import: (.+)\.$`)
	patternRE = regexp.MustCompile(`^[a-z0-9_]+(/[a-z0-9_]+)*(/\.\.\.)?$`)
)

const (
	anyOther    = "any other airlock package"
	anyOtherBut = anyOther + " but "
)

// parseRule reads the import rule from the last paragraph of a doc comment's
// text, for the package at path subject.
func parseRule(subject, text string) (rule, error) {
	paras := strings.Split(strings.TrimSpace(text), "\n\n")
	last := strings.Join(strings.Fields(paras[len(paras)-1]), " ")
	m := ruleRE.FindStringSubmatch(last)
	if m == nil {
		return rule{}, fmt.Errorf("the doc's last paragraph is %q, want the import rule %q", last, subject+" must never import: a, b/c, d/....")
	}
	if m[1] != subject {
		return rule{}, fmt.Errorf("the import rule names %q, want this package's path %q", m[1], subject)
	}
	r := rule{subject: subject}
	list := m[2]
	switch {
	case list == anyOther:
		r.anyOther = true
		return r, nil
	case strings.HasPrefix(list, anyOtherBut):
		r.anyOther = true
		list = strings.TrimPrefix(list, anyOtherBut)
	}
	items := strings.Split(list, ", ")
	for _, it := range items {
		if !patternRE.MatchString(it) {
			return rule{}, fmt.Errorf("import rule: %q is not a package path relative to the module (a, b/c, d/...; comma-separated, no \"and\")", it)
		}
		if slices.Contains(r.except, it) || slices.Contains(r.forbid, it) {
			return rule{}, fmt.Errorf("import rule: %q named twice", it)
		}
		if r.anyOther {
			r.except = append(r.except, it)
		} else {
			r.forbid = append(r.forbid, it)
		}
	}
	return r, nil
}

// matchPattern reports whether the relative path p matches pattern: equal, or
// below it when the pattern ends in /....
func matchPattern(pattern, p string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == pattern
}

func matchAny(patterns []string, p string) bool {
	for _, pat := range patterns {
		if matchPattern(pat, p) {
			return true
		}
	}
	return false
}

// checkPatterns refuses a rule that names no existing package (a typo would
// make it hold for ever) or the package itself.
func (r rule) checkPatterns(pkgs []string) error {
	for _, pat := range append(append([]string{}, r.forbid...), r.except...) {
		found := false
		for _, p := range pkgs {
			if matchPattern(pat, p) && p != r.subject {
				found = true
			}
		}
		if matchPattern(pat, r.subject) && !strings.HasSuffix(pat, "/...") {
			return fmt.Errorf("import rule names the package itself (%s)", pat)
		}
		if !found {
			return fmt.Errorf("import rule names %s, which is no other package of the module", pat)
		}
	}
	return nil
}

// chains returns, for every package reachable from start through deps, one
// shortest import chain from subject to it.
func chains(subject string, start []string, deps map[string][]string) map[string][]string {
	out := map[string][]string{}
	queue := []string{}
	for _, s := range start {
		if s != subject && out[s] == nil {
			out[s] = []string{subject, s}
			queue = append(queue, s)
		}
	}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, next := range deps[cur] {
			if next == subject || out[next] != nil {
				continue
			}
			out[next] = append(append([]string{}, out[cur]...), next)
			queue = append(queue, next)
		}
	}
	return out
}

// violations lists what the rule forbids among reached, sorted.
func (r rule) violations(reached map[string][]string) []string {
	var out []string
	for dep, chain := range reached {
		bad := r.anyOther && !matchAny(r.except, dep) || !r.anyOther && matchAny(r.forbid, dep)
		if bad {
			out = append(out, fmt.Sprintf("%s must never import %s, but does: %s", r.subject, dep, strings.Join(chain, " -> ")))
		}
	}
	sort.Strings(out)
	return out
}

// TestPackageLayout checks every package of the module: one doc comment, in
// doc.go, short, ending in an import rule that holds.
func TestPackageLayout(t *testing.T) {
	m := loadModule(t)
	var all []string
	for rel := range m.pkgs {
		all = append(all, rel)
	}
	sort.Strings(all)
	for _, rel := range all {
		p := m.pkgs[rel]
		t.Run(rel, func(t *testing.T) {
			docs, code, err := packageDocs(p.Dir)
			if err != nil {
				t.Fatal(err)
			}
			problems := checkDocPlacement(docs)
			for _, pr := range problems {
				t.Error(pr)
			}
			if len(problems) > 0 {
				return
			}
			var text string
			for _, d := range docs {
				text = d.text
			}
			r, err := parseRule(rel, text)
			if err != nil {
				t.Fatalf("%s: %v", docFileName, err)
			}
			if err := r.checkPatterns(all); err != nil {
				t.Fatalf("%s: %v", docFileName, err)
			}
			start := m.deps[rel]
			if slices.Equal(code, []string{docFileName}) {
				// Only a doc.go beside tests: the tests are its code.
				start = m.internal(append(append([]string{}, p.TestImports...), p.XTestImports...), rel)
			}
			for _, v := range r.violations(chains(rel, start, m.deps)) {
				t.Error(v)
			}
		})
	}
}

func TestCheckDocPlacement(t *testing.T) {
	ok := docComment{file: docFileName, text: "Package x.\n", lines: 3}
	tests := []struct {
		name string
		docs []docComment
		want []string // substrings, one per problem, in order
	}{
		{"one in doc.go", []docComment{ok}, nil},
		{"none", nil, []string{"no package doc comment in doc.go"}},
		{"only in main.go", []docComment{{file: "main.go", lines: 2}}, []string{"main.go carries", "no package doc comment in doc.go"}},
		{"a second one in a test file", []docComment{ok, {file: "x_test.go", lines: 1}}, []string{"x_test.go carries"}},
		{"too long", []docComment{{file: docFileName, lines: maxDocLines + 1}}, []string{"31 lines, want at most 30"}},
		{"at the limit", []docComment{{file: docFileName, lines: maxDocLines}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := checkDocPlacement(tc.docs)
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %d problems %q", got, len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("problem %d: got %q, want it to contain %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestParseRule(t *testing.T) {
	tests := []struct {
		name, subject, text string
		want                rule
		wantErr             string
	}{
		{"deny list wrapped over lines", "gateway", "Package gateway.\n\ngateway must never import: netns,\ndaemon, test/....\n",
			rule{subject: "gateway", forbid: []string{"netns", "daemon", "test/..."}}, ""},
		{"any other", "hostname", "Package hostname.\n\nhostname must never import: any other airlock package.\n",
			rule{subject: "hostname", anyOther: true}, ""},
		{"any other but", "api", "x\n\napi must never import: any other airlock package but config.\n",
			rule{subject: "api", anyOther: true, except: []string{"config"}}, ""},
		{"no rule", "audit", "Package audit owns the log.\n", rule{}, "want the import rule"},
		{"rule not last", "audit", "audit must never import: any other airlock package.\n\nMore text.\n", rule{}, "want the import rule"},
		{"old prose form", "audit", "x\n\naudit must never import policy or gateway.\n", rule{}, "want the import rule"},
		{"no final period", "audit", "x\n\naudit must never import: policy\n", rule{}, "want the import rule"},
		{"other subject", "gateway", "x\n\ngw must never import: netns.\n", rule{}, `names "gw"`},
		{"and instead of comma", "gateway", "x\n\ngateway must never import: netns and daemon.\n", rule{}, `"netns and daemon" is not a package path`},
		{"module path", "gateway", "x\n\ngateway must never import: github.com/airlock-dev/airlock/netns.\n", rule{}, "is not a package path"},
		{"twice", "gateway", "x\n\ngateway must never import: netns, netns.\n", rule{}, "named twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseRule(tc.subject, tc.text)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want %+v", err, tc.want)
			}
			if got.subject != tc.want.subject || got.anyOther != tc.want.anyOther ||
				!slices.Equal(got.except, tc.want.except) || !slices.Equal(got.forbid, tc.want.forbid) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRuleCheckPatterns(t *testing.T) {
	pkgs := []string{"gateway", "netns", "netns/netnstest", "test/e2e", "test/roottest"}
	tests := []struct {
		name    string
		r       rule
		wantErr string
	}{
		{"existing", rule{subject: "gateway", forbid: []string{"netns", "test/..."}}, ""},
		{"typo", rule{subject: "gateway", forbid: []string{"netsn"}}, "names netsn, which is no other package"},
		{"typo in but", rule{subject: "gateway", anyOther: true, except: []string{"polcy"}}, "names polcy"},
		{"itself", rule{subject: "netns", forbid: []string{"netns"}}, "names the package itself"},
		{"tree holding itself and others", rule{subject: "netns", forbid: []string{"netns/..."}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.checkPatterns(pkgs)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("got %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestRuleViolations runs rules over made-up import graphs: a forbidden
// package reached directly or through a third one is reported with its chain.
func TestRuleViolations(t *testing.T) {
	deps := map[string][]string{
		"gateway":  {"audit", "secrets"},
		"secrets":  {"audit", "hostname"},
		"leaky":    {"netns"},
		"netns":    {"audit"},
		"api":      {"config"},
		"config":   {"hostname"},
		"hostname": nil,
		"audit":    nil,
		"daemon":   {"gateway", "netns"},
	}
	tests := []struct {
		name  string
		r     rule
		start []string // nil: deps[subject]
		edit  map[string][]string
		want  []string
	}{
		{name: "holds", r: rule{subject: "gateway", forbid: []string{"netns", "daemon"}}},
		{name: "direct", r: rule{subject: "gateway", forbid: []string{"netns"}},
			edit: map[string][]string{"gateway": {"audit", "secrets", "netns"}},
			want: []string{"gateway must never import netns, but does: gateway -> netns"}},
		{name: "through another package", r: rule{subject: "gateway", forbid: []string{"netns"}},
			edit: map[string][]string{"secrets": {"audit", "hostname", "leaky"}},
			want: []string{"gateway must never import netns, but does: gateway -> secrets -> leaky -> netns"}},
		{name: "any other, leaf", r: rule{subject: "hostname", anyOther: true}},
		{name: "any other, broken", r: rule{subject: "hostname", anyOther: true},
			edit: map[string][]string{"hostname": {"audit"}},
			want: []string{"hostname must never import audit, but does: hostname -> audit"}},
		{name: "any other but, reached through the allowed one", r: rule{subject: "api", anyOther: true, except: []string{"config"}},
			want: []string{"api must never import hostname, but does: api -> config -> hostname"}},
		{name: "tree pattern", r: rule{subject: "daemon", forbid: []string{"test/..."}},
			edit: map[string][]string{"netns": {"audit", "test/fakenet"}},
			want: []string{"daemon must never import test/fakenet, but does: daemon -> netns -> test/fakenet"}},
		{name: "tests as the code of a test-only package", r: rule{subject: "test/e2e", forbid: []string{"daemon"}},
			start: []string{"audit", "daemon"},
			want:  []string{"test/e2e must never import daemon, but does: test/e2e -> daemon"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := map[string][]string{}
			for k, v := range deps {
				g[k] = v
			}
			for k, v := range tc.edit {
				g[k] = v
			}
			start := tc.start
			if start == nil {
				start = g[tc.r.subject]
			}
			got := tc.r.violations(chains(tc.r.subject, start, g))
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMatchPattern(t *testing.T) {
	tests := []struct {
		name, pattern, path string
		want                bool
	}{
		{"equal", "netns", "netns", true},
		{"not below a plain path", "netns", "netns/netnstest", false},
		{"tree: itself", "test/...", "test", true},
		{"tree: below", "test/...", "test/cmd/fakenet", true},
		{"tree: prefix of a name is not below", "test/...", "testdata", false},
		{"other", "netns", "gateway", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := matchPattern(tc.pattern, tc.path); got != tc.want {
				t.Errorf("matchPattern(%q, %q): got %v, want %v", tc.pattern, tc.path, got, tc.want)
			}
		})
	}
}
