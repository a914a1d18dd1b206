package e2e

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The packages every registry fixture serves.
const (
	pyName      = "tinypkg"
	pyVersion   = "0.1.0"
	pyValue     = "tinypkg-python-ok"
	npmName     = "tinypkg"
	npmVersion  = "1.0.0"
	npmValue    = "tinypkg-node-ok"
	goModule    = "github.com/acme/tinymod"
	goVersion   = "v1.0.0"
	goMarker    = "tinymod-go-ok"
	gitRepoPath = "acme/tiny.git"
	gitFile     = "README.md"
	gitContent  = "tiny-git-ok\n"
)

// acceptWrites answers every method, so that a POST the gateway failed to block
// would succeed and the test would see it.
func acceptWrites(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return false
	}
	fmt.Fprintf(w, "%s %s accepted by the fake server\n", r.Method, r.URL.Path)
	return true
}

// buildWheel returns a minimal pure-Python wheel: one module and a dist-info
// with METADATA, WHEEL and a RECORD whose hashes pip checks.
func buildWheel() (name string, data []byte, err error) {
	name = fmt.Sprintf("%s-%s-py3-none-any.whl", pyName, pyVersion)
	di := fmt.Sprintf("%s-%s.dist-info", pyName, pyVersion)
	files := []struct{ path, body string }{
		{pyName + "/__init__.py", fmt.Sprintf("VALUE = %q\n", pyValue)},
		{di + "/METADATA", fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: airlock e2e fixture\n", pyName, pyVersion)},
		{di + "/WHEEL", "Wheel-Version: 1.0\nGenerator: airlock-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f.path)
		if err != nil {
			return "", nil, err
		}
		if _, err := w.Write([]byte(f.body)); err != nil {
			return "", nil, err
		}
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.path, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	fmt.Fprintf(&record, "%s/RECORD,,\n", di)
	w, err := zw.Create(di + "/RECORD")
	if err != nil {
		return "", nil, err
	}
	if _, err := w.Write([]byte(record.String())); err != nil {
		return "", nil, err
	}
	if err := zw.Close(); err != nil {
		return "", nil, err
	}
	return name, buf.Bytes(), nil
}

// pypiHandler serves a PEP 503 simple index for pypi.org and the wheel for
// files.pythonhosted.org.
func pypiHandler() (http.Handler, error) {
	wheelName, wheel, err := buildWheel()
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(wheel)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if acceptWrites(w, r) {
			return
		}
		switch {
		case r.URL.Path == "/simple/"+pyName+"/" || r.URL.Path == "/simple/"+pyName:
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"https://files.pythonhosted.org/packages/%s#sha256=%s\">%s</a></body></html>\n",
				wheelName, hex.EncodeToString(sum[:]), wheelName)
		case r.URL.Path == "/packages/"+wheelName:
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write(wheel)
		case strings.HasPrefix(r.URL.Path, "/simple/") && r.URL.Path != "/simple/":
			http.NotFound(w, r)
		default:
			fmt.Fprintf(w, "hello from %s%s\n", r.Host, r.URL.Path)
		}
	}), nil
}

// buildNpmTarball returns a package tarball (package/package.json, package/index.js).
func buildNpmTarball() ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	files := []struct{ path, body string }{
		{"package/package.json", fmt.Sprintf(`{"name":%q,"version":%q,"main":"index.js"}`+"\n", npmName, npmVersion)},
		{"package/index.js", fmt.Sprintf("module.exports = %q;\n", npmValue)},
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.path, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// npmHandler serves a packument and the tarball it points at, under base
// (https://registry.npmjs.org).
func npmHandler(base string) (http.Handler, error) {
	tgz, err := buildNpmTarball()
	if err != nil {
		return nil, err
	}
	s1 := sha1.Sum(tgz)
	s512 := sha512.Sum512(tgz)
	tarPath := fmt.Sprintf("/%s/-/%s-%s.tgz", npmName, npmName, npmVersion)
	packument, err := json.Marshal(map[string]any{
		"name":      npmName,
		"dist-tags": map[string]string{"latest": npmVersion},
		"versions": map[string]any{npmVersion: map[string]any{
			"name": npmName, "version": npmVersion, "main": "index.js",
			"dist": map[string]string{
				"tarball":   base + tarPath,
				"shasum":    hex.EncodeToString(s1[:]),
				"integrity": "sha512-" + base64.StdEncoding.EncodeToString(s512[:]),
			},
		}},
	})
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if acceptWrites(w, r) {
			return
		}
		switch r.URL.Path {
		case "/" + npmName:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(packument)
		case tarPath:
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write(tgz)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintln(w, `{"error":"not found"}`)
		}
	}), nil
}

