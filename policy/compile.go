package policy

import (
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// deniedBuiltins are never available to policies: a policy must not reach the
// network or read the gateway's environment (which may hold secrets).
var deniedBuiltins = map[string]bool{
	"http.send":          true,
	"net.lookup_ip_addr": true,
	"opa.runtime":        true,
}

// capabilities returns OPA's capabilities minus deniedBuiltins.
func capabilities() *ast.Capabilities {
	caps := ast.CapabilitiesForThisVersion()
	kept := caps.Builtins[:0]
	for _, b := range caps.Builtins {
		if !deniedBuiltins[b.Name] {
			kept = append(kept, b)
		}
	}
	caps.Builtins = kept
	return caps
}

// newCompiler returns a compiler with airlock's settings: Rego v1, strict mode,
// the input schema, restricted builtins.
func newCompiler(schema any, print bool) *ast.Compiler {
	ss := ast.NewSchemaSet()
	ss.Put(ast.SchemaRootRef, schema)
	return ast.NewCompiler().
		WithCapabilities(capabilities()).
		WithStrict(true).
		WithSchemas(ss).
		WithDefaultRegoVersion(ast.RegoV1).
		WithEnablePrintStatements(print)
}

// compileModules compiles mods; the returned error is ast.Errors with locations.
func compileModules(mods map[string]*ast.Module, schema any) (*ast.Compiler, error) {
	c := newCompiler(schema, false)
	c.Compile(mods)
	if c.Failed() {
		for _, e := range c.Errors {
			if e.Location != nil && strings.HasSuffix(e.Location.File, derivedSuffix) {
				e.Message += " (in the copy of this rule airlock derives to decide which connections it must intercept: name the host in a mitm rule, or write the rule so its conditions on the request stand apart)"
			}
		}
		return nil, c.Errors
	}
	return c, nil
}

// nondeterministic reports whether any module calls a builtin whose result is not
// a function of its arguments (time.now_ns, rand.intn, ...): decisions of such a
// policy are not cached.
func nondeterministic(c *ast.Compiler) bool {
	found := false
	check := func(op ast.Ref) {
		if b, ok := ast.BuiltinMap[op.String()]; ok && b.Nondeterministic {
			found = true
		}
	}
	for _, m := range c.Modules {
		ast.WalkExprs(m, func(x *ast.Expr) bool {
			if x.IsCall() {
				check(x.Operator())
			}
			return found
		})
		ast.WalkTerms(m, func(t *ast.Term) bool {
			if call, ok := t.Value.(ast.Call); ok && len(call) > 0 {
				if r, ok := call[0].Value.(ast.Ref); ok {
					check(r)
				}
			}
			return found
		})
	}
	return found
}
