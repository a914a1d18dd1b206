package sandboxd

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyExe copies this test binary to path with mode.
func copyExe(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// TestRootRunFromInitBinary: a sandbox whose init is an init binary opened
// once (a copy of this test binary, as cmd/airlock-init would be) runs its
// command and its files stage, and init runs from the open file.
func TestRootRunFromInitBinary(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self := filepath.Join(dir, "airlock")
	if err := os.WriteFile(self, []byte("stand-in"), 0o755); err != nil {
		t.Fatal(err)
	}
	copyExe(t, filepath.Join(dir, InitBinary), 0o755)
	f, err := openInit(self)
	if err != nil {
		t.Fatalf("openInit: %v", err)
	}
	defer f.Close()
	e, _ := newTestExecutor(t, func(c *Config) { c.Exe = fdExe(f) })
	res := mustRun(t, e, Spec{Argv: sh(`tr '\0' ' ' </proc/1/cmdline; exit 3`)})
	if res.ExitCode != 3 {
		t.Fatalf("exit: got %d, want 3 (stderr %q)", res.ExitCode, res.Stderr)
	}
	if got := string(res.Stdout); !strings.HasPrefix(got, "/proc/self/fd/") {
		t.Errorf("init's command line: got %q, want it started from the open file", got)
	}
	// The files stage init starts is the same binary re-executed.
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{})
	if _, err := s.PutFiles(t.Context(), DefaultHome, tarOf(t, []*tar.Header{file("f")}, map[string]string{"f": "through the files stage"})); err != nil {
		t.Fatalf("PutFiles: %v", err)
	}
	var out bytes.Buffer
	if err := s.GetFiles(t.Context(), DefaultHome+"/f", &out); err != nil {
		t.Fatalf("GetFiles: %v", err)
	}
	if g := readTar(t, &out); g["f"].body != "through the files stage" {
		t.Errorf("round trip: got %+v", g)
	}
	if got := string(mustExec(t, s, ExecSpec{Argv: []string{"cat", "/proc/1/comm"}}).Stdout); got != InitBinary+"\n" {
		t.Errorf("init's name: got %q, want %q", got, InitBinary+"\n")
	}
}
