package e2e

import (
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
)

// requireTool fails (never skips) when a client the suite depends on is missing:
// scripts/deps.sh installs them.
func requireTool(t *testing.T, path string) {
	t.Helper()
	if _, err := exec.LookPath(path); err != nil {
		t.Fatalf("%s is missing (make deps installs it): %v", path, err)
	}
}

// TestRootPipInstall: pip resolves a package on the fake pypi.org simple index
// and downloads the wheel from files.pythonhosted.org, through the gateway.
func TestRootPipInstall(t *testing.T) {
	e := newEnv(t, "")
	requireTool(t, "/usr/bin/python3")
	if out, err := exec.Command("/usr/bin/python3", "-m", "pip", "--version").CombinedOutput(); err != nil {
		t.Fatalf("/usr/bin/python3 has no pip (make deps installs python3-pip): %v: %s", err, out)
	}
	res := e.sh([]string{"--id", sandboxID("pip"), "--env", "PIP_DISABLE_PIP_VERSION_CHECK=1", "--env", "PIP_NO_INPUT=1",
		"--env", "PIP_BREAK_SYSTEM_PACKAGES=1", "--env", "PIP_DEFAULT_TIMEOUT=120"}, `
set -e
/usr/bin/python3 -m pip install --no-cache-dir --target /tmp/x `+pyName+`
/usr/bin/python3 -c 'import sys; sys.path.insert(0, "/tmp/x"); import `+pyName+`; print("value=" + `+pyName+`.VALUE)'
`)
	wantCode(t, res, 0)
	wantKV(t, kv(res.stdout), "value", pyValue, res)
	recs := e.records()
	noContentFindings(t, recs) // content inspection is on by default: a real install trips nothing
	mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "pypi.org", method: "GET", path: "/simple/" + pyName})
	mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "files.pythonhosted.org", method: "GET", path: "/packages/"})
}

// TestRootNpmInstall: npm fetches a packument and its tarball from the fake
// registry.npmjs.org, verifying the tarball's integrity.
func TestRootNpmInstall(t *testing.T) {
	e := newEnv(t, "")
	requireTool(t, "/usr/bin/node")
	requireTool(t, "/usr/bin/npm")
	res := e.sh([]string{"--id", sandboxID("npm"), "--env", "npm_config_cache=/tmp/npm-cache",
		"--env", "npm_config_update_notifier=false", "--env", "npm_config_fund=false", "--env", "npm_config_audit=false",
		"--env", "npm_config_fetch_timeout=120000"}, `
set -e
mkdir -p /tmp/x
npm install --prefix /tmp/x --no-audit --no-fund `+npmName+`
node -e 'console.log("value=" + require("/tmp/x/node_modules/`+npmName+`"))'
`)
	wantCode(t, res, 0)
	wantKV(t, kv(res.stdout), "value", npmValue, res)
	recs := e.records()
	noContentFindings(t, recs) // content inspection is on by default: a real install trips nothing
	mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "registry.npmjs.org", method: "GET", path: "/" + npmName})
	mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "registry.npmjs.org", method: "GET", path: "/" + npmName + "/-/"})
	mustNotFind(t, recs, match{decision: audit.DecisionDeny, host: "registry.npmjs.org"})
}

// TestRootGoModDownload: the go command downloads a module from the fake
// proxy.golang.org (GOPROXY protocol: .info, .mod, .zip).
func TestRootGoModDownload(t *testing.T) {
	e := newEnv(t, "")
	requireTool(t, "/usr/local/go/bin/go")
	res := e.sh([]string{"--id", sandboxID("go"),
		"--env", "GOPATH=/tmp/gopath", "--env", "GOCACHE=/tmp/gocache", "--env", "GOMODCACHE=/tmp/gopath/pkg/mod",
		"--env", "GOPROXY=https://proxy.golang.org", "--env", "GOSUMDB=off", "--env", "GOTOOLCHAIN=local",
		"--env", "GOFLAGS=-modcacherw", "--env", "GO111MODULE=on"}, `
set -e
cd /tmp
go mod download -x `+goModule+`@`+goVersion+`
echo "marker=$(grep -o '`+goMarker+`' /tmp/gopath/pkg/mod/`+goModule+`@`+goVersion+`/tiny.go)"
`)
	wantCode(t, res, 0)
	wantKV(t, kv(res.stdout), "marker", goMarker, res)
	recs := e.records()
	noContentFindings(t, recs) // content inspection is on by default: a real install trips nothing
	for _, suffix := range []string{".info", ".mod", ".zip"} {
		found := false
		for _, r := range find(recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "proxy.golang.org", method: "GET"}) {
			if strings.HasSuffix(r.Path, "/@v/"+goVersion+suffix) {
				found = true
			}
		}
		if !found {
			t.Errorf("no allowed GET of %s%s in the audit log\n%s", goVersion, suffix, dump(recs))
		}
	}
}

