//go:build !airlock_front

package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestServeUserRefusesRoot: root's daemon is the system one; --user is
// refused before anything is built or written.
func TestServeUserRefusesRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("checks root's refusal")
	}
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	root := newRootCmd()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	if code := execute(root, []string{"serve", "--user"}); code != 2 {
		t.Fatalf("got exit %d, want 2\n%s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "other than root") {
		t.Fatalf("stderr %q: want it to say --user is for another user", errb.String())
	}
	if entries, _ := os.ReadDir(state); len(entries) != 0 {
		t.Fatalf("the refused serve wrote %v", entries)
	}
}
