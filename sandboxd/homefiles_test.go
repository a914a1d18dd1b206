package sandboxd

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCheckHomeFiles(t *testing.T) {
	tests := []struct {
		name  string
		files map[string][]byte
		want  string
	}{
		{"ok", map[string][]byte{".aws/credentials": []byte("x"), ".netrc": nil}, ""},
		{"absolute", map[string][]byte{"/etc/passwd": nil}, "clean relative path"},
		{"dotdot", map[string][]byte{"../x": nil}, "clean relative path"},
		{"unclean", map[string][]byte{"a//b": nil}, "clean relative path"},
		{"too big", map[string][]byte{"a": make([]byte, maxHomeFileBytes+1)}, "bytes, want at most"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkHomeFiles(tc.files)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// TestWriteHomeFiles: new files land 0600 with 0700 parents; a user's file,
// a symlinked parent and the workspace are left alone.
func TestWriteHomeFiles(t *testing.T) {
	home := t.TempDir()
	ws := filepath.Join(home, "work")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".netrc"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(home, ".config")); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{".aws/credentials": []byte("canary"), ".netrc": []byte("canary"), ".config/openai/api_key": []byte("canary"), "work/.env": []byte("canary")}
	if err := writeHomeFiles(home, ws, os.Getuid(), os.Getgid(), files); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(home, ".netrc")); string(b) != "mine" {
		t.Errorf(".netrc: got %q, want the user's", b)
	}
	if b, err := os.ReadFile(filepath.Join(home, ".aws/credentials")); err != nil || string(b) != "canary" {
		t.Errorf(".aws/credentials: got %q, %v", b, err)
	}
	if st, err := os.Stat(filepath.Join(home, ".aws")); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf(".aws: %v, %v; want 0700", st.Mode(), err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("wrote through the .config link: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(ws, ".env")); err == nil {
		t.Error("wrote into the workspace")
	}
}

func TestWithDefaults(t *testing.T) {
	got := withDefaults([]string{"PATH=/bin", "AWS_ACCESS_KEY_ID=real"}, []string{"AWS_ACCESS_KEY_ID=canary", "AWS_SECRET_ACCESS_KEY=canary"})
	want := []string{"PATH=/bin", "AWS_ACCESS_KEY_ID=real", "AWS_SECRET_ACCESS_KEY=canary"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestHomeFilesPlanted starts a real sandbox with home files and default
// env, one of them set by Env too: the files are there, the sandbox user's
// and 0600, and Env wins over DefaultEnv.
func TestHomeFilesPlanted(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{
		Env:        []string{"AWS_ACCESS_KEY_ID=platform"},
		DefaultEnv: []string{"AWS_ACCESS_KEY_ID=canary-id", "AWS_SECRET_ACCESS_KEY=canary-secret"},
		HomeFiles:  map[string][]byte{".aws/credentials": []byte("[default]\n"), ".netrc": []byte("machine x\n")},
	})
	var out strings.Builder
	res := mustExec(t, s, ExecSpec{Argv: sh(`cat ~/.aws/credentials ~/.netrc; stat -c '%a %U' ~/.aws ~/.aws/credentials; echo "$AWS_ACCESS_KEY_ID $AWS_SECRET_ACCESS_KEY"`), Stdout: &out})
	if res.ExitCode != 0 {
		t.Fatalf("exit %d, stdout %q", res.ExitCode, out.String())
	}
	want := "[default]\nmachine x\n700 sandbox\n600 sandbox\nplatform canary-secret\n"
	if got := out.String(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
