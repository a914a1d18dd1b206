package e2e

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/secrets"
	"github.com/airlock-dev/airlock/test/fakenet"
)

// Private registries in the fake internet, each serving only requests that
// carry its real token (random per run): a pip simple index with Basic auth
// (pypi.example.test, user __token__), a cargo sparse registry with
// auth-required (cargo.example.test, the token as Authorization), a GOPROXY
// with Basic auth (goproxy.example.test, user agent, from .netrc). They are
// added on first use, so the tests that do not use them pay nothing.
type privateRegistries struct {
	pip, cargo, goprox            *fakenet.Host
	pipToken, cargoToken, goToken string
	cargoCrate                    []byte
}

// crateName, crateVersion and crateMarker: the crate fixtures_pkg_test.go
// serves (the same crate, here from an authenticated registry).

var (
	registriesOnce sync.Once
	registries     *privateRegistries
	registriesErr  error
)

func privateRegistriesFor(t *testing.T) *privateRegistries {
	t.Helper()
	registriesOnce.Do(func() { registries, registriesErr = addPrivateRegistries() })
	if registriesErr != nil {
		t.Fatalf("private registries: %v", registriesErr)
	}
	return registries
}

func addPrivateRegistries() (*privateRegistries, error) {
	r := &privateRegistries{}
	var err error
	for _, tok := range []struct {
		dst    *string
		prefix string
	}{{&r.pipToken, "alk-pip-real-"}, {&r.cargoToken, "alk-cargo-real-"}, {&r.goToken, "alk-go-real-"}} {
		if *tok.dst, err = randomToken(tok.prefix); err != nil {
			return nil, err
		}
	}
	pip, err := privatePipIndex("https://pypi.example.test")
	if err != nil {
		return nil, err
	}
	if r.cargoCrate, err = buildCrate(); err != nil {
		return nil, err
	}
	goprox, err := goProxyHandler()
	if err != nil {
		return nil, err
	}
	if r.pip, err = w.net.AddHost([]string{"pypi.example.test"}, basicAuthOnly("__token__", r.pipToken, pip)); err != nil {
		return nil, err
	}
	if r.cargo, err = w.net.AddHost([]string{"cargo.example.test"}, rawTokenOnly(r.cargoToken, cargoSparseRegistry(r.cargoCrate))); err != nil {
		return nil, err
	}
	if r.goprox, err = w.net.AddHost([]string{"goproxy.example.test"}, basicAuthOnly("agent", r.goToken, goprox)); err != nil {
		return nil, err
	}
	return r, nil
}

// privatePipIndex is a PEP 503 simple index whose file links stay on base,
// so pip sends the index's credentials with the download too.
func privatePipIndex(base string) (http.Handler, error) {
	wheelName, wheel, err := buildWheel()
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(wheel)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/simple/" + pyName + "/", "/simple/" + pyName:
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"%s/packages/%s#sha256=%s\">%s</a></body></html>\n",
				base, wheelName, hex.EncodeToString(sum[:]), wheelName)
		case "/packages/" + wheelName:
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write(wheel)
		default:
			http.NotFound(w, r)
		}
	}), nil
}

// rawTokenOnly serves next only to requests whose Authorization is exactly
// token (cargo sends a registry token as is); others get 401, which tells
// cargo the registry wants its token.
func rawTokenOnly(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Cargo login_url="https://cargo.example.test/me"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintln(w, `{"errors":[{"detail":"authentication required"}]}`)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// cargoSparseRegistry speaks cargo's sparse index protocol for one crate
// version: config.json, the crate's index file, the download.
func cargoSparseRegistry(crate []byte) http.Handler {
	sum := sha256.Sum256(crate)
	entry := fmt.Sprintf(`{"name":%q,"vers":%q,"deps":[],"cksum":%q,"features":{},"yanked":false}`+"\n",
		crateName, crateVersion, hex.EncodeToString(sum[:]))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/index/config.json":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"dl":"https://cargo.example.test/api/v1/crates","api":"https://cargo.example.test","auth-required":true}`)
		case "/index/" + crateName[:2] + "/" + crateName[2:4] + "/" + crateName:
			fmt.Fprint(w, entry)
		case "/api/v1/crates/" + crateName + "/" + crateVersion + "/download":
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write(crate)
		default:
			http.NotFound(w, r)
		}
	})
}

