package sandboxd

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"
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

// TestOpenInit: the init binary beside the executable is used only when it
// is an executable regular file nobody else may write, from the same build
// (the test binary copied stands in for both), and, from a tree with local
// changes (a test binary has no vcs stamp), no older than the executable.
func TestOpenInit(t *testing.T) {
	old := time.Now().Add(-time.Hour)
	tests := []struct {
		name string
		make func(t *testing.T, path string)
		want string // "" accepted; fs.ErrNotExist's text for a missing file
	}{
		{"missing", func(*testing.T, string) {}, "no such file"},
		{"same build", func(t *testing.T, p string) { copyExe(t, p, 0o755) }, ""},
		{"not executable", func(t *testing.T, p string) { copyExe(t, p, 0o644) }, "not an executable regular file"},
		{"group writable", func(t *testing.T, p string) { copyExe(t, p, 0o775) }, "writable by group or others"},
		{"a directory", func(t *testing.T, p string) {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}, "not an executable regular file"},
		{"not a Go binary", func(t *testing.T, p string) {
			if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, "build information"},
		{"older than the executable", func(t *testing.T, p string) {
			copyExe(t, p, 0o755)
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}, "older than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			self := filepath.Join(dir, "airlock")
			if err := os.WriteFile(self, []byte("stand-in"), 0o755); err != nil {
				t.Fatal(err)
			}
			tt.make(t, filepath.Join(dir, InitBinary))
			f, err := openInit(self)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("openInit: got %v, want the file", err)
				}
				defer f.Close()
				if fd := int(f.Fd()); fd < initFDMin {
					t.Errorf("fd: got %d, want >= %d (init's fds 0-4 are replaced)", fd, initFDMin)
				}
				if got, want := FDExe(f), "/proc/self/fd/"; !strings.HasPrefix(got, want) {
					t.Errorf("FDExe: got %q, want prefix %q", got, want)
				}
				return
			}
			if err == nil {
				f.Close()
				t.Fatalf("openInit: got the file, want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("openInit: got %v, want an error containing %q", err, tt.want)
			}
			if tt.name == "missing" && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("openInit: got %v, want fs.ErrNotExist (no warning for a missing file)", err)
			}
		})
	}
}

func TestSameBuild(t *testing.T) {
	bi := func(goVersion, version string, settings ...string) *debug.BuildInfo {
		b := &debug.BuildInfo{GoVersion: goVersion, Main: debug.Module{Version: version}}
		for i := 0; i+1 < len(settings); i += 2 {
			b.Settings = append(b.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return b
	}
	ours := bi("go1.26.8", "(devel)", "vcs.revision", "abc", "vcs.time", "t", "vcs.modified", "false")
	tests := []struct {
		name   string
		theirs *debug.BuildInfo
		want   string
	}{
		{"same", bi("go1.26.8", "(devel)", "vcs.revision", "abc", "vcs.time", "t", "vcs.modified", "false", "-ldflags", "x"), ""},
		{"other go", bi("go1.26.7", "(devel)", "vcs.revision", "abc", "vcs.time", "t", "vcs.modified", "false"), "built with go1.26.7"},
		{"other version", bi("go1.26.8", "v0.1.0", "vcs.revision", "abc", "vcs.time", "t", "vcs.modified", "false"), "module version"},
		{"other revision", bi("go1.26.8", "(devel)", "vcs.revision", "def", "vcs.time", "t", "vcs.modified", "false"), "vcs.revision"},
		{"modified", bi("go1.26.8", "(devel)", "vcs.revision", "abc", "vcs.time", "t", "vcs.modified", "true"), "vcs.modified"},
		{"no vcs", bi("go1.26.8", "(devel)"), "vcs.revision"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := sameBuild(ours, tt.theirs)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("got %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
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
	e, _ := newTestExecutor(t, func(c *Config) { c.Exe = FDExe(f) })
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
