package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/fakenet"
)

// world is the fake internet every test of the package shares. Tests do not run
// in parallel, so counter deltas taken around one `airlock run` belong to it.
type world struct {
	bin    string // the airlock binary
	net    *fakenet.Net
	caFile string // the fake internet's CA (upstream.ca_file)
	gitDir string // the served git repositories

	pypi       *fakenet.Host // pypi.org, files.pythonhosted.org
	npm        *fakenet.Host // registry.npmjs.org
	goprox     *fakenet.Host // proxy.golang.org, sum.golang.org
	github     *fakenet.Host // github.com, codeload.github.com
	crates     *fakenet.Host // index.crates.io, static.crates.io
	debian     *fakenet.Host // deb.debian.org
	evil       *fakenet.Host // evil.example, exfil.example
	api        *fakenet.Host // api.example.test: echoes Authorization
	other      *fakenet.Host // other.example.test: a second allowed host
	gitAuth    *fakenet.Host // git.example.test: git over HTTPS for Basic x-access-token:gitToken only
	gitAuthDir string        // its repositories
	gitToken   string        // the real token it requires (random per run)
	npmAuth    *fakenet.Host // npm.example.test: a registry for Bearer npmToken only
	npmToken   string        // the real token it requires (random per run)
}

// w is set by TestMain when running as root; nil otherwise (tests then skip
// through roottest.Require before touching it).
var w *world

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "airlock-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	wd, err := setup(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: setup:", err)
		if wd != nil && wd.net != nil {
			wd.net.Close()
		}
		os.RemoveAll(dir)
		os.Exit(1)
	}
	w = wd
	code := m.Run()
	w.net.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

func setup(dir string) (*world, error) {
	wd := &world{bin: os.Getenv("AIRLOCK_BIN")}
	if wd.bin == "" {
		wd.bin = filepath.Join(dir, "airlock")
		if err := buildAirlock(wd.bin); err != nil {
			return nil, err
		}
	}
	fakenet.CleanStale()
	n, err := fakenet.New()
	if err != nil {
		return nil, err
	}
	wd.net = n
	wd.caFile = filepath.Join(dir, "fakenet-ca.pem")
	if err := n.WriteCA(wd.caFile); err != nil {
		return wd, err
	}
	wd.gitDir = filepath.Join(dir, "git")
	if err := makeGitRepo(wd.gitDir); err != nil {
		return wd, err
	}
	wd.gitAuthDir = filepath.Join(dir, "gitauth")
	if err := makeGitRepo(wd.gitAuthDir); err != nil {
		return wd, err
	}
	if wd.gitToken, err = randomToken("alk-git-real-"); err != nil {
		return wd, err
	}
	pypi, err := pypiHandler()
	if err != nil {
		return wd, err
	}
	npm, err := npmHandler("https://registry.npmjs.org")
	if err != nil {
		return wd, err
	}
	npmPrivate, err := npmHandler("https://npm.example.test")
	if err != nil {
		return wd, err
	}
	if wd.npmToken, err = randomToken("alk-npm-real-"); err != nil {
		return wd, err
	}
	goprox, err := goProxyHandler()
	if err != nil {
		return wd, err
	}
	crates, err := cratesHandler()
	if err != nil {
		return wd, err
	}
	debian, err := debianHandler(dir)
	if err != nil {
		return wd, err
	}
	for _, h := range []struct {
		dst     **fakenet.Host
		names   []string
		handler http.Handler
	}{
		{&wd.pypi, []string{"pypi.org", "files.pythonhosted.org"}, pypi},
		{&wd.npm, []string{"registry.npmjs.org"}, npm},
		{&wd.goprox, []string{"proxy.golang.org", "sum.golang.org"}, goprox},
		{&wd.github, []string{"github.com", "codeload.github.com"}, gitHandler(wd.gitDir)},
		{&wd.crates, []string{"index.crates.io", "static.crates.io"}, crates},
		{&wd.debian, []string{"deb.debian.org"}, debian},
		{&wd.evil, []string{"evil.example", "exfil.example"}, countingHandler()},
		{&wd.api, []string{"api.example.test"}, echoAuthHandler()},
		{&wd.other, []string{"other.example.test"}, countingHandler()},
		{&wd.npmAuth, []string{"npm.example.test"}, bearerOnly(wd.npmToken, npmPrivate)},
		{&wd.gitAuth, []string{"git.example.test"}, basicAuthOnly("x-access-token", wd.gitToken, gitHandler(wd.gitAuthDir))},
	} {
		if *h.dst, err = n.AddHost(h.names, h.handler); err != nil {
			return wd, err
		}
	}
	return wd, nil
}

// buildAirlock builds what make build ships: the front (./cmd/airlock with
// the airlock_front tag) at out and, beside it and written after it as make
// build does, the core it hands the gateway's commands to and the sandbox
// init, so the tests run what ships.
func buildAirlock(out string) error {
	dir := filepath.Dir(out)
	for _, b := range []struct{ pkg, out, tags string }{
		{"./cmd/airlock", out, "airlock_front"},
		{"./cmd/airlock", filepath.Join(dir, "airlock-core"), ""},
		{"./cmd/airlock-init", filepath.Join(dir, "airlock-init"), ""},
	} {
		if err := buildPackage(b.pkg, b.out, "-tags", b.tags); err != nil {
			return err
		}
	}
	return nil
}

// buildPackage builds a command of the module, static, into out, with
// go build's flags.
func buildPackage(pkg, out string, flags ...string) error {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append(append([]string{"build", "-o", out}, flags...), pkg)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v: %s", pkg, err, b)
	}
	return nil
}