// buildGoZip returns a module zip in the layout the go command expects: every
// file under module@version/.
func buildGoZip() ([]byte, error) {
	prefix := goModule + "@" + goVersion + "/"
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range []struct{ path, body string }{
		{"go.mod", goModFile()},
		{"tiny.go", fmt.Sprintf("package tinymod\n\n// Marker proves the download.\nconst Marker = %q\n", goMarker)},
	} {
		w, err := zw.Create(prefix + f.path)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write([]byte(f.body)); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func goModFile() string { return "module " + goModule + "\n\ngo 1.21\n" }

// goProxyHandler speaks the GOPROXY protocol for one module version.
func goProxyHandler() (http.Handler, error) {
	z, err := buildGoZip()
	if err != nil {
		return nil, err
	}
	info := fmt.Sprintf(`{"Version":%q,"Time":"2024-01-02T03:04:05Z"}`, goVersion)
	base := "/" + goModule + "/@v/"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if acceptWrites(w, r) {
			return
		}
		switch r.URL.Path {
		case base + "list":
			fmt.Fprintln(w, goVersion)
		case base + goVersion + ".info", "/" + goModule + "/@latest":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintln(w, info)
		case base + goVersion + ".mod":
			fmt.Fprint(w, goModFile())
		case base + goVersion + ".zip":
			w.Header().Set("Content-Type", "application/zip")
			_, _ = w.Write(z)
		default:
			http.Error(w, "not found", http.StatusNotFound)
		}
	}), nil
}

// makeGitRepo makes root/acme/tiny.git, a bare repository with one commit that
// accepts pushes over HTTP (http.receivepack), so only the gateway stands
// between a sandbox and a successful push.
func makeGitRepo(root string) error {
	work := filepath.Join(root, "work")
	bare := filepath.Join(root, "repos", gitRepoPath)
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, gitFile), []byte(gitContent), 0o644); err != nil {
		return err
	}
	git := func(dir string, args ...string) error {
		cmd := exec.Command("git", append([]string{"-c", "user.name=e2e", "-c", "user.email=e2e@example.test",
			"-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+root)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	for _, args := range [][]string{
		{"init", "-q"},
		{"add", gitFile},
		{"commit", "-q", "-m", "initial"},
		{"clone", "-q", "--bare", work, bare},
		{"--git-dir", bare, "config", "http.receivepack", "true"},
	} {
		if err := git(work, args...); err != nil {
			return err
		}
	}
	return nil
}

// gitHandler serves smart HTTP with git http-backend over root/repos.
func gitHandler(root string) http.Handler {
	return &cgi.Handler{
		Path: "/usr/lib/git-core/git-http-backend",
		Dir:  root,
		Env: []string{
			"GIT_PROJECT_ROOT=" + filepath.Join(root, "repos"),
			"GIT_HTTP_EXPORT_ALL=1",
			"GIT_CONFIG_NOSYSTEM=1",
			"HOME=" + root,
		},
	}
}

// gitHead returns the commit main points at in the served bare repository.
func gitHead(root string) (string, error) {
	out, err := exec.Command("git", "--git-dir", filepath.Join(root, "repos", gitRepoPath), "rev-parse", "refs/heads/main").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git rev-parse: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// basicAuthOnly serves next only to requests carrying Basic user:password
// (compared in constant time); others get 401 with a Basic challenge, as a
// forge answers git before its credential helper runs.
func basicAuthOnly(user, password string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u+":"+p), []byte(user+":"+password)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="git.example.test"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearerOnly serves next only to requests carrying "Bearer token"; others
// get 401, as a private registry answers.
func bearerOnly(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+token)) != 1 {
			w.Header().Set("WWW-Authenticate", "Bearer")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintln(w, `{"error":"authentication required"}`)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// randomToken is prefix and 32 random hex digits.
func randomToken(prefix string) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return prefix + hex.EncodeToString(b[:]), nil
}

// echoAuthHandler answers with the Authorization header it received, in a
// response header and in the body: the worst case for a leaked credential.
func echoAuthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		w.Header().Set("X-Echo-Authorization", auth)
		fmt.Fprintf(w, "echo path=%s authorization=%s\n", r.URL.Path, auth)
	})
}

// countingHandler answers every method with a short body.
func countingHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if acceptWrites(w, r) {
			return
		}
		fmt.Fprintf(w, "hello from %s%s\n", r.Host, r.URL.Path)
	})
}
