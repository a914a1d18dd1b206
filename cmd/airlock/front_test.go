package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// findPath is the command at path (words below the root) in root's tree.
func findPath(root *cobra.Command, path string) *cobra.Command {
	cur := root
	for _, name := range strings.Fields(path) {
		i := slices.IndexFunc(cur.Commands(), func(c *cobra.Command) bool { return c.Name() == name })
		if i < 0 {
			return nil
		}
		cur = cur.Commands()[i]
	}
	return cur
}

// TestCoreCommands: every row of coreCommands is a command of the full tree
// with the same one-line help and visibility (the front's help lists the
// rows), and front.go builds a stand-in for each row and for no other path.
func TestCoreCommands(t *testing.T) {
	root := newRootCmd()
	var rows []string
	for _, c := range coreCommands {
		rows = append(rows, c.path)
		cmd := findPath(root, c.path)
		if cmd == nil {
			t.Errorf("%s: no such command in the full tree", c.path)
			continue
		}
		if cmd.Short != c.short || cmd.Hidden != c.hidden {
			t.Errorf("%s: row says Short %q hidden %v; the command says %q, %v", c.path, c.short, c.hidden, cmd.Short, cmd.Hidden)
		}
	}
	f, err := parser.ParseFile(token.NewFileSet(), "front.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var stubs []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		if id, ok := call.Fun.(*ast.Ident); ok && id.Name == "coreStub" && len(call.Args) == 1 {
			if lit, ok := call.Args[0].(*ast.BasicLit); ok {
				s, _ := strconv.Unquote(lit.Value)
				stubs = append(stubs, s)
			}
		}
		return true
	})
	slices.Sort(rows)
	slices.Sort(stubs)
	if !slices.Equal(rows, stubs) {
		t.Errorf("front.go's coreStub calls: got %q, want one per row %q", stubs, rows)
	}
}

// frontForbidden are the packages the front must not link: the gateway, the
// daemon, OPA, goproxy and the exporters, and the airlock packages that
// bring them.
var frontForbidden = []string{
	"github.com/airlock-dev/airlock/gateway",
	"github.com/airlock-dev/airlock/daemon",
	"github.com/airlock-dev/airlock/policy",
	"github.com/airlock-dev/airlock/netns",
	"github.com/airlock-dev/airlock/audit/export",
	"github.com/open-policy-agent/",
	"github.com/elazarl/goproxy",
	"github.com/prometheus/",
	"go.opentelemetry.io/",
	"oras.land/",
	"google.golang.org/grpc",
}

// TestFrontDeps: the front (-tags airlock_front) builds, and links none of
// frontForbidden. A light command whose file starts importing one of them
// fails here: tag the file //go:build !airlock_front and add a row to
// coreCommands (core.go).
func TestFrontDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", frontTag, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	for _, d := range deps {
		for _, bad := range frontForbidden {
			if d == bad || strings.HasPrefix(d, strings.TrimSuffix(bad, "/")+"/") {
				t.Errorf("the front links %s", d)
			}
		}
	}
	if out, err := exec.Command("go", "build", "-tags", frontTag, "-o", os.DevNull, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags %s: %v\n%s", frontTag, err, out)
	}
}

// buildPair writes the front and then the core (no older than the front, as
// make build writes them) into a new directory and returns the front's path.
func buildPair(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	front := filepath.Join(dir, "airlock")
	for _, b := range []struct{ out, tags string }{{front, frontTag}, {filepath.Join(dir, coreBinary), ""}} {
		cmd := exec.Command("go", "build", "-tags", b.tags, "-o", b.out, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build -tags %q: %v\n%s", b.tags, err, out)
		}
	}
	return front
}

// result is one run of a built binary.
type result struct {
	stdout, stderr string
	code           int
}

func runBin(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %q: %v", bin, args, err)
	}
	return result{stdout.String(), stderr.String(), code}
}

// frontInitBound bounds the package initializers `airlock version` runs
// through the front (99 when written; the whole tree runs about 290).
const frontInitBound = 130

// TestFrontHandsToCore: the front answers like the full binary (help, a
// core command's output and exit status, completion), runs a fraction of its
// package initializers, and refuses a core that is missing, not a Go binary
// of the same build (which must not run), or a front itself, naming the
// file.
func TestFrontHandsToCore(t *testing.T) {
	front := buildPair(t)
	dir := filepath.Dir(front)
	core := filepath.Join(dir, coreBinary)
	policyDir := filepath.Join(t.TempDir(), "missing")
	same := [][]string{
		{"--help"},
		{"audit", "--help"},
		{"policy", "--help"},
		{"help", "policy", "explain"},
		{"audit", "export", "--help"},
		{"run", "--help"},
		{"policy", "check", policyDir},
		{"serve", "--no-such-flag"},
		{"__complete", "policy", ""},
		{"no-such-command"},
	}
	for _, args := range same {
		got, want := runBin(t, front, nil, args...), runBin(t, core, nil, args...)
		if got != want {
			t.Errorf("airlock %q: front gave %+v, core %+v", args, got, want)
		}
	}
	inits := func(bin string) int {
		r := runBin(t, bin, []string{"GODEBUG=inittrace=1"}, "version")
		return strings.Count(r.stderr, "\ninit ") + 1
	}
	if n, whole := inits(front), inits(core); n > frontInitBound || whole <= frontInitBound {
		t.Errorf("airlock version: the front ran %d package initializers, the core %d; want at most %d and more", n, whole, frontInitBound)
	}

	marker := filepath.Join(t.TempDir(), "ran")
	tests := []struct {
		name string
		make func(t *testing.T)
		want string
	}{
		{"missing", func(t *testing.T) {}, core + ": no such file or directory (this command runs in airlock-core"},
		{"not a Go binary", func(t *testing.T) {
			if err := os.WriteFile(core, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, core + ": read its build information"},
		{"group writable", func(t *testing.T) {
			copyFile(t, front, core, 0o775)
		}, core + ": writable by group or others"},
		{"a front", func(t *testing.T) {
			copyFile(t, front, core, 0o755)
		}, core + ": built as the front (-tags airlock_front), not the core"},
	}
	if err := os.Rename(core, core+".real"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os.Remove(core)
			tt.make(t)
			r := runBin(t, front, nil, "policy", "check", policyDir)
			if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("got exit %d, stderr %q; want 2 and %q", r.code, r.stderr, tt.want)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("the refused core ran")
			}
			if r := runBin(t, front, nil, "version"); r.code != 0 {
				t.Errorf("version without a usable core: got exit %d (%s), want 0", r.code, r.stderr)
			}
		})
	}
}

// copyFile copies src to dst with mode (past the umask).
func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dst, mode); err != nil {
		t.Fatal(err)
	}
}
