package readme

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeGoClient follows the README's Go client instructions in a new
// module outside this one: its go commands (the replace pointed at this
// checkout), then builds its Go example.
func TestReadmeGoClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module")
	}
	var cmds, program string
	for _, b := range readmeBlocks(t) {
		switch {
		case b.lang == "sh" && strings.Contains(b.text, "-replace github.com/airlock-dev/airlock="):
			cmds = b.text
		case b.lang == "go" && strings.Contains(b.text, "airlock-dev/airlock/client"):
			program = b.text
		}
	}
	if cmds == "" || program == "" {
		t.Fatal("the README and docs lost the Go client's go mod commands or its example")
	}
	checkout, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mod := filepath.Join(dir, "agent")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir, cmd.Env = mod, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("go", "mod", "init", "example.com/agent")
	for _, line := range commandLines(cmds) {
		line, _, _ = strings.Cut(line, "#")
		line = strings.ReplaceAll(line, "=../airlock", "="+checkout)
		run("bash", "-c", line)
	}
	run("go", "build", "-o", filepath.Join(dir, "agent-bin"), ".")
}
