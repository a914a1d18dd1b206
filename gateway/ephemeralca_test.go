package gateway

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestInitEphemeralCA: the run's CA (written without fsync) replaces what a
// kept run directory held, loads, signs, and keeps the key private.
func TestInitEphemeralCA(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, CAKeyFileName), []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, key, err := InitEphemeralCA(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(cert, key)
	if err != nil {
		t.Fatalf("LoadCA: %v", err)
	}
	if ca == nil {
		t.Fatal("LoadCA: nil CA")
	}
	fi, err := os.Stat(key)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fi.Mode().Perm(), os.FileMode(0o600); got != want {
		t.Errorf("key mode %v, want %v", got, want)
	}
}
