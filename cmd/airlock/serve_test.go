package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestListenUnix(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	path := filepath.Join(dir, "airlock.sock")

	ln, err := listenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o600 {
		t.Fatalf("socket mode %o, want 600", got)
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Fatalf("socket directory mode %o, want 700", st.Mode().Perm())
	}
	// A live socket is never taken over.
	if _, err := listenUnix(path); err == nil || !strings.Contains(err.Error(), "another airlock") {
		t.Fatalf("second listen on a live socket: %v, want a refusal", err)
	}
	// A stale one (its server gone) is replaced.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	ln2, err := listenUnix(path)
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	ln2.Close()
}