// registryRun is what one registry test checks after the tool ran: the
// registry saw the real token on every request that got content, the
// sandbox held only a placeholder, and the real token is in no output and no
// audit record.
func checkRegistryRun(t *testing.T, e *env, res result, host *fakenet.Host, before int, secretID, token, placeholder string, authed func(*http.Request) bool, wantPaths ...string) {
	t.Helper()
	injected := 0
	for _, r := range find(e.records(), match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: host.Names[0]}) {
		if len(r.Secrets) == 1 && r.Secrets[0].ID == secretID && r.Secrets[0].Fingerprint != "" {
			injected++
		}
	}
	if injected == 0 {
		t.Errorf("no allowed request to %s audited with secret %s and its fingerprint", host.Names[0], secretID)
	}
	if !strings.HasPrefix(placeholder, secrets.PlaceholderPrefix) {
		t.Fatalf("the sandbox's variable: got %q, want a placeholder\n%s", placeholder, res)
	}
	seen := seenSince(host, before)
	for _, want := range wantPaths {
		ok := false
		for _, r := range seen {
			if strings.HasSuffix(r.URL.Path, want) && authed(r) {
				ok = true
			}
		}
		if !ok {
			t.Errorf("%s: no request for %s carrying the real token (saw %d requests)", host.Names[0], want, len(seen))
		}
	}
	for _, r := range seen {
		if strings.Contains(r.Header.Get("Authorization"), placeholder) {
			t.Errorf("%s received the placeholder", host.Names[0])
		}
	}
	auditBytes, err := os.ReadFile(e.audit)
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"sandbox output": res.stdout + res.stderr, "audit log": string(auditBytes)} {
		for _, f := range secrets.CanaryForms(token) {
			if strings.Contains(text, f) {
				t.Errorf("%s holds the real token's form %q", name, f)
			}
		}
	}
}

