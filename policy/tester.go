package policy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/cover"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// DefaultTestTimeout bounds one Rego test.
const DefaultTestTimeout = 5 * time.Second

// TestResult is the outcome of one Rego test rule.
type TestResult struct {
	Unit     string        `json:"unit,omitempty"` // "" for the main unit, or examples/NAME
	Package  string        `json:"package"`
	Name     string        `json:"name"`
	Location string        `json:"location"` // file:line
	Pass     bool          `json:"pass"`
	Error    string        `json:"error,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// FileCoverage is the line coverage of one policy file, over every unit.
type FileCoverage struct {
	File       string  `json:"file"`
	Covered    int     `json:"covered_lines"`
	NotCovered int     `json:"not_covered_lines"`
	Percent    float64 `json:"coverage"`
}

// TestReport is what RunTests found.
type TestReport struct {
	Results  []TestResult   `json:"results"`
	Passed   int            `json:"passed"`
	Failed   int            `json:"failed"`
	Coverage float64        `json:"coverage"` // percent of lines, non-test files
	Files    []FileCoverage `json:"files,omitempty"`
}

// OK reports whether every test passed and there was at least one.
func (r *TestReport) OK() bool { return r.Failed == 0 && r.Passed > 0 }

// RunTests runs the *_test.rego tests of the policy in dir and of each of its
// examples/NAME units, with the embedded library, default policy and presets
// loaded (with dir empty: the embedded tests and examples). Tests run against
// the default configuration (every preset, or those the directory's manifest
// names; no allow hosts; enforce), so tests answer the same whatever flags the
// gateway runs with. A failing test's Error names the expression that failed,
// its values and the input it was evaluated with. It measures line
// coverage of the non-test files. An error means a unit could not be built or
// compiled; failing tests are in the report.
func RunTests(ctx context.Context, dir string) (*TestReport, error) {
	us, err := units(dir, true)
	if err != nil {
		return nil, err
	}
	rep := &TestReport{}
	covered := map[string]map[int]bool{}
	notCovered := map[string]map[int]bool{}
	for _, u := range us {
		b, err := build(u, testConfig())
		if err != nil {
			return nil, unitErr(u, err)
		}
		cov := cover.New()
		results, err := runUnitTests(ctx, b, cov)
		if err != nil {
			return nil, unitErr(u, err)
		}
		for i := range results {
			results[i].Unit = u.Name
		}
		rep.Results = append(rep.Results, results...)
		nonTest := map[string]*ast.Module{}
		for name, m := range b.Modules {
			if !b.Tests[name] {
				nonTest[name] = withoutDerived(m)
			}
		}
		cr := cov.Report(nonTest)
		for file, fr := range cr.Files {
			if _, ok := nonTest[file]; !ok {
				continue
			}
			addRows(covered, file, fr.Covered)
			addRows(notCovered, file, fr.NotCovered)
		}
	}
	for _, r := range rep.Results {
		if r.Pass {
			rep.Passed++
		} else {
			rep.Failed++
		}
	}
	var tc, tn int
	for file, rows := range notCovered {
		for row := range rows {
			if covered[file][row] {
				delete(rows, row)
			}
		}
	}
	files := map[string]bool{}
	for f := range covered {
		files[f] = true
	}
	for f := range notCovered {
		files[f] = true
	}
	for f := range files {
		c, n := len(covered[f]), len(notCovered[f])
		tc += c
		tn += n
		fc := FileCoverage{File: f, Covered: c, NotCovered: n}
		if c+n > 0 {
			fc.Percent = 100 * float64(c) / float64(c+n)
		}
		rep.Files = append(rep.Files, fc)
	}
	sort.Slice(rep.Files, func(i, j int) bool { return rep.Files[i].File < rep.Files[j].File })
	if tc+tn > 0 {
		rep.Coverage = 100 * float64(tc) / float64(tc+tn)
	}
	return rep, nil
}

func addRows(m map[string]map[int]bool, file string, rs []cover.Range) {
	if m[file] == nil {
		m[file] = map[int]bool{}
	}
	for _, r := range rs {
		for row := r.Start.Row; row <= r.End.Row; row++ {
			m[file][row] = true
		}
	}
}

func unitErr(u unit, err error) error {
	if u.Name == "" {
		return err
	}
	return fmt.Errorf("%s: %w", u.Name, err)
}

// testConfig is the configuration policy tests run against.
func testConfig() Config {
	c, _ := Config{}.withDefaults()
	return c
}

// runUnitTests compiles a built unit with its tests and runs them; cov may be nil.
func runUnitTests(ctx context.Context, b *built, cov *cover.Cover) ([]TestResult, error) {
	store := inmem.NewFromObjectWithOpts(b.Data, inmem.OptRoundTripOnWrite(false))
	txn, err := store.NewTransaction(ctx)
	if err != nil {
		return nil, err
	}
	defer store.Abort(ctx, txn)
	r := tester.NewRunner().
		SetCompiler(newCompiler(b.Schema, true)).
		SetStore(store).
		SetModules(b.Modules).
		SetTimeout(DefaultTestTimeout).
		SetParallel(2).
		CapturePrintOutput(true).
		RaiseBuiltinErrors(true)
	if cov != nil {
		r = r.SetCoverageQueryTracer(cov)
	}
	ch, err := r.RunTests(ctx, txn)
	if err != nil {
		return nil, err
	}
	var out []TestResult
	for res := range ch {
		tr := TestResult{
			Package:  strings.TrimPrefix(res.Package, "data."),
			Name:     res.Name,
			Pass:     res.Pass(),
			Duration: res.Duration,
		}
		if res.Location != nil {
			tr.Location = fmt.Sprintf("%s:%d", res.Location.File, res.Location.Row)
		}
		if res.Error != nil {
			tr.Error = res.Error.Error()
		} else if res.Fail {
			tr.Error = "fail"
		}
		if len(res.Output) > 0 && !tr.Pass {
			tr.Error += "\n" + string(res.Output)
		}
		out = append(out, tr)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Location < out[j].Location })
	var failed []string
	for _, r := range out {
		if !r.Pass && r.Error == "fail" {
			failed = append(failed, "data."+r.Package+"."+r.Name)
		}
	}
	if len(failed) > 0 {
		why, err := explainFailures(ctx, b, failed)
		if err != nil {
			return nil, err
		}
		for i, r := range out {
			if w := why["data."+r.Package+"."+r.Name]; w != "" && !r.Pass {
				out[i].Error = w
			}
		}
	}
	return out, nil
}

// explainFailures runs the named failing tests again with tracing and returns,
// per test, the expression that failed (file:line, the expression with its
// variables' values) and the input it was evaluated with.
func explainFailures(ctx context.Context, b *built, names []string) (map[string]string, error) {
	store := inmem.NewFromObjectWithOpts(b.Data, inmem.OptRoundTripOnWrite(false))
	txn, err := store.NewTransaction(ctx)
	if err != nil {
		return nil, err
	}
	defer store.Abort(ctx, txn)
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = regexp.QuoteMeta(n)
	}
	ch, err := tester.NewRunner().
		SetCompiler(newCompiler(b.Schema, true)).
		SetStore(store).
		SetModules(b.Modules).
		SetTimeout(DefaultTestTimeout).
		EnableTracing(true).
		Filter("^("+strings.Join(quoted, "|")+")$").
		RunTests(ctx, txn)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for res := range ch {
		if res.Fail {
			out[res.Package+"."+res.Name] = failureText(res.Trace)
		}
	}
	return out, nil
}

// failureText is "fail: FILE:LINE: EXPR" with the expression's variables and
// the input in effect where it failed (the last `with input as` value seen).
func failureText(trace []*topdown.Event) string {
	for i := len(trace) - 1; i >= 0; i-- {
		e := trace[i]
		if e.Op != topdown.FailOp || e.Location == nil || e.QueryID == 0 {
			continue
		}
		if x, ok := e.Node.(*ast.Expr); ok {
			if _, every := x.Terms.(*ast.Every); every {
				continue
			}
		}
		var w strings.Builder
		fmt.Fprintf(&w, "fail: %s:%d: %s", e.Location.File, e.Location.Row, strings.TrimSpace(string(e.Location.Text)))
		var vars bytes.Buffer
		if err := topdown.PrettyEvent(&vars, e, topdown.PrettyEventOpts{PrettyVars: true}); err == nil {
			for _, l := range strings.Split(strings.TrimRight(vars.String(), "\n"), "\n")[1:] {
				if l = strings.TrimLeft(l, "\t "); l != "" && l != "|" {
					fmt.Fprintf(&w, "\n    %s", strings.TrimLeft(l, "| "))
				}
			}
		}
		for j := i; j >= 0; j-- {
			if in := trace[j].Input(); in != nil {
				fmt.Fprintf(&w, "\n    input: %s", in)
				break
			}
		}
		return w.String()
	}
	return "fail"
}

// Problem is one finding of Check, located at file:line when known.
type Problem struct {
	Unit string `json:"unit,omitempty"`
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
	Msg  string `json:"msg"`
}

func (p Problem) String() string {
	switch {
	case p.File != "" && p.Line > 0:
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg)
	case p.File != "":
		return fmt.Sprintf("%s: %s", p.File, p.Msg)
	}
	return p.Msg
}

// Check builds and compiles the policy in dir (embedded default when empty)
// and each of its examples/NAME units, tests included, in strict mode against
// the input schema with the restricted builtins, and validates presets and
// data. It returns every problem found; an empty slice means the policy is good.
func Check(dir string) ([]Problem, error) {
	us, err := units(dir, true)
	if err != nil {
		return nil, err
	}
	var out []Problem
	for _, u := range us {
		b, err := build(u, testConfig())
		if err != nil {
			out = append(out, problems(u.Name, err)...)
			continue
		}
		if _, err := compileModules(b.Modules, b.Schema); err != nil {
			out = append(out, problems(u.Name, err)...)
		}
	}
	return out, nil
}

// problems turns an error (ast.Errors or other) into located problems.
func problems(unitName string, err error) []Problem {
	var errs ast.Errors
	if errors.As(err, &errs) {
		out := make([]Problem, 0, len(errs))
		for _, e := range errs {
			p := Problem{Unit: unitName, Msg: e.Code + ": " + e.Message}
			if e.Location != nil {
				p.File, p.Line = e.Location.File, e.Location.Row
			}
			out = append(out, p)
		}
		return out
	}
	var one *ast.Error
	if errors.As(err, &one) {
		return problems(unitName, ast.Errors{one})
	}
	return []Problem{{Unit: unitName, Msg: err.Error()}}
}

// testsFailed summarizes failing results as an error, or nil.
func testsFailed(results []TestResult) error {
	var bad []string
	for _, r := range results {
		if !r.Pass {
			bad = append(bad, fmt.Sprintf("%s %s.%s: %s", r.Location, r.Package, r.Name, firstLine(r.Error)))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("policy: %d test(s) failed: %s", len(bad), strings.Join(bad, "; "))
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
