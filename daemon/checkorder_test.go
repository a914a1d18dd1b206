package daemon

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/api"
)

// TestLimitUnderOneUnitRefused pins a check skipped by parsing: a limit
// written as not zero but under one byte or one nanosecond ("0.5",
// "0.4ns") parsed to 0, which every limit reads as "the daemon's default",
// so the range check (run only on a non-zero value) never saw it and the
// sandbox got the default. Now the parser refuses it, naming the field.
func TestLimitUnderOneUnitRefused(t *testing.T) {
	tests := []struct {
		name, body, field string
	}{
		{"memory under a byte", `{"limits": {"memory": "0.5"}}`, "limits.memory"},
		{"tmp_size under a byte", `{"limits": {"tmp_size": "0.9"}}`, "limits.tmp_size"},
		{"memory with a fraction of a byte", `{"limits": {"memory": "4194304.5"}}`, "limits.memory"},
		{"exec_timeout under a nanosecond", `{"limits": {"exec_timeout": "0.4ns"}}`, "limits.exec_timeout"},
		{"idle_timeout under a nanosecond", `{"idle_timeout": "0.9ns"}`, "idle_timeout"},
		{"max_lifetime under a nanosecond", `{"max_lifetime": "0.5ns"}`, "max_lifetime"},
	}
	w := newFakeWorld(t)
	a := w.client(alice)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := a.json(t, "POST", "/v1/sandboxes", tt.body)
			if r.status == http.StatusCreated {
				var sb api.Sandbox
				r.decode(t, &sb)
				defer a.json(t, "DELETE", "/v1/sandboxes/"+sb.ID, "")
			}
			if e := r.apiError(t); r.status != http.StatusBadRequest || e.Field != tt.field {
				t.Fatalf("%s: got %d %s, want 400 naming %s", tt.body, r.status, r.body, tt.field)
			}
		})
	}
	if n := w.exe.prepared.Load(); n != 0 {
		t.Fatalf("%d sandboxes prepared for refused limits, want 0", n)
	}
}

// TestCreateBodyKeysChecked: a body that names a field twice, or in another
// case, cannot carry a value past the check that is not the value the
// daemon uses: duplicate keys decode once (the last), and that value is the
// one checked; a key in another case is an unknown field, never folded onto
// the real one (encoding/json's own matching would fold "ALLOW" onto
// "allow").
func TestCreateBodyKeysChecked(t *testing.T) {
	tests := []struct {
		name, body string
		status     int
		field      string
	}{
		{"allow twice", `{"allow": ["pypi.org"], "allow": ["**.com:*"]}`, http.StatusForbidden, "allow[0]"},
		{"allow twice, the other order", `{"allow": ["**.com:*"], "allow": ["pypi.org"], "mode": "report"}`, http.StatusForbidden, "mode"},
		{"mode twice", `{"mode": "enforce", "mode": "report"}`, http.StatusForbidden, "mode"},
		{"allow in capitals", `{"allow": ["pypi.org"], "ALLOW": ["**.com:*"]}`, http.StatusBadRequest, "ALLOW"},
		{"mode in capitals", `{"Mode": "report"}`, http.StatusBadRequest, "Mode"},
		{"a mode value in capitals", `{"mode": "REPORT"}`, http.StatusBadRequest, "mode"},
		{"a limit in capitals", `{"limits": {"Memory": "64G"}}`, http.StatusBadRequest, "limits.Memory"},
	}
	w := newFakeWorld(t)
	a := w.client(alice)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := a.json(t, "POST", "/v1/sandboxes", tt.body)
			if e := r.apiError(t); r.status != tt.status || e.Field != tt.field {
				t.Fatalf("%s: got %d %s, want %d naming %s", tt.body, r.status, r.body, tt.status, tt.field)
			}
		})
	}
	if n := w.exe.prepared.Load(); n != 0 {
		t.Fatalf("%d sandboxes prepared for refused bodies, want 0", n)
	}
}

