package main

import (
	"os"
	"path/filepath"
	"testing"
)

// docsText is the README and the documents under docs/ (but the
// architecture map, which shows code rather than instructions) as one text:
// the examples these tests run for real live in whichever of them explains
// the command (test/readme checks the same files).
func docsText(t *testing.T) string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var text []byte
	for _, name := range append([]string{filepath.Join("..", "..", "README.md")}, docs...) {
		if filepath.Base(name) == "ARCHITECTURE.md" {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		text = append(append(text, b...), '\n')
	}
	return string(text)
}