// TestRootGitCloneAndPushDenied: git clones over smart HTTP from the fake
// github.com (git http-backend), and a push, which the server would accept, is
// refused by the default policy at its first request (GET info/refs with
// service=git-receive-pack), so no receive-pack request of any kind reaches it.
func TestRootGitCloneAndPushDenied(t *testing.T) {
	e := newEnv(t, "")
	requireTool(t, "/usr/bin/git")
	headBefore, err := gitHead(w.gitDir)
	if err != nil {
		t.Fatal(err)
	}
	seenBefore := len(w.github.Seen())
	res := e.sh([]string{"--id", sandboxID("git"), "--env", "GIT_TERMINAL_PROMPT=0", "--env", "GIT_CONFIG_NOSYSTEM=1"}, `
cd /tmp
git clone -q https://github.com/`+gitRepoPath+` tiny; echo "clone_exit=$?"
echo "content=$(cat tiny/`+gitFile+`)"
cd tiny
git -c user.name=agent -c user.email=agent@example.test commit -q --allow-empty -m "exfiltrate" ; echo "commit_exit=$?"
git push -q origin HEAD:main; echo "push_exit=$?"
`)
	wantCode(t, res, 0)
	m := kv(res.stdout)
	wantKV(t, m, "clone_exit", "0", res)
	wantKV(t, m, "content", strings.TrimSpace(gitContent), res)
	wantKV(t, m, "commit_exit", "0", res)
	if m["push_exit"] == "0" || m["push_exit"] == "" {
		t.Errorf("git push: got exit %q, want a failure\n%s", m["push_exit"], res)
	}
	seen := seenSince(w.github, seenBefore)
	noRequests(t, "git push", seen, func(r *http.Request) bool {
		return strings.HasSuffix(r.URL.Path, "/git-receive-pack") || r.URL.Query().Get("service") == "git-receive-pack"
	})
	uploads := 0
	for _, r := range seen {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack") {
			uploads++
		}
	}
	if uploads == 0 {
		t.Errorf("the fake github.com saw no git-upload-pack POST: the clone did not go through it")
	}
	headAfter, err := gitHead(w.gitDir)
	if err != nil {
		t.Fatal(err)
	}
	if headAfter != headBefore {
		t.Errorf("main moved from %s to %s: the push landed", headBefore, headAfter)
	}
	recs := e.records()
	noContentFindings(t, recs) // content inspection is on by default: a real install trips nothing
	mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "github.com", method: "POST", path: "/" + gitRepoPath + "/git-upload-pack"})
	mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionDeny, host: "github.com", method: "GET", path: "/" + gitRepoPath + "/info/refs"})
}

// noContentFindings fails when content inspection refused any record or
// found anything above low confidence in a real client's traffic.
func noContentFindings(t *testing.T, recs []audit.Record) {
	t.Helper()
	for _, r := range recs {
		for _, x := range r.Reasons {
			if strings.HasPrefix(x.ID, "content_") {
				t.Fatalf("content inspection refused a real client's request: %s %s %s (%s)", r.Host, r.Method, r.Path, x.ID)
			}
		}
		for _, f := range r.Findings {
			if f.Confidence != "low" {
				t.Errorf("content finding in a real client's request to %s %s: %+v", r.Host, r.Path, f)
			}
		}
	}
}
