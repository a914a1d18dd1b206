package layout

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// mapFile is the map of the code a newcomer reads first.
var mapFile = filepath.Join("..", "..", "docs", "ARCHITECTURE.md")

var (
	// A table row of the map's "Packages and floors": | floor | `pkg` | ...
	floorRow = regexp.MustCompile("(?m)^\\| ([0-9]+) \\| `([a-z0-9/-]+)` \\|")
	// A function the walks name: `pkg:Func`, `pkg:(*Type).Method`, `pkg:Type.Method`.
	funcRef = regexp.MustCompile("`([a-z0-9/]+):(?:\\(\\*?([A-Za-z0-9_]+)\\)\\.|([A-Za-z0-9_]+)\\.)?([A-Za-z0-9_]+)`")
)

// mapped reports whether a package belongs in the map's table: not test
// support, tests or benchmarks.
func mapped(rel string) bool {
	return !strings.HasPrefix(rel, "test/") && rel != "bench" && !strings.HasPrefix(rel, "bench/") &&
		!strings.HasSuffix(rel, "test")
}

// TestMap keeps docs/ARCHITECTURE.md true where a test can: every package
// is in its table with a floor above the floors of everything it imports,
// and every function its walks name exists in the package named.
func TestMap(t *testing.T) {
	b, err := os.ReadFile(mapFile)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	if n := strings.Count(doc, "\n"); n > 320 {
		t.Errorf("the map is %d lines; it is read in ten minutes (about 300): move detail to the package's DESIGN.md", n)
	}
	m := loadModule(t)
	floor := map[string]int{}
	for _, row := range floorRow.FindAllStringSubmatch(doc, -1) {
		f, _ := strconv.Atoi(row[1])
		floor[row[2]] = f
		if _, ok := m.pkgs[row[2]]; !ok {
			t.Errorf("the map lists package %s, which does not exist", row[2])
		}
	}
	for rel := range m.pkgs {
		if !mapped(rel) {
			continue
		}
		f, ok := floor[rel]
		if !ok {
			t.Errorf("package %s is not in the map's table (docs/ARCHITECTURE.md, \"Packages and floors\")", rel)
			continue
		}
		for _, dep := range m.deps[rel] {
			if df, ok := floor[dep]; ok && df >= f {
				t.Errorf("the map puts %s on floor %d, but it imports %s on floor %d", rel, f, dep, df)
			}
		}
	}
	funcs := map[string]map[string]bool{} // package -> "Func" or "Type.Method"
	for _, ref := range funcRef.FindAllStringSubmatch(doc, -1) {
		pkg, recv, name := ref[1], ref[2]+ref[3], ref[4]
		p, ok := m.pkgs[pkg]
		if !ok {
			t.Errorf("the map names %s in package %s, which does not exist", ref[0], pkg)
			continue
		}
		if funcs[pkg] == nil {
			if funcs[pkg], err = declared(p.Dir); err != nil {
				t.Fatal(err)
			}
		}
		key := name
		if recv != "" {
			key = recv + "." + name
		}
		if !funcs[pkg][key] {
			t.Errorf("the map names %s, but package %s declares no %s", ref[0], pkg, key)
		}
	}
}

// declared returns the functions ("F") and methods ("T.M") of the non-test
// Go files in dir.
func declared(dir string) (map[string]bool, error) {
	out := map[string]bool{}
	fset := token.NewFileSet()
	matches, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, name := range matches {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", name, err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			if fd.Recv == nil || len(fd.Recv.List) == 0 {
				out[fd.Name.Name] = true
				continue
			}
			typ := fd.Recv.List[0].Type
			if s, ok := typ.(*ast.StarExpr); ok {
				typ = s.X
			}
			if ix, ok := typ.(*ast.IndexExpr); ok {
				typ = ix.X
			}
			if id, ok := typ.(*ast.Ident); ok {
				out[id.Name+"."+fd.Name.Name] = true
			}
		}
	}
	return out, nil
}
