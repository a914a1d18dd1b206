package daemon

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/secrets"
)

const bindCanary = "bind-canary-7f1c9e0d2b" // the real value; must never leave the daemon

// bindWorld is a fake world whose secrets file has "api" (attachable by uid
// 1000) and "ops" (root only).
func bindWorld(t *testing.T) *fakeWorld {
	t.Helper()
	t.Setenv("AIRLOCK_TEST_BIND_SECRET", bindCanary)
	w := newFakeWorld(t)
	in, err := secrets.New(secrets.Config{
		Secrets: []secrets.SecretConfig{{ID: "tok", Env: "AIRLOCK_TEST_BIND_SECRET"}},
		Bindings: []secrets.BindingConfig{
			{ID: "api", Secret: "tok", Host: "api.example.com", Template: "Bearer {{value}}", Mode: secrets.ModeRequire,
				PlaceholderEnv: "API_TOKEN", Attach: &secrets.AttachConfig{UIDs: []int{1000}}},
			{ID: "ops", Secret: "tok", Host: "ops.example.com", Template: "Bearer {{value}}", Attach: &secrets.AttachConfig{}},
			{ID: "labelled", Secret: "tok", Host: "lab.example.com", Template: "Bearer {{value}}",
				Sandboxes: secrets.SandboxSelector{Labels: map[string]string{"team": "x"}}},
		},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w.d.secrets = in
	return w
}

func TestCreateSecretBindingsRefused(t *testing.T) {
	w := bindWorld(t)
	for _, tc := range []struct {
		name   string
		uid    int
		body   string
		status int
		code   string
	}{
		{"another's binding", 1001, `{"secret_bindings":["api"]}`, http.StatusForbidden, api.CodeForbidden},
		{"root-only binding", 1000, `{"secret_bindings":["api","ops"]}`, http.StatusForbidden, api.CodeForbidden},
		{"a secret id", 1000, `{"secret_bindings":["tok"]}`, http.StatusBadRequest, api.CodeInvalidField},
		{"a file path", 1000, `{"secret_bindings":["/etc/airlock/secrets.yaml"]}`, http.StatusBadRequest, api.CodeInvalidField},
		{"a binding without attach", 0, `{"secret_bindings":["labelled"]}`, http.StatusBadRequest, api.CodeInvalidField},
		{"empty id", 0, `{"secret_bindings":[""]}`, http.StatusBadRequest, api.CodeInvalidField},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := w.exe.created.Load()
			r := w.client(tc.uid).json(t, "POST", "/v1/sandboxes", tc.body)
			if r.status != tc.status {
				t.Fatalf("got %d %s, want %d", r.status, r.body, tc.status)
			}
			if e := r.apiError(t); e.Code != tc.code || e.Field != "secret_bindings" {
				t.Errorf("got code %q field %q, want %q secret_bindings", e.Code, e.Field, tc.code)
			}
			// Nothing was built, so nothing could reach an upstream.
			if got := w.exe.created.Load(); got != before {
				t.Errorf("executor sandboxes: got %d, want %d (none built)", got, before)
			}
			if strings.Contains(string(r.body), bindCanary) {
				t.Errorf("the answer holds the value: %s", r.body)
			}
		})
	}
	if n := len(w.audit.Kind(audit.KindSandbox)); n != 0 {
		t.Errorf("sandbox records after refusals: got %d, want 0", n)
	}
}

func TestCreateSecretBindingsAttached(t *testing.T) {
	w := bindWorld(t)
	c := w.client(1000)
	sb := c.create(t, `{"secret_bindings":["api"]}`)
	if len(sb.SecretBindings) != 1 {
		t.Fatalf("secret_bindings: got %+v, want one", sb.SecretBindings)
	}
	b := sb.SecretBindings[0]
	if b.ID != "api" || b.Secret != "tok" || b.Host != "api.example.com" || b.Port != 443 || b.Mode != secrets.ModeRequire ||
		!strings.HasPrefix(b.Fingerprint, "hmac-sha256:") || b.Version == "" {
		t.Errorf("secret_bindings[0]: got %+v", b)
	}
	get := c.json(t, "GET", "/v1/sandboxes/"+sb.ID, "")
	if get.status != http.StatusOK || !strings.Contains(string(get.body), `"fingerprint":"`+b.Fingerprint+`"`) {
		t.Errorf("GET: got %d %s, want the binding with its fingerprint", get.status, get.body)
	}
	for _, seen := range []string{string(get.body)} {
		if strings.Contains(seen, bindCanary) {
			t.Errorf("the API answer holds the value")
		}
	}
	// The sandbox got the placeholder, never the value.
	w.exe.mu.Lock()
	box := w.exe.boxes[len(w.exe.boxes)-1]
	w.exe.mu.Unlock()
	env := strings.Join(box.start.Env, "\n")
	if !strings.Contains(env, "API_TOKEN="+secrets.PlaceholderPrefix) || strings.Contains(env, bindCanary) {
		t.Errorf("sandbox env: got %q, want API_TOKEN's placeholder and no value", env)
	}
	rec := w.audit.Wait(t, "create record", func(r audit.Record) bool {
		return r.Sandbox == sb.ID && audittest.HasReason(r, ReasonCreated)
	})
	if got := string(rec.Extra["secret_bindings"]); !strings.Contains(got, `"id":"api"`) || !strings.Contains(got, b.Fingerprint) ||
		strings.Contains(got, bindCanary) {
		t.Errorf("create record secret_bindings: got %s", got)
	}
	// Deleting the sandbox detaches: a new sandbox of the same owner without
	// the binding holds nothing.
	if r := c.json(t, "DELETE", "/v1/sandboxes/"+sb.ID, ""); r.status != http.StatusOK {
		t.Fatalf("delete: got %d %s", r.status, r.body)
	}
	if w.d.secrets.HoldsPlaceholders(secrets.Sandbox{ID: sb.ID}) {
		t.Errorf("binding still attached after delete")
	}
	// Root may attach the root-only binding.
	if sb := w.client(0).create(t, `{"secret_bindings":["ops"]}`); len(sb.SecretBindings) != 1 || sb.SecretBindings[0].ID != "ops" {
		t.Errorf("root: got %+v", sb.SecretBindings)
	}
}