// TestIdentifiersKeptAsChecked: names that look like others (a Cyrillic
// letter, an invisible character) are either refused where a syntax
// applies (an attached sandbox's id, a pod's fields, an env name) or kept
// byte for byte, never normalized after the check onto the name they
// imitate: a label key "team<soft hyphen>" is not "team" to a list filter,
// and an id with a lookalike letter finds no sandbox.
func TestIdentifiersKeptAsChecked(t *testing.T) {
	w := newFakeWorld(t)
	a, root := w.client(alice), w.client(0)
	refused := []struct {
		name   string
		c      *apiClient
		path   string
		body   any
		status int
		field  string
	}{
		{"attach id with a Cyrillic a", root, "/v1/attach", api.AttachRequest{ID: "alk-\u0430bc", NetNS: "/var/run/netns/alk-x"}, http.StatusBadRequest, "id"},
		{"attach id with a soft hyphen", root, "/v1/attach", api.AttachRequest{ID: "alk-ab\u00adc", NetNS: "/var/run/netns/alk-x"}, http.StatusBadRequest, "id"},
		{"attach id with a fullwidth letter", root, "/v1/attach", api.AttachRequest{ID: "alk-\uff41bc", NetNS: "/var/run/netns/alk-x"}, http.StatusBadRequest, "id"},
		{"pod namespace with a zero-width space", root, "/v1/attach", api.AttachRequest{ID: "alk-pod", NetNS: "/var/run/netns/alk-x",
			Pod: &api.Pod{Namespace: "prod\u200b"}}, http.StatusBadRequest, "pod.namespace"},
		{"pod namespace in capitals", root, "/v1/attach", api.AttachRequest{ID: "alk-pod", NetNS: "/var/run/netns/alk-x",
			Pod: &api.Pod{Namespace: "PROD"}}, http.StatusBadRequest, "pod.namespace"},
		{"env without a name", a, "/v1/sandboxes", api.CreateSandboxRequest{Env: []string{"=PATH=/evil"}}, http.StatusBadRequest, "env[0]"},
		{"env name with a NUL", a, "/v1/sandboxes", api.CreateSandboxRequest{Env: []string{"LD_\x00PRELOAD=/x"}}, http.StatusBadRequest, "env[0]"},
		{"label name with '='", a, "/v1/sandboxes", api.CreateSandboxRequest{Labels: map[string]string{"team=admins": "x"}}, http.StatusBadRequest, "labels"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.body)
			if err != nil {
				t.Fatal(err)
			}
			r := tt.c.json(t, "POST", tt.path, string(b))
			if e := r.apiError(t); r.status != tt.status || e.Field != tt.field {
				t.Fatalf("%s: got %d %s, want %d naming %s", b, r.status, r.body, tt.status, tt.field)
			}
		})
	}
	if n := w.exe.prepared.Load(); n != 0 {
		t.Fatalf("%d sandboxes prepared for refused requests, want 0", n)
	}
	// Kept byte for byte: what was checked is what is stored and matched.
	key := "team\u00ad"
	b, _ := json.Marshal(api.CreateSandboxRequest{Labels: map[string]string{key: "admins"}})
	sb := a.create(t, string(b))
	if v, ok := sb.Labels[key]; !ok || v != "admins" || len(sb.Labels) != 1 {
		t.Fatalf("labels: got %q, want exactly {%q: admins}", sb.Labels, key)
	}
	var list []api.Sandbox
	a.json(t, "GET", "/v1/sandboxes?label="+url.QueryEscape("team=admins"), "").decode(t, &list)
	if len(list) != 0 {
		t.Fatalf("label filter team=admins matched %d sandboxes labelled %q, want 0", len(list), key)
	}
	look := strings.Replace(sb.ID, "b", "\u0432", 1)
	if look == sb.ID {
		look = "\u0455" + sb.ID[1:] // a Cyrillic s
	}
	if r := a.json(t, "GET", "/v1/sandboxes/"+url.PathEscape(look), ""); r.status != http.StatusNotFound {
		t.Fatalf("GET of %+q (a lookalike of %s): got %d, want 404", look, sb.ID, r.status)
	}
}
