package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/secrets"
)

// TestRootGitCredentialHelperPlaceholder: git over HTTPS against a forge
// (git.example.test) that serves only Basic x-access-token:<real token>.
// The sandbox holds a placeholder, handed to git by a credential helper;
// git clones, commits and pushes, and the forge receives the real token in
// every authenticated request and the pushed commit. The real token appears
// nowhere in the sandbox's output, git's config or the audit log; the
// placeholder sent to another host is refused and that host hears nothing.
func TestRootGitCredentialHelperPlaceholder(t *testing.T) {
	e := newEnv(t, "")
	requireTool(t, "/usr/bin/git")
	secretsFile := filepath.Join(e.dir, "secrets.yaml")
	if err := os.WriteFile(secretsFile, []byte(`secrets:
  - id: forge-token
    env: E2E_GIT_TOKEN
bindings:
  - secret: forge-token
    sandboxes: {labels: {e2e: git-creds}}
    host: git.example.test
    basic_user: x-access-token
    mode: placeholder
    placeholder_env: GIT_TOKEN
`), 0o600); err != nil {
		t.Fatal(err)
	}
	headBefore, err := gitHead(w.gitAuthDir)
	if err != nil {
		t.Fatal(err)
	}
	seenBefore, otherBefore := len(w.gitAuth.Seen()), snap(w.other)
	// The helper is the documented recipe: it prints the placeholder as the
	// password; git sends it as Basic auth after the forge's 401.
	res := e.sh([]string{"--id", sandboxID("gitcreds"), "--label", "e2e=git-creds", "--secrets", secretsFile,
		"--allow", "git.example.test", "--allow", "other.example.test",
		"--env", "GIT_TERMINAL_PROMPT=0", "--env", "GIT_CONFIG_NOSYSTEM=1"}, `
cd /tmp
git config --global credential.helper '!f() { test "$1" = get && printf "username=x-access-token\npassword=%s\n" "$GIT_TOKEN"; }; f'
git config --global user.name agent; git config --global user.email agent@example.test
git clone -q https://git.example.test/`+gitRepoPath+` tiny; echo "clone_exit=$?"
echo "content=$(cat tiny/`+gitFile+`)"
cd tiny && git commit -q --allow-empty -m "from the sandbox"; echo "commit_exit=$?"
git push -q origin HEAD:main; echo "push_exit=$?"
echo "pushed=$(git rev-parse HEAD)"
curl -sS --max-time 60 -o /dev/null -w 'leak=%{http_code}\n' -u "x-access-token:$GIT_TOKEN" https://other.example.test/`+gitRepoPath+`/info/refs
cat ~/.gitconfig
echo "placeholder=$GIT_TOKEN"
`, "E2E_GIT_TOKEN="+w.gitToken)
	wantCode(t, res, 0)
	m := kv(res.stdout)
	wantKV(t, m, "clone_exit", "0", res)
	wantKV(t, m, "content", strings.TrimSpace(gitContent), res)
	wantKV(t, m, "push_exit", "0", res)
	if !strings.HasPrefix(m["placeholder"], secrets.PlaceholderPrefix) {
		t.Fatalf("GIT_TOKEN in the sandbox: got %q, want a placeholder\n%s", m["placeholder"], res)
	}
	wantKV(t, m, "leak", "403", res)
	headAfter, err := gitHead(w.gitAuthDir)
	if err != nil {
		t.Fatal(err)
	}
	if headAfter == headBefore || headAfter != m["pushed"] {
		t.Errorf("forge main: %s -> %s, want the pushed %s", headBefore, headAfter, m["pushed"])
	}
	seen := seenSince(w.gitAuth, seenBefore)
	var authed, receive int
	for _, r := range seen {
		if _, p, ok := r.BasicAuth(); ok {
			if p != w.gitToken {
				t.Errorf("forge got %s %s with a password that is not the real token", r.Method, r.URL.Path)
			}
			authed++
		}
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
			receive++
		}
	}
	if authed == 0 || receive != 1 {
		t.Errorf("forge: %d authenticated requests and %d receive-pack POSTs, want some and 1", authed, receive)
	}
	// The placeholder went nowhere else: the other host saw no request
	// carrying it (the gateway refused the request before it left).
	for _, r := range seenSince(w.other, 0) {
		if _, p, ok := r.BasicAuth(); ok && p == m["placeholder"] {
			t.Errorf("other.example.test received the placeholder")
		}
	}
	if d := snap(w.other).sub(otherBefore); d.requests != 0 {
		t.Errorf("other.example.test served %d requests, want 0 (the placeholder is refused before it leaves)", d.requests)
	}
	recs := e.records()
	push := mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "git.example.test", method: "POST",
		path: "/" + gitRepoPath + "/git-receive-pack"})
	if len(push.Secrets) != 1 || push.Secrets[0].ID != "forge-token" || push.Secrets[0].Fingerprint == "" {
		t.Errorf("push's audit secrets: got %+v, want forge-token with a fingerprint", push.Secrets)
	}
	auditBytes, err := os.ReadFile(e.audit)
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"sandbox output": res.stdout + res.stderr, "audit log": string(auditBytes)} {
		for _, f := range secrets.CanaryForms(w.gitToken) {
			if strings.Contains(text, f) {
				t.Errorf("%s holds the real token's form %q", name, f)
			}
		}
	}
}