// TestAWSCredentialsFilePlanted: a sandbox bound to AWS gets
// ~/.aws/credentials holding the same placeholders as its environment;
// other sandboxes get none.
func TestAWSCredentialsFilePlanted(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_BIND_SECRET", bindCanary)
	w := newFakeWorld(t)
	in, err := secrets.New(secrets.Config{
		Secrets: []secrets.SecretConfig{{ID: "aws", Env: "AIRLOCK_TEST_BIND_SECRET"}},
		Bindings: []secrets.BindingConfig{{ID: "s3", Secret: "aws", Host: "s3.eu-west-3.amazonaws.com", Mode: secrets.ModeRequire,
			AWS:    &secrets.AWSConfig{AccessKeyID: "AKIAIOSFODNN7EXAMPLE", Region: "eu-west-3", Service: "s3"},
			Attach: &secrets.AttachConfig{}}},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w.d.secrets = in
	c := w.client(0)
	lastStart := func() startSpec {
		w.exe.mu.Lock()
		defer w.exe.mu.Unlock()
		return w.exe.boxes[len(w.exe.boxes)-1].start
	}
	c.create(t, `{"secret_bindings":["s3"]}`)
	ss := lastStart()
	file := string(ss.HomeFiles[secrets.AWSCredentialsFile])
	env := map[string]string{}
	for _, kv := range ss.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	id, key := env[secrets.EnvAWSAccessKeyID], env[secrets.EnvAWSSecretAccessKey]
	if id == "" || key == "" || !strings.Contains(file, "aws_access_key_id = "+id) || !strings.Contains(file, "aws_secret_access_key = "+key) {
		t.Errorf("~/.aws/credentials: got %q, want the environment's placeholders %q, %q", file, id, key)
	}
	if strings.Contains(file, bindCanary) {
		t.Errorf("~/.aws/credentials holds the value")
	}
	c.create(t, `{}`)
	if _, ok := lastStart().HomeFiles[secrets.AWSCredentialsFile]; ok {
		t.Errorf("a sandbox without an AWS binding got ~/.aws/credentials")
	}
}

// TestRunSecretBindings: POST /v1/run attaches bindings by the create rule:
// the run's sandbox gets the placeholder (never the value), the answer
// names the binding with its fingerprint, the binding is detached when the
// run's sandbox is deleted; a binding the caller may not attach refuses the
// run before a sandbox is built.
func TestRunSecretBindings(t *testing.T) {
	w := bindWorld(t)
	before := w.exe.created.Load()
	r := w.client(1001).json(t, "POST", "/v1/run", `{"argv":["true"],"secret_bindings":["api"]}`)
	if e := r.apiError(t); r.status != http.StatusForbidden || e.Code != api.CodeForbidden || e.Field != "secret_bindings" {
		t.Fatalf("another's binding: got %d %s, want 403 forbidden on secret_bindings", r.status, r.body)
	}
	if got := w.exe.created.Load(); got != before {
		t.Errorf("executor sandboxes: got %d, want %d (none built)", got, before)
	}

	r = w.client(1000).json(t, "POST", "/v1/run", `{"argv":["true"],"secret_bindings":["api"]}`)
	if r.status != http.StatusOK || strings.Contains(string(r.body), bindCanary) {
		t.Fatalf("got %d %s, want 200 without the value", r.status, r.body)
	}
	var res api.RunResponse
	r.decode(t, &res)
	if len(res.SecretBindings) != 1 || res.SecretBindings[0].ID != "api" || !strings.HasPrefix(res.SecretBindings[0].Fingerprint, "hmac-sha256:") {
		t.Errorf("secret_bindings: got %+v, want api with its fingerprint", res.SecretBindings)
	}
	w.exe.mu.Lock()
	box := w.exe.boxes[len(w.exe.boxes)-1]
	w.exe.mu.Unlock()
	env := strings.Join(box.start.Env, "\n")
	if !strings.Contains(env, "API_TOKEN="+secrets.PlaceholderPrefix) || strings.Contains(env, bindCanary) {
		t.Errorf("sandbox env: got %q, want API_TOKEN's placeholder and no value", env)
	}
	if w.d.secrets.HoldsPlaceholders(secrets.Sandbox{ID: res.ID}) {
		t.Error("binding still attached after the run's sandbox was deleted")
	}
}
