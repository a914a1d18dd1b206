package daemon

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/secrets"
)

// TestPlaceholderInDNSNameRefused: the DNS filter's name check the daemon
// builds refuses a question that carries the sandbox's placeholder (or any
// other sandbox's), with the secrets package's code and flag, and passes a
// clean name. Before it, no DNS question was checked for placeholders.
func TestPlaceholderInDNSNameRefused(t *testing.T) {
	t.Setenv("ALK_TEST_KEY", "sk-test-value-123456")
	cfg, err := secrets.Parse([]byte(`secrets:
  - id: api
    env: ALK_TEST_KEY
bindings:
  - secret: api
    sandboxes: {ids: [sb-1]}
    host: api.example
    template: "Bearer {{value}}"
    mode: placeholder
    placeholder_env: API_KEY
`))
	if err != nil {
		t.Fatal(err)
	}
	inj, err := secrets.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	sb := policy.Sandbox{ID: "sb-1"}
	ph, err := inj.Placeholders(secrets.Sandbox{ID: sb.ID, Labels: sb.Labels})
	if err != nil || ph["API_KEY"] == "" {
		t.Fatalf("placeholders: got %v, %v", ph, err)
	}
	d := &Daemon{secrets: inj}
	check := d.placeholderInName()
	if check == nil {
		t.Fatal("no name check with secrets configured")
	}
	name := strings.ToLower(ph["API_KEY"]) + ".pypi.org"
	reason, flag, refused := check(sb, name)
	if !refused || reason != secrets.CodePlaceholderMisuse || flag == "" {
		t.Fatalf("placeholder in a name: got %q %q %v, want refused with %s and a flag", reason, flag, refused, secrets.CodePlaceholderMisuse)
	}
	if _, _, refused := check(policy.Sandbox{ID: "sb-2"}, name); !refused {
		t.Fatal("another sandbox's placeholder in a name: not refused")
	}
	if _, _, refused := check(sb, "pypi.org"); refused {
		t.Fatal("a clean name was refused")
	}
	if (&Daemon{}).placeholderInName() != nil {
		t.Fatal("a name check without secrets")
	}
}
