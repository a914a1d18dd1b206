package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/config"
)

// runRoot runs `airlock ARGS...` through the whole command tree and returns
// stdout, stderr and the exit code.
func runRoot(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	root := newRootCmd()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	code := execute(root, args)
	return out.String(), errb.String(), code
}

func TestConfigExampleAndCheck(t *testing.T) {
	out, stderr, code := runRoot(t, "config", "example")
	if code != 0 || out != string(config.Example()) {
		t.Fatalf("config example: code %d, stderr %q; got %d bytes, want the example's %d", code, stderr, len(out), len(config.Example()))
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(good, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, stderr, code := runRoot(t, "config", "check", good); code != 0 || !strings.HasSuffix(out, ": ok\n") {
		t.Errorf("config check of the example: code %d, out %q, stderr %q; want 0 and ok", code, out, stderr)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("limits: {memroy: 1G}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = runRoot(t, "config", "check", bad)
	if code != 1 || !strings.Contains(stderr, "memroy") {
		t.Errorf("config check of a misspelled key: code %d, stderr %q; want 1 naming memroy", code, stderr)
	}
}
