package sibling

import (
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

// minFD is the descriptor floor the tests ask Open for.
const minFD = 10

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

// TestOpen: a sibling beside the executable is used only when it
// is an executable regular file nobody else may write, from the same build
// (the test binary copied stands in for both), and, from a tree with local
// changes (a test binary has no vcs stamp), no older than the executable.
func TestOpen(t *testing.T) {
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
			tt.make(t, filepath.Join(dir, "airlock-init"))
			f, _, err := Open(self, "airlock-init", minFD)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Open: got %v, want the file", err)
				}
				defer f.Close()
				if fd := int(f.Fd()); fd < minFD {
					t.Errorf("fd: got %d, want >= %d ", fd, minFD)
				}
				if got, want := Exe(f), "/proc/self/fd/"; !strings.HasPrefix(got, want) {
					t.Errorf("Exe: got %q, want prefix %q", got, want)
				}
				return
			}
			if err == nil {
				f.Close()
				t.Fatalf("Open: got the file, want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open: got %v, want an error containing %q", err, tt.want)
			}
			if tt.name == "missing" && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Open: got %v, want fs.ErrNotExist (no warning for a missing file)", err)
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