// TestRootNpmAuthTokenPlaceholder: npm installs from a private registry
// (npm.example.test) that serves only "Bearer <real token>"; the sandbox's
// .npmrc holds `_authToken=${NPM_TOKEN}`, a placeholder. The registry gets
// the real token on the packument and the tarball; the real token is in no
// output or audit record.
func TestRootNpmAuthTokenPlaceholder(t *testing.T) {
	e := newEnv(t, "")
	requireTool(t, "/usr/bin/npm")
	secretsFile := filepath.Join(e.dir, "secrets.yaml")
	if err := os.WriteFile(secretsFile, []byte(`secrets:
  - id: npm-token
    env: E2E_NPM_TOKEN
bindings:
  - secret: npm-token
    sandboxes: {labels: {e2e: npm-creds}}
    host: npm.example.test
    template: "Bearer {{value}}"
    mode: placeholder
    placeholder_env: NPM_TOKEN
`), 0o600); err != nil {
		t.Fatal(err)
	}
	seenBefore := len(w.npmAuth.Seen())
	res := e.sh([]string{"--id", sandboxID("npmcreds"), "--label", "e2e=npm-creds", "--secrets", secretsFile,
		"--allow", "npm.example.test", "--env", "npm_config_cache=/tmp/npm-cache",
		"--env", "npm_config_update_notifier=false", "--env", "npm_config_fund=false", "--env", "npm_config_audit=false",
		"--env", "npm_config_fetch_timeout=120000"}, `
printf 'registry=https://npm.example.test/\n//npm.example.test/:_authToken=${NPM_TOKEN}\n' > ~/.npmrc
npm install --prefix /tmp/x --no-audit --no-fund `+npmName+`; echo "install_exit=$?"
node -e 'console.log("value=" + require("/tmp/x/node_modules/`+npmName+`"))'
echo "placeholder=$NPM_TOKEN"
`, "E2E_NPM_TOKEN="+w.npmToken)
	wantCode(t, res, 0)
	m := kv(res.stdout)
	wantKV(t, m, "install_exit", "0", res)
	wantKV(t, m, "value", npmValue, res)
	if !strings.HasPrefix(m["placeholder"], secrets.PlaceholderPrefix) {
		t.Fatalf("NPM_TOKEN: got %q, want a placeholder\n%s", m["placeholder"], res)
	}
	var packument, tarball bool
	for _, r := range seenSince(w.npmAuth, seenBefore) {
		ok := r.Header.Get("Authorization") == "Bearer "+w.npmToken
		switch {
		case r.URL.Path == "/"+npmName:
			packument = packument || ok
		case strings.HasSuffix(r.URL.Path, ".tgz"):
			tarball = tarball || ok
		}
	}
	if !packument || !tarball {
		t.Errorf("registry: packument with the real token %v, tarball %v; want both", packument, tarball)
	}
	auditBytes, err := os.ReadFile(e.audit)
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"sandbox output": res.stdout + res.stderr, "audit log": string(auditBytes)} {
		for _, f := range secrets.CanaryForms(w.npmToken) {
			if strings.Contains(text, f) {
				t.Errorf("%s holds the real token's form %q", name, f)
			}
		}
	}
}
