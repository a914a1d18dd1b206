package learn

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
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

// TestInputsOfConnect: a CONNECT record is the CONNECT's input, and a second
// one only when the gateway decided what it carried again (opaque bytes
// always, a ClientHello when marked carried_decided): learning a tunnelled
// TLS connection as kind tls only left its CONNECT refused.
func TestInputsOfConnect(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra string
		want  []policy.Kind
	}{
		{"tls with a name", `{"carries":"tls"}`, []policy.Kind{policy.KindConnect}},
		{"tls without a name", `{"carries":"tls","carried_decided":true}`, []policy.Kind{policy.KindConnect, policy.KindTLS}},
		{"opaque bytes", `{"carries":"tcp"}`, []policy.Kind{policy.KindConnect, policy.KindTCP}},
		{"http", `{"carries":"http"}`, []policy.Kind{policy.KindConnect}},
		{"nothing yet", `{}`, []policy.Kind{policy.KindConnect}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &audit.Record{Kind: audit.KindConnect, Decision: audit.DecisionAllow, Mode: "enforce", Host: "api.example.test", Port: 443}
			if err := json.Unmarshal([]byte(tc.extra), &r.Extra); err != nil {
				t.Fatal(err)
			}
			ins, skip := NewRebuilder().Inputs(r)
			if skip != "" {
				t.Fatalf("skipped: %s", skip)
			}
			var got []policy.Kind
			for _, in := range ins {
				got = append(got, in.Kind)
				if in.Destination.Host != r.Host || in.Destination.Port != r.Port {
					t.Errorf("input %+v: want destination %s:%d", in.Destination, r.Host, r.Port)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got kinds %v, want %v", got, tc.want)
			}
		})
	}
}
