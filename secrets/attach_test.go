package secrets

import (
	"errors"
	"strings"
	"testing"
)

// attachSetup binds the canary as an attachable binding "api" granted to uid
// 1000 only, plus "ops" (root only); no selector matches any sandbox.
func attachSetup(t *testing.T) (*Injector, int) {
	t.Helper()
	in, u, _ := setup(t, func(c *Config) {
		b := c.Bindings[0]
		b.ID, b.Sandboxes = "api", SandboxSelector{}
		b.Attach = &AttachConfig{UIDs: []int{1000}}
		b.Mode, b.PlaceholderEnv = ModeRequire, "API_TOKEN"
		ops := b
		ops.ID, ops.Attach, ops.Host, ops.PlaceholderEnv = "ops", &AttachConfig{}, "ops.example.com", "OPS_TOKEN"
		c.Bindings = []BindingConfig{b, ops}
	})
	return in, u.Port
}

func TestAttachRefusals(t *testing.T) {
	in, _ := attachSetup(t)
	for _, tc := range []struct {
		name      string
		uid       int
		ids       []string
		forbidden bool
		refused   string
	}{
		{name: "not granted", uid: 1001, ids: []string{"api"}, forbidden: true, refused: "api"},
		{name: "root only", uid: 1000, ids: []string{"api", "ops"}, forbidden: true, refused: "ops"},
		{name: "unknown id", uid: 0, ids: []string{"nope"}, refused: "nope"},
		{name: "a secret id is not a binding id", uid: 0, ids: []string{"canary"}, refused: "canary"},
		{name: "a file path is not a binding id", uid: 1000, ids: []string{"/etc/shadow"}, refused: "/etc/shadow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := in.Attach("sb-x", tc.uid, tc.ids)
			var ae *AttachError
			if !errors.As(err, &ae) || ae.Binding != tc.refused || ae.Forbidden != tc.forbidden {
				t.Fatalf("got %v, want an AttachError for %q (forbidden %v)", err, tc.refused, tc.forbidden)
			}
			// All or nothing: a refused request attaches nothing.
			if ph, _ := in.Placeholders(Sandbox{ID: "sb-x"}); len(ph) != 0 {
				t.Errorf("placeholders after a refused attach: got %v, want none", ph)
			}
			if in.HoldsPlaceholders(Sandbox{ID: "sb-x"}) {
				t.Errorf("sandbox holds placeholders after a refused attach")
			}
		})
	}
	if _, err := in.Attach("sb-x", 1000, []string{"api", "api"}); err == nil {
		t.Errorf("a binding named twice: got nil, want an error")
	}
}

func TestAttachedBindingInjects(t *testing.T) {
	in, port := attachSetup(t)
	sb := Sandbox{ID: "sb-a", Labels: map[string]string{"agent": "coder"}}
	got, err := in.Attach(sb.ID, 1000, []string{"api"})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if len(got) != 1 || got[0].ID != "api" || got[0].Secret != "canary" || got[0].Host != "api.example.com" ||
		got[0].Port != port || got[0].Mode != ModeRequire || !strings.HasPrefix(got[0].Fingerprint, "hmac-sha256:") {
		t.Fatalf("Attach: got %+v", got)
	}
	assertNoForms(t, "attach answer", got[0].String()+got[0].Fingerprint, canary)
	ph, err := in.Placeholders(sb)
	if err != nil || len(ph) != 1 || ph["API_TOKEN"] == "" {
		t.Fatalf("Placeholders: got %v, %v; want API_TOKEN only", ph, err)
	}
	if _, err := in.Attach(sb.ID, 0, []string{"ops"}); err == nil {
		t.Errorf("a second Attach for one sandbox: got nil, want an error")
	}
	// Another sandbox with the same labels gets nothing: attachment is by id.
	if ph2, _ := in.Placeholders(Sandbox{ID: "sb-b", Labels: sb.Labels}); len(ph2) != 0 {
		t.Errorf("unattached sandbox got %v", ph2)
	}
	in.Forget(sb.ID)
	if in.HoldsPlaceholders(Sandbox{ID: sb.ID}) {
		t.Errorf("Forget did not detach")
	}
}

func TestAttachConfigValidation(t *testing.T) {
	base := func() Config {
		return Config{Secrets: []SecretConfig{{ID: "s", Env: "X"}}, Bindings: []BindingConfig{{
			ID: "b", Secret: "s", Host: "api.example.com", Template: "Bearer {{value}}", Attach: &AttachConfig{UIDs: []int{1000}},
		}}}
	}
	for _, tc := range []struct {
		name string
		mut  func(c *Config)
		want string
	}{
		{"attach without id", func(c *Config) { c.Bindings[0].ID = "" }, "attach: the binding needs an id"},
		{"bad id", func(c *Config) { c.Bindings[0].ID = "../x" }, `id: "../x"`},
		{"negative uid", func(c *Config) { c.Bindings[0].Attach.UIDs = []int{-1} }, "attach.uids: -1"},
		{"id twice", func(c *Config) { c.Bindings = append(c.Bindings, c.Bindings[0]) }, `id: "b" is used twice`},
		{"no selector, no attach", func(c *Config) { c.Bindings[0].Attach = nil }, "sandboxes: set ids or labels, or attach"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.mut(&c)
			c.applyDefaults()
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	c := base()
	c.applyDefaults()
	if err := c.Validate(); err != nil {
		t.Errorf("valid attach binding: %v", err)
	}
}
