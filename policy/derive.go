package policy

import (
	"fmt"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Rules derived from HTTP rules (see "HTTP rules take effect" in
// policies/README.md). A rule about an HTTP request (one that reads
// input.http, directly or through a rule or function it calls) only ever sees
// the requests of a connection the gateway intercepts: inside a tunnelled
// CONNECT or TLS connection there is no request to decide. So that such a
// rule can never silently do nothing, derive adds to the module that holds it
// a copy of the rule with every expression about the request removed; the
// library (policies/lib/airlock.rego) evaluates these copies for a CONNECT,
// TLS or DNS decision as if it were an HTTP request to the same destination
// from the same sandbox, and
//   - intercepts the connection when a deny rule about HTTP could apply to it,
//     or an allow rule about HTTP could and no rule allows every request
//     (_airlock_http_deny, _airlock_http_allow, _airlock_http_open);
//   - allows the CONNECT/TLS on 443 and 80 and the DNS question when an allow
//     rule about HTTP names the destination host (_airlock_http_allow_host):
//     a host allowed at HTTP level is reached and resolved without another
//     rule. An allow rule whose host cannot be told from its text (it reads no
//     input.destination host field or host helper) derives no tunnel: the
//     request is refused at CONNECT unless another rule allows it.
//
// A rule about HTTP whose meaning cannot be split that way (an else chain),
// and a mitm or passthrough rule that reads input.http (decided on the
// connection, before any request, so it never holds), are refused at load,
// naming the rule.
const (
	derivedDeny      = "_airlock_http_deny"
	derivedAllow     = "_airlock_http_allow"
	derivedAllowHost = "_airlock_http_allow_host"
	derivedOpen      = "_airlock_http_open"
	derivedPrefix    = "_airlock_"
)

// derivedPackages are the packages whose allow and deny rules are derived
// from: the user's. (The embedded default policy, airlock.defaults, states its
// own CONNECT, DNS and mitm rules and is tested when airlock is built.)
var derivedPackages = map[string]bool{"data.airlock.egress": true}

// ruleID names a rule by its package path and first head name.
func ruleID(m *ast.Module, r *ast.Rule) string {
	return m.Package.Path.String() + "." + string(r.Head.Ref()[0].Value.(ast.Var))
}

// refFacts is what a rule reads, directly or through rules it refers to.
type refFacts struct{ http, host bool }

// analyzer resolves references of parsed modules and computes refFacts per
// rule id.
type analyzer struct {
	mods  []*ast.Module
	names []string        // display names of mods, in the same order
	rules map[string]bool // ids of every rule
	facts map[string]refFacts
}

func newAnalyzer(mods map[string]*ast.Module) *analyzer {
	a := &analyzer{rules: map[string]bool{}, facts: map[string]refFacts{}}
	names := make([]string, 0, len(mods))
	for n := range mods {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		m := mods[n]
		a.mods = append(a.mods, m)
		a.names = append(a.names, n)
		for _, r := range m.Rules {
			a.rules[ruleID(m, r)] = true
		}
	}
	// Fixpoint: a rule reads what the rules it refers to read.
	for changed := true; changed; {
		changed = false
		for _, m := range a.mods {
			for _, r := range m.Rules {
				id := ruleID(m, r)
				f := a.facts[id]
				g := a.readRule(m, r)
				g.http, g.host = g.http || f.http, g.host || f.host
				if g != f {
					a.facts[id] = g
					changed = true
				}
			}
		}
	}
	return a
}

// resolve returns the absolute form of ref in m (input... or data...), or nil
// for a local variable's ref or a builtin.
func (a *analyzer) resolve(m *ast.Module, ref ast.Ref) ast.Ref {
	head, ok := ref[0].Value.(ast.Var)
	if !ok {
		return nil
	}
	switch head {
	case "input", "data":
		return ref
	}
	for _, imp := range m.Imports {
		if imp.Name() != head {
			continue
		}
		p, ok := imp.Path.Value.(ast.Ref)
		if !ok {
			return nil
		}
		return p.Concat(ref[1:])
	}
	if a.rules[m.Package.Path.String()+"."+string(head)] {
		return m.Package.Path.Append(ast.StringTerm(string(head))).Concat(ref[1:])
	}
	return nil
}

// readRef is what one absolute ref reads.
func (a *analyzer) readRef(ref ast.Ref) refFacts {
	var f refFacts
	if ref[0].Equal(ast.InputRootDocument) {
		if len(ref) < 2 {
			return refFacts{http: true, host: true}
		}
		k, ok := ref[1].Value.(ast.String)
		switch {
		case !ok:
			return refFacts{http: true, host: true}
		case k == "http":
			f.http = true
		case k == "destination":
			if len(ref) < 3 {
				f.host = true
			} else if s, ok := ref[2].Value.(ast.String); !ok || s == "host" || s == "keys" || s == "suffixes" {
				f.host = true
			}
		}
		return f
	}
	for i := len(ref); i >= 3; i-- {
		if g, ok := a.facts[ref[:i].String()]; ok {
			return g
		}
	}
	return f
}

// readRule reports what one definition of a rule reads: its body, else
// chain, arguments, key and value (not its own name).
func (a *analyzer) readRule(m *ast.Module, r *ast.Rule) refFacts {
	var f refFacts
	for ; r != nil; r = r.Else {
		parts := []any{r.Body}
		for _, t := range append(append([]*ast.Term{}, r.Head.Args...), r.Head.Key, r.Head.Value) {
			if t != nil {
				parts = append(parts, t)
			}
		}
		for _, p := range parts {
			g := a.read(m, p, nil)
			f.http, f.host = f.http || g.http, f.host || g.host
		}
	}
	return f
}

// read reports what x (a rule, body or expression of m) reads; tainted local
// variables (bound by an expression about HTTP) count as reading HTTP.
func (a *analyzer) read(m *ast.Module, x any, tainted ast.VarSet) refFacts {
	var f refFacts
	var vis *ast.GenericVisitor
	vis = ast.NewGenericVisitor(func(x any) bool {
		switch v := x.(type) {
		case ast.Ref:
			if abs := a.resolve(m, v); abs != nil {
				g := a.readRef(abs)
				f.http, f.host = f.http || g.http, f.host || g.host
			} else if h, ok := v[0].Value.(ast.Var); ok && tainted.Contains(h) {
				f.http = true
			}
			for _, t := range v[1:] {
				vis.Walk(t)
			}
			return true
		case ast.Var:
			if tainted.Contains(v) {
				f.http = true
			} else if abs := a.resolve(m, ast.Ref{ast.NewTerm(v)}); abs != nil {
				g := a.readRef(abs)
				f.http, f.host = f.http || g.http, f.host || g.host
			}
		}
		return false
	})
	vis.Walk(x)
	return f
}

// DeriveError is a rule about HTTP that cannot be made to take effect.
type DeriveError struct {
	Rule     string // package.name
	Location *ast.Location
	Msg      string
}

func (e *DeriveError) Error() string {
	loc := ""
	if e.Location != nil {
		loc = fmt.Sprintf("%s:%d: ", e.Location.File, e.Location.Row)
	}
	return fmt.Sprintf("%srule %s reads input.http: %s", loc, e.Rule, e.Msg)
}

// derive adds the derived rules to the non-test modules of mods (see the
// constants above) and reports whether it added any. Its error names every
// rule it cannot derive from.
func derive(mods map[string]*ast.Module, tests map[string]bool) (bool, error) {
	added := false
	a := newAnalyzer(mods)
	var errs []string
	for i, m := range a.mods {
		if tests[a.names[i]] {
			continue
		}
		pkg := m.Package.Path.String()
		var add []*ast.Rule
		for _, r := range m.Rules {
			name := string(r.Head.Ref()[0].Value.(ast.Var))
			if strings.HasPrefix(name, derivedPrefix) {
				errs = append(errs, fmt.Sprintf("%s:%d: rule name %s: names starting with %s are airlock's", r.Location.File, r.Location.Row, name, derivedPrefix))
				continue
			}
			if !derivedPackages[pkg] || r.Default || len(r.Head.Args) > 0 {
				continue
			}
			id := ruleID(m, r)
			if (name == "mitm" || name == "passthrough") && a.readRule(m, r).http {
				errs = append(errs, (&DeriveError{Rule: strings.TrimPrefix(id, "data."), Location: r.Location,
					Msg: name + " is decided for the CONNECT or TLS connection, before any request is seen, so this rule never holds; name the host instead"}).Error())
				continue
			}
			if name != "allow" && name != "deny" {
				continue
			}
			if !a.readRule(m, r).http {
				if name == "allow" && r.Else == nil {
					add = append(add, derivedRule(r, derivedOpen, r.Body.Copy(), false))
				}
				continue
			}
			if r.Else != nil {
				errs = append(errs, (&DeriveError{Rule: strings.TrimPrefix(id, "data."), Location: r.Location,
					Msg: "airlock cannot tell which connections an else chain applies to, so it cannot intercept them for it; write the branches as separate rules"}).Error())
				continue
			}
			if name == "allow" && !r.Head.Value.Equal(ast.BooleanTerm(true)) {
				errs = append(errs, (&DeriveError{Rule: strings.TrimPrefix(id, "data."), Location: r.Location,
					Msg: "an allow about HTTP must be true when its body holds (allow if { ... })"}).Error())
				continue
			}
			kept := a.keep(m, r.Body)
			if name == "deny" {
				add = append(add, derivedRule(r, derivedDeny, kept, true))
				continue
			}
			add = append(add, derivedRule(r, derivedAllow, kept, true))
			if a.read(m, kept, nil).host {
				add = append(add, derivedRule(r, derivedAllowHost, kept.Copy(), true))
			}
		}
		for _, d := range add {
			d.Module = m
			m.Rules = append(m.Rules, d)
			added = true
		}
	}
	if len(errs) > 0 {
		return false, fmt.Errorf("policy: %s", strings.Join(errs, "; "))
	}
	return added, nil
}

// keep returns the expressions of body that are not about the HTTP request:
// an expression is about it when it reads input.http (or a rule that does)
// or a variable first bound by such an expression. Plain `some x`
// declarations of variables nothing kept binds are dropped too.
func (a *analyzer) keep(m *ast.Module, body ast.Body) ast.Body {
	tainted := ast.NewVarSet()
	bound := ast.NewVarSet()
	var kept ast.Body
	for _, e := range body {
		vars := a.localVars(m, e)
		if a.read(m, e, tainted).http {
			for v := range vars {
				if !bound.Contains(v) {
					tainted.Add(v)
				}
			}
			continue
		}
		if d, ok := e.Terms.(*ast.SomeDecl); !ok || isSomeIn(d) {
			bound.Update(vars) // a plain `some x` declares x, binds nothing
		}
		kept = append(kept, e.Copy())
	}
	// A plain declaration whose variable is used by no other kept expression
	// (it was bound by a dropped one) would be an unused declaration.
	out := kept[:0]
	for i, e := range kept {
		if d, ok := e.Terms.(*ast.SomeDecl); ok && !isSomeIn(d) {
			used := false
			for j, o := range kept {
				if j != i && len(a.localVars(m, o).Intersect(declVars(d))) > 0 {
					used = true
				}
			}
			if !used {
				continue
			}
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return ast.NewBody(ast.NewExpr(ast.BooleanTerm(true)))
	}
	for i, e := range out {
		e.Index = i
	}
	return out
}

// isSomeIn reports whether d is `some x in xs` (or `some k, v in xs`).
func isSomeIn(d *ast.SomeDecl) bool {
	if len(d.Symbols) != 1 {
		return false
	}
	_, ok := d.Symbols[0].Value.(ast.Call)
	return ok
}

func declVars(d *ast.SomeDecl) ast.VarSet {
	out := ast.NewVarSet()
	for _, s := range d.Symbols {
		if v, ok := s.Value.(ast.Var); ok {
			out.Add(v)
		}
	}
	return out
}

// localVars returns the local variables an expression of m mentions (not
// inside a closure): not input, data, an import or a rule of m's package, and
// not a wildcard.
func (a *analyzer) localVars(m *ast.Module, e *ast.Expr) ast.VarSet {
	out := ast.NewVarSet()
	for v := range e.Vars(ast.VarVisitorParams{SkipClosures: true}) {
		if v.IsWildcard() || v.IsGenerated() || a.resolve(m, ast.Ref{ast.VarTerm(string(v))}) != nil {
			continue
		}
		out.Add(v)
	}
	return out
}

// derivedRule returns a rule named name with body. A set rule's element is
// the array of the body's declared and assigned variables, so none is unused.
func derivedRule(from *ast.Rule, name string, body ast.Body, set bool) *ast.Rule {
	h := ast.NewHead(ast.Var(name))
	h.Reference[0].Location = derivedLoc(from.Location)
	h.Location = derivedLoc(from.Location)
	if set {
		var elems []*ast.Term
		vs := ast.NewVarSet()
		for _, e := range body {
			switch t := e.Terms.(type) {
			case *ast.SomeDecl:
				if isSomeIn(t) {
					call := t.Symbols[0].Value.(ast.Call)
					for _, arg := range call[1 : len(call)-1] {
						ast.WalkVars(arg, func(v ast.Var) bool { vs.Add(v); return false })
					}
				} else {
					vs.Update(declVars(t))
				}
			default:
				if e.IsAssignment() {
					ast.WalkVars(e.Operand(0), func(v ast.Var) bool { vs.Add(v); return false })
				}
			}
		}
		names := vs.Sorted()
		for _, v := range names {
			if !v.IsWildcard() && !v.IsGenerated() {
				elems = append(elems, ast.VarTerm(string(v)))
			}
		}
		h.Key = ast.ArrayTerm(elems...)
	} else {
		h.Value = ast.BooleanTerm(true)
	}
	relocate(body)
	return &ast.Rule{Head: h, Body: body, Location: derivedLoc(from.Location)}
}

// derivedSuffix marks the file of a derived rule's locations: an error in one
// names the rule it was derived from, and coverage (which counts the
// policy's own files) does not count the copies.
const derivedSuffix = " (derived)"

func derivedLoc(l *ast.Location) *ast.Location {
	if l == nil {
		return nil
	}
	c := *l
	c.File += derivedSuffix
	return &c
}

// relocate gives every expression and term of body a derived location.
func relocate(body ast.Body) {
	ast.NewGenericVisitor(func(x any) bool {
		switch v := x.(type) {
		case *ast.Expr:
			v.Location = derivedLoc(v.Location)
		case *ast.Term:
			v.Location = derivedLoc(v.Location)
		}
		return false
	}).Walk(body)
}

// withoutDerived returns m without its derived rules (for coverage, which
// counts the lines of the policy's own rules).
func withoutDerived(m *ast.Module) *ast.Module {
	n := 0
	for _, r := range m.Rules {
		if strings.HasPrefix(string(r.Head.Ref()[0].Value.(ast.Var)), derivedPrefix) {
			n++
		}
	}
	if n == 0 {
		return m
	}
	c := *m
	c.Rules = make([]*ast.Rule, 0, len(m.Rules)-n)
	for _, r := range m.Rules {
		if !strings.HasPrefix(string(r.Head.Ref()[0].Value.(ast.Var)), derivedPrefix) {
			c.Rules = append(c.Rules, r)
		}
	}
	return &c
}
