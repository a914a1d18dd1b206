package readme

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/test/roottest"
)

// daemonSection is the heading (in docs/DAEMON.md, or wherever the
// documents put it) whose first two sh blocks TestRootReadmeDaemon runs: the
// setup and the requests.
const daemonSection = "## Starting the daemon"

// daemonBlocks returns the documents' daemon setup and request blocks.
func daemonBlocks(t *testing.T) (setup, requests block) {
	t.Helper()
	for _, name := range docFiles(t) {
		data, err := os.ReadFile(filepath.Join("../..", name))
		if err != nil {
			t.Fatal(err)
		}
		at := bytes.Index(data, []byte("\n"+daemonSection+"\n"))
		if at < 0 {
			continue
		}
		start := bytes.Count(data[:at], []byte("\n")) + 2 // the heading's line number
		var found []block
		for _, b := range fileBlocks(t, name) {
			if b.line > start && b.lang == "sh" && len(found) < 2 {
				found = append(found, b)
			}
		}
		if len(found) < 2 {
			t.Fatalf("%s %q: want a setup and a requests sh block", name, daemonSection)
		}
		return found[0], found[1]
	}
	t.Fatalf("no document of %v has a %q section", docFiles(t), daemonSection)
	return block{}, block{}
}

// isDaemonBlock: TestRootReadmeDaemon runs this block; the examples test
// leaves its lines alone.
func isDaemonBlock(t *testing.T, b block) bool {
	setup, requests := daemonBlocks(t)
	return b.file == setup.file && (b.line == setup.line || b.line == requests.line)
}

// TestRootReadmeDaemon runs the documents' daemon section as written, as root,
// with its paths moved under a temporary directory (/etc/airlock,
// /run/airlock and /var/log/airlock), its group and namespace names made
// unique, and `sudo` running the command as is. `usermod` is the one line not
// run (it would change a real user's groups); it is checked to parse. Each
// curl must succeed (--fail-with-body is added), serve runs in the
// background with a --run-dir under the temporary directory.
func TestRootReadmeDaemon(t *testing.T) {
	roottest.Require(t)
	bin := os.Getenv("AIRLOCK_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "airlock")
		if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/airlock").CombinedOutput(); err != nil {
			t.Fatalf("build: %v\n%s", err, out)
		}
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "alk-rdm-") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// As /run is: the group's members must be able to reach the socket.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("alkrd%d", os.Getpid()%100000)
	subst := strings.NewReplacer(
		"/etc/airlock", dir+"/etc",
		"/run/airlock", dir+"/run",
		"/var/log/airlock", dir+"/log",
		"web-1", tag+"-ns",
		"--system airlock", "--system "+tag,
		"-aG airlock", "-aG "+tag,
		"group: airlock", "group: "+tag,
	)
	t.Cleanup(func() {
		exec.Command("groupdel", tag).Run()
		exec.Command("ip", "netns", "delete", tag+"-ns").Run()
	})
	// bin's directory first on PATH, so "airlock" is this tree's binary.
	binDir := filepath.Join(dir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(binDir, "airlock")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+binDir+":/usr/sbin:/usr/bin:/sbin:/bin")
	sh := func(line string) (string, error) {
		cmd := exec.Command("bash", "-c", "set -o pipefail; sudo() { \"$@\"; }\n"+line)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	setup, requests := daemonBlocks(t)
	var serveLine string
	for _, line := range commandLines(setup.text) {
		line = subst.Replace(line)
		switch {
		case strings.Contains(line, "usermod "):
			if out, err := exec.Command("bash", "-n", "-c", line).CombinedOutput(); err != nil {
				t.Errorf("README %q does not parse: %v\n%s", line, err, out)
			}
		case strings.Contains(line, "airlock serve"):
			serveLine = line
		default:
			out, err := sh(line)
			if err != nil {
				t.Fatalf("README %q: %v\n%s", line, err, out)
			}
			if strings.Contains(line, "config example") {
				editConfig(t, filepath.Join(dir, "etc", "airlock.yaml"), subst)
			}
		}
	}
	if serveLine == "" {
		t.Fatal("the README's daemon setup has no airlock serve line")
	}
	serveInBackground(t, serveLine+" --run-dir "+dir+"/run/serve", env, filepath.Join(dir, "run", "airlock.sock"))
	var outputs []string
	for _, line := range commandLines(requests.text) {
		line = subst.Replace(line)
		line = strings.Replace(line, "curl ", "curl -sS --fail-with-body ", 1)
		out, err := sh(line)
		if err != nil {
			t.Fatalf("README %q: %v\n%s", line, err, out)
		}
		outputs = append(outputs, out)
	}
	all := strings.Join(outputs, "\n")
	for _, want := range []string{`"exit_status":0`, "sandbox\\n"} {
		if !strings.Contains(all, want) {
			t.Errorf("the README's requests: output lacks %q:\n%s", want, all)
		}
	}
	if _, err := os.Stat("/var/run/netns/" + tag + "-ns"); !os.IsNotExist(err) {
		t.Errorf("the README's last line should delete the namespace: stat: %v", err)
	}
}

// commandLines splits a sh block into commands, joining continued lines
// and dropping comments.
func commandLines(text string) []string {
	var out []string
	var cur string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasSuffix(line, "\\") {
			cur += strings.TrimSuffix(line, "\\")
			continue
		}
		cur += line
		if strings.TrimSpace(cur) != "" {
			out = append(out, cur)
		}
		cur = ""
	}
	return out
}

// editConfig is the reader's edit of the example file: the README's paths
// moved (subst), the metrics listener on a free port (other tests' daemons
// run beside this one) and a pool of one.
func editConfig(t *testing.T, path string, subst *strings.Replacer) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the README's config example line wrote no %s: %v", path, err)
	}
	text := subst.Replace(string(data))
	text = regexp.MustCompile(`(?m)^  listen: .*$`).ReplaceAllString(text, "  listen: 127.0.0.1:0")
	text = regexp.MustCompile(`(?m)^  pool_size: .*$`).ReplaceAllString(text, "  pool_size: 1")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// serveInBackground starts the README's serve line until the test ends and
// returns once the daemon answers on sock.
func serveInBackground(t *testing.T, line string, env []string, sock string) {
	t.Helper()
	serve := exec.Command("bash", "-c", "sudo() { \"$@\"; }\nexec "+strings.TrimPrefix(line, "sudo "))
	serve.Env = env
	runServe(t, serve, sock)
}
