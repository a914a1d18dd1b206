package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/secrets"
)

// unprivBindEnv carries, to the test binary run as another user, the binding
// ids its sandbox asks for (a JSON array).
const unprivBindEnv = "ALK_TEST_UNPRIV_BIND"

// unprivBindClient is the other user's side of TestRootSecretBindingAttached:
// create a sandbox with the bindings asked for and, if that is allowed, send
// $PYPI_TOKEN to pypi.org from inside it.
func unprivBindClient() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var rep allowReport
	defer func() { _ = json.NewEncoder(os.Stdout).Encode(rep) }()
	var ids []string
	if err := json.Unmarshal([]byte(os.Getenv(unprivBindEnv)), &ids); err != nil {
		rep.Err = "bindings: " + err.Error()
		return 0
	}
	c := client.New(os.Getenv(unprivSocketEnv))
	defer c.Close()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{SecretBindings: ids, Labels: map[string]string{"e2e": "bind"}})
	var ae *api.Error
	if errors.As(err, &ae) {
		rep.Code, rep.Field, rep.Message = ae.Code, ae.Field, ae.Message
		return 0
	}
	if err != nil {
		rep.Err = "create: " + err.Error()
		return 0
	}
	rep.Created = sb.ID
	defer func() { _, _ = c.DeleteSandbox(context.Background(), sb.ID) }()
	var out strings.Builder
	script := `curl -sS --max-time 20 -o /dev/null -w '%{http_code}\n' -H "Authorization: Bearer $PYPI_TOKEN" https://pypi.org/simple/; exit 0`
	if _, err := c.Exec(ctx, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", script}}, client.ExecIO{Stdout: &out, Stderr: &out}); err != nil {
		rep.Err = "exec: " + err.Error()
	}
	rep.Output = out.String()
	return 0
}

// TestRootSecretBindingAttached: through a real daemon's API, root attaches a
// root-only binding at create; the sandbox holds only the placeholder, curl
// sends it to pypi.org, and pypi.org receives the real value; the value is in
// no API answer, sandbox output or audit record, and the creation record
// names the binding. A real other user naming the same binding is refused
// (403 on secret_bindings, no sandbox) and pypi.org hears nothing more.
func TestRootSecretBindingAttached(t *testing.T) {
	const value = "alk-bind-real-6c1d02f9e8a4b7"
	t.Setenv("ALK_TEST_BIND_VALUE", value)
	sf := filepath.Join(t.TempDir(), "secrets.yaml")
	if err := os.WriteFile(sf, []byte(`secrets:
  - id: pypi-token
    env: ALK_TEST_BIND_VALUE
bindings:
  - id: pypi-api
    secret: pypi-token
    host: pypi.org
    template: "Bearer {{value}}"
    mode: placeholder
    placeholder_env: PYPI_TOKEN
    attach: {uids: []}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	a := newAPIRoot(t, func(c *config.Config) { c.Secrets.File = sf })
	pypi := a.n.pypi
	ctx := context.Background()

	sb := a.create(t, api.CreateSandboxRequest{SecretBindings: []string{"pypi-api"}})
	if len(sb.SecretBindings) != 1 || sb.SecretBindings[0].ID != "pypi-api" || sb.SecretBindings[0].Fingerprint == "" {
		t.Fatalf("secret_bindings: got %+v", sb.SecretBindings)
	}
	before := len(pypi.Seen())
	out := a.mustRun(t, sb.ID, "sh", "-c",
		`echo "ph=$PYPI_TOKEN"; curl -sS --max-time 20 -o /dev/null -w 'code=%{http_code}\n' -H "Authorization: Bearer $PYPI_TOKEN" https://pypi.org/simple/`)
	if !strings.Contains(out, "ph="+secrets.PlaceholderPrefix) || !strings.Contains(out, "code=200") {
		t.Fatalf("sandbox output: %q, want the placeholder and 200", out)
	}
	seen := pypi.Seen()[before:]
	if len(seen) != 1 || seen[0].Header.Get("Authorization") != "Bearer "+value {
		t.Fatalf("pypi.org: got %d requests, want 1 carrying the real value", len(seen))
	}
	got, err := a.c.GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	view, _ := json.Marshal(got)

	uid := systemUser(t, "alk-b"+strconv.Itoa(os.Getpid()), a.gid)
	ids, _ := json.Marshal([]string{"pypi-api"})
	var rep allowReport
	a.asUser(t, uid, &rep, unprivBindEnv+"="+string(ids))
	if rep.Err != "" || rep.Created != "" || rep.Code != api.CodeForbidden || rep.Field != "secret_bindings" {
		t.Errorf("uid %d attaching root's binding: got %+v, want forbidden on secret_bindings and no sandbox", uid, rep)
	}
	if n := len(pypi.Seen()) - before; n != 1 {
		t.Errorf("pypi.org: %d requests after the refusal, want still 1", n)
	}
	if _, err := a.c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	recs := audittest.ReadLog(t, a.cfg.Audit.File)
	created := false
	for _, r := range recs {
		if r.Sandbox == sb.ID && r.Kind == audit.KindSandbox && strings.Contains(string(r.Extra["secret_bindings"]), `"id":"pypi-api"`) {
			created = true
		}
	}
	if !created {
		t.Errorf("no creation record of %s names pypi-api", sb.ID)
	}
	logBytes, err := os.ReadFile(a.cfg.Audit.File)
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"sandbox output": out, "API view": string(view), "audit log": string(logBytes), "refusal": rep.Message} {
		for _, f := range secrets.CanaryForms(value) {
			if strings.Contains(text, f) {
				t.Errorf("%s holds the value form %q", name, f)
			}
		}
	}
}
