package policy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/util"
)

// blocks returns the fenced code blocks of a markdown file with the given tag.
func blocks(t *testing.T, path, tag string) []string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	parts := strings.Split(string(src), "```")
	for i := 1; i < len(parts); i += 2 {
		if body, ok := strings.CutPrefix(parts[i], tag+"\n"); ok {
			out = append(out, body)
		}
	}
	return out
}

// Every example in policies/README.md runs.
func TestReadmeExamples(t *testing.T) {
	readme := filepath.Join("..", "policies", "README.md")
	regos := blocks(t, readme, "rego")
	if len(regos) == 0 {
		t.Fatal("got no rego examples in the README")
	}
	for i, src := range regos {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"policy.rego": src})
		e := newEngine(t, Config{Dir: dir})
		if i == 0 {
			if d := e.Decide(context.Background(), kindIn(KindConnect, "api.openai.com")); !d.Allowed {
				t.Fatalf("five-line policy: got %+v, want api.openai.com allowed", d)
			}
			if d := e.Decide(context.Background(), kindIn(KindConnect, "api.openai.com.evil.example")); d.Allowed {
				t.Fatalf("five-line policy: got %+v, want a lookalike denied", d)
			}
		}
	}
	for _, src := range blocks(t, readme, "json") {
		var v any
		if err := util.UnmarshalJSON([]byte(src), &v); err != nil {
			t.Fatal(err)
		}
		rs := rego.ResultSet{{Expressions: []*rego.ExpressionValue{{Value: v}}}}
		if _, err := parseResult(rs); err != nil {
			t.Fatalf("README decision example: %v", err)
		}
	}
}
