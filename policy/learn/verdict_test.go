package learn

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOutsideReasonsListed: every Reason* constant of the gateway and the DNS
// filter is in outsideReasons, so a record they refused after policy allowed
// it never counts as a policy denial in replay (nor a new reason there as
// one that suggest could learn).
func TestOutsideReasonsListed(t *testing.T) {
	found := 0
	for _, pkg := range []string{"gateway", "dnsfilter"} {
		files, _ := filepath.Glob(filepath.Join("..", "..", pkg, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(af, func(n ast.Node) bool {
				vs, ok := n.(*ast.ValueSpec)
				if !ok || len(vs.Values) != 1 || !strings.HasPrefix(vs.Names[0].Name, "Reason") {
					return true
				}
				lit, ok := vs.Values[0].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				id, _ := strconv.Unquote(lit.Value)
				found++
				if !isOutside(id) && !allowNotes[id] {
					t.Errorf("%s: %s = %q is not in outsideReasons", f, vs.Names[0].Name, id)
				}
				return true
			})
		}
	}
	if found < 30 {
		t.Fatalf("found %d reason constants, want the gateway's and the DNS filter's", found)
	}
}
