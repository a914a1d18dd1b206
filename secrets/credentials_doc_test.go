package secrets

import (
	"os"
	"strings"
	"testing"
)

// TestCredentialsDocExamples: every secrets-file example in
// docs/CREDENTIALS.md parses and builds an Injector.
func TestCredentialsDocExamples(t *testing.T) {
	raw, err := os.ReadFile("../docs/CREDENTIALS.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, block := range strings.Split(string(raw), "```yaml\n")[1:] {
		text, _, ok := strings.Cut(block, "```")
		if !ok {
			t.Fatal("unterminated yaml block")
		}
		n++
		cfg, err := Parse([]byte(text))
		if err != nil {
			t.Errorf("example %d: %v\n%s", n, err, text)
			continue
		}
		if _, err := New(cfg, testLogger(t)); err != nil {
			t.Errorf("example %d: New: %v", n, err)
		}
	}
	if n < 4 {
		t.Errorf("found %d yaml examples, want 4", n)
	}
}