func writeSecrets(t *testing.T, e *env, yaml string) string {
	t.Helper()
	f := filepath.Join(e.dir, "secrets.yaml")
	if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestRootPipIndexPlaceholder: pip installs from a private index that takes
// only Basic __token__:<real token>; the sandbox's PIP_INDEX_URL holds the
// placeholder as the password (docs/CREDENTIALS.md's recipe).
func TestRootPipIndexPlaceholder(t *testing.T) {
	e := newEnv(t, "")
	requireTool(t, "/usr/bin/python3")
	reg := privateRegistriesFor(t)
	secretsFile := writeSecrets(t, e, `secrets:
  - id: pip-token
    env: E2E_PIP_TOKEN
bindings:
  - secret: pip-token
    sandboxes: {labels: {e2e: pip-creds}}
    host: pypi.example.test
    basic_user: __token__
    mode: placeholder
    placeholder_env: PIP_TOKEN
`)
	before := len(reg.pip.Seen())
	res := e.sh([]string{"--id", sandboxID("pipcreds"), "--label", "e2e=pip-creds", "--secrets", secretsFile,
		"--allow", "pypi.example.test", "--env", "PIP_DISABLE_PIP_VERSION_CHECK=1", "--env", "PIP_NO_INPUT=1",
		"--env", "PIP_BREAK_SYSTEM_PACKAGES=1", "--env", "PIP_DEFAULT_TIMEOUT=120"}, `
export PIP_INDEX_URL="https://__token__:${PIP_TOKEN}@pypi.example.test/simple"
/usr/bin/python3 -m pip install --no-cache-dir --target /tmp/x `+pyName+`; echo "install_exit=$?"
/usr/bin/python3 -c 'import sys; sys.path.insert(0, "/tmp/x"); import `+pyName+`; print("value=" + `+pyName+`.VALUE)'
echo "placeholder=$PIP_TOKEN"
`, "E2E_PIP_TOKEN="+reg.pipToken)
	wantCode(t, res, 0)
	m := kv(res.stdout)
	wantKV(t, m, "install_exit", "0", res)
	wantKV(t, m, "value", pyValue, res)
	checkRegistryRun(t, e, res, reg.pip, before, "pip-token", reg.pipToken, m["placeholder"], func(r *http.Request) bool {
		u, p, ok := r.BasicAuth()
		return ok && u == "__token__" && p == reg.pipToken
	}, "/simple/"+pyName+"/", ".whl")
}

// cargoBinary finds a cargo that speaks authenticated sparse registries
// (1.74 or later) and copies it where the sandbox can run it. Debian
// bookworm's cargo is older; rustup's is used when present.
func cargoBinary(t *testing.T) string {
	t.Helper()
	var candidates []string
	if out, err := exec.Command("rustup", "which", "cargo").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	if home, err := os.UserHomeDir(); err == nil {
		if out, err := exec.Command(filepath.Join(home, ".cargo", "bin", "rustup"), "which", "cargo").Output(); err == nil {
			candidates = append(candidates, strings.TrimSpace(string(out)))
		}
	}
	candidates = append(candidates, "/usr/bin/cargo")
	re := regexp.MustCompile(`^cargo 1\.(\d+)\.`)
	for _, c := range candidates {
		out, err := exec.Command(c, "--version").Output()
		if err != nil {
			continue
		}
		m := re.FindStringSubmatch(string(out))
		if m == nil {
			continue
		}
		if minor, _ := strconv.Atoi(m[1]); minor < 74 {
			continue
		}
		dir, err := os.MkdirTemp("", "airlock-e2e-cargo-") // bound at its own path: the sandbox's uid must reach it
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		src, err := os.Open(c)
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		dst, err := os.OpenFile(filepath.Join(dir, "cargo"), os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(dst, src); err != nil {
			t.Fatal(err)
		}
		dst.Close()
		// cargo fetch asks rustc for its version and the host's target
		// information, nothing else; the toolchain's rustc is not copied (its
		// libraries are large): a stub answers with the real one's words.
		rustc := filepath.Join(filepath.Dir(c), "rustc")
		vv, err := exec.Command(rustc, "-vV").Output()
		if err != nil {
			t.Skipf("%s -vV: %v", rustc, err)
		}
		probe := exec.Command(rustc, "-", "--crate-name", "___", "--print=file-names", "--crate-type", "bin",
			"--crate-type", "rlib", "--crate-type", "dylib", "--crate-type", "cdylib", "--crate-type", "staticlib",
			"--crate-type", "proc-macro", "--print=sysroot", "--print=split-debuginfo", "--print=crate-name", "--print=cfg", "-Wwarnings")
		probe.Stdin = strings.NewReader("")
		info, err := probe.Output()
		if err != nil {
			t.Skipf("%s target information: %v", rustc, err)
		}
		stub := "#!/bin/sh\ncase \"$1\" in\n-vV) cat <<'EOF'\n" + string(vv) + "EOF\n;;\n-) cat <<'EOF'\n" + string(info) +
			"EOF\n;;\n*) echo \"rustc stub: $*\" >&2; exit 1;;\nesac\n"
		if err := os.WriteFile(filepath.Join(dir, "rustc"), []byte(stub), 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	t.Skip("no cargo 1.74 or later (authenticated sparse registries); Debian bookworm's is 1.65: install one with rustup")
	return ""
}

// TestRootCargoRegistryTokenPlaceholder: cargo fetches a crate from a
// private sparse registry with auth-required; CARGO_REGISTRIES_PRIV_TOKEN
// in the sandbox is the placeholder, the registry receives the real token
// on the index and the download.
func TestRootCargoRegistryTokenPlaceholder(t *testing.T) {
	e := newEnv(t, "")
	cargoDir := cargoBinary(t)
	reg := privateRegistriesFor(t)
	secretsFile := writeSecrets(t, e, `secrets:
  - id: cargo-token
    env: E2E_CARGO_TOKEN
bindings:
  - secret: cargo-token
    sandboxes: {labels: {e2e: cargo-creds}}
    host: cargo.example.test
    template: "{{value}}"
    mode: placeholder
    placeholder_env: CARGO_REGISTRIES_PRIV_TOKEN
`)
	before := len(reg.cargo.Seen())
	res := e.sh([]string{"--id", sandboxID("cargocreds"), "--label", "e2e=cargo-creds", "--secrets", secretsFile,
		"--allow", "cargo.example.test", "--workspace", cargoDir, "--env", "CARGO_DIR=" + cargoDir, "--env", "RUSTC=" + cargoDir + "/rustc",
		"--env", "CARGO_HOME=/tmp/cargo-home", "--env", "CARGO_REGISTRIES_PRIV_INDEX=sparse+https://cargo.example.test/index/",
		"--env", "CARGO_REGISTRIES_PRIV_CREDENTIAL_PROVIDER=cargo:token",
		"--env", "CARGO_HTTP_TIMEOUT=120", "--env", "CARGO_NET_RETRY=0", "--env", "CARGO_TERM_COLOR=never"}, `
mkdir -p /tmp/app/src && cd /tmp/app
printf '[package]\nname = "app"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n`+crateName+` = { version = "`+crateVersion+`", registry = "priv" }\n' > Cargo.toml
echo 'fn main() {}' > src/main.rs
"$CARGO_DIR/cargo" fetch; echo "fetch_exit=$?"
echo "marker=$(find /tmp/cargo-home/registry/src -name lib.rs -path '*`+crateName+`*' -exec grep -o '`+crateMarker+`' {} \; 2>/dev/null | head -1)"
echo "placeholder=$CARGO_REGISTRIES_PRIV_TOKEN"
`, "E2E_CARGO_TOKEN="+reg.cargoToken)
	wantCode(t, res, 0)
	m := kv(res.stdout)
	wantKV(t, m, "fetch_exit", "0", res)
	wantKV(t, m, "marker", crateMarker, res)
	checkRegistryRun(t, e, res, reg.cargo, before, "cargo-token", reg.cargoToken, m["placeholder"], func(r *http.Request) bool {
		return r.Header.Get("Authorization") == reg.cargoToken
	}, "/index/config.json", "/"+crateName, "/download")
}

// TestRootGoPrivateProxyNetrc: the go command downloads a private module
// (GOPRIVATE, GONOPROXY=none) from a GOPROXY that takes only Basic
// agent:<real token>; the sandbox's ~/.netrc holds the placeholder.
func TestRootGoPrivateProxyNetrc(t *testing.T) {
	e := newEnv(t, "")
	requireTool(t, "/usr/local/go/bin/go")
	reg := privateRegistriesFor(t)
	secretsFile := writeSecrets(t, e, `secrets:
  - id: go-token
    env: E2E_GO_TOKEN
bindings:
  - secret: go-token
    sandboxes: {labels: {e2e: go-creds}}
    host: goproxy.example.test
    basic_user: agent
    mode: placeholder
    placeholder_env: GO_TOKEN
`)
	before := len(reg.goprox.Seen())
	res := e.sh([]string{"--id", sandboxID("gocreds"), "--label", "e2e=go-creds", "--secrets", secretsFile,
		"--allow", "goproxy.example.test",
		"--env", "GOPATH=/tmp/gopath", "--env", "GOCACHE=/tmp/gocache", "--env", "GOMODCACHE=/tmp/gopath/pkg/mod",
		"--env", "GOPROXY=https://goproxy.example.test", "--env", "GOPRIVATE=github.com/acme/*", "--env", "GONOPROXY=none",
		"--env", "GOTOOLCHAIN=local", "--env", "GOFLAGS=-modcacherw", "--env", "GO111MODULE=on"}, `
printf 'machine goproxy.example.test login agent password %s\n' "$GO_TOKEN" > "$HOME/.netrc"
chmod 600 "$HOME/.netrc"
cd /tmp
go mod download -x `+goModule+`@`+goVersion+`; echo "download_exit=$?"
echo "marker=$(grep -o '`+goMarker+`' /tmp/gopath/pkg/mod/`+goModule+`@`+goVersion+`/tiny.go)"
echo "placeholder=$GO_TOKEN"
`, "E2E_GO_TOKEN="+reg.goToken)
	wantCode(t, res, 0)
	m := kv(res.stdout)
	wantKV(t, m, "download_exit", "0", res)
	wantKV(t, m, "marker", goMarker, res)
	checkRegistryRun(t, e, res, reg.goprox, before, "go-token", reg.goToken, m["placeholder"], func(r *http.Request) bool {
		u, p, ok := r.BasicAuth()
		return ok && u == "agent" && p == reg.goToken
	}, ".info", ".mod", ".zip")
}
