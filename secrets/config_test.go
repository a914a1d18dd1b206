package secrets

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadExampleFile(t *testing.T) {
	cfg, err := LoadFile("testdata/example.yaml")
	if err != nil {
		t.Fatalf("LoadFile: %v", err)
	}
	if len(cfg.Secrets) != 3 || len(cfg.Bindings) != 5 {
		t.Fatalf("got %d secrets and %d bindings, want 3 and 5", len(cfg.Secrets), len(cfg.Bindings))
	}
	if cfg.Secrets[0].TTL.String() != "5m0s" || cfg.Bindings[0].Port != DefaultPort || cfg.Bindings[1].Header != DefaultHeader {
		t.Errorf("defaults not applied: %+v", cfg)
	}
	if b := cfg.Bindings[4]; b.ID != "github-uploads" || b.Attach == nil || len(b.Attach.UIDs) != 2 {
		t.Errorf("the attachable binding: got %+v", b)
	}
	if _, err := New(cfg, testLogger(t)); err != nil {
		t.Fatalf("New: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	base := func(binding string) string {
		return "secrets:\n  - id: tok\n    env: TOK\nbindings:\n  - secret: tok\n    sandboxes: {ids: [sb-1]}\n" + binding
	}
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown top field", "secret: []\n", "field secret not found"},
		{"unknown secret field", "secrets:\n  - id: a\n    env: A\n    valu: x\n", "field valu not found"},
		{"unknown binding field", base("    host: a.example\n    template: 'Bearer {{value}}'\n    hots: x\n"), "field hots not found"},
		{"empty file", "", "empty secrets file"},
		{"two documents", "secrets: []\n---\nsecrets: []\n", "more than one YAML document"},
		{"duplicate id", "secrets:\n  - id: a\n    env: A\n  - id: a\n    env: B\n", `duplicate id "a"`},
		{"bad id", "secrets:\n  - id: 'a b'\n    env: A\n", `secrets[0].id: "a b"`},
		{"no source", "secrets:\n  - id: a\n", "exactly one of env, file, command (got 0)"},
		{"two sources", "secrets:\n  - id: a\n    env: A\n    file: /x\n", "exactly one of env, file, command (got 2)"},
		{"ttl on env", "secrets:\n  - id: a\n    env: A\n    ttl: 5m\n", "command sources only"},
		{"bad env name", "secrets:\n  - id: a\n    env: 'A-B'\n", `env: "A-B"`},
		{"negative timeout", "secrets:\n  - id: a\n    command: [x]\n    timeout: -1s\n", "must be positive"},
		{"unknown secret", "secrets: []\nbindings:\n  - secret: nope\n    sandboxes: {ids: [a]}\n    host: a.example\n    template: 'Bearer {{value}}'\n", `"nope" is not a defined secret id`},
		{"no sandboxes", "secrets:\n  - id: tok\n    env: TOK\nbindings:\n  - secret: tok\n    host: a.example\n    template: 'Bearer {{value}}'\n", "sandboxes: set ids or labels"},
		{"http destination", base("    host: http://a.example\n    template: 'Bearer {{value}}'\n"), "only https destinations"},
		{"url with path", base("    host: https://a.example/x\n    template: 'Bearer {{value}}'\n"), "not a URL with a path"},
		{"bad host", base("    host: 'a..example'\n    template: 'Bearer {{value}}'\n"), "host:"},
		{"bad wildcard", base("    host: 'a.*.example'\n    template: 'Bearer {{value}}'\n"), "host:"},
		{"bad port", base("    host: a.example\n    port: 70000\n    template: 'Bearer {{value}}'\n"), "port: 70000"},
		{"template without value", base("    host: a.example\n    template: 'Bearer xyz'\n"), "must contain {{value}} exactly once"},
		{"template twice", base("    host: a.example\n    template: '{{value}}{{value}}'\n"), "exactly once"},
		{"template other marker", base("    host: a.example\n    template: '{{value}} {{env}}'\n"), "marker other than"},
		{"template newline", base("    host: a.example\n    template: \"Bearer {{value}}\\r\\nX: y\"\n"), "control character"},
		{"no template", base("    host: a.example\n"), "template: set a template"},
		{"template and basic", base("    host: a.example\n    template: 'Bearer {{value}}'\n    basic_user: u\n"), "set only one"},
		{"basic user colon", base("    host: a.example\n    basic_user: 'a:b'\n"), "basic_user"},
		{"bad mode", base("    host: a.example\n    template: 'Bearer {{value}}'\n    mode: always\n"), `mode: "always" is not one of default, placeholder, require`},
		{"placeholder without env", base("    host: a.example\n    template: 'Bearer {{value}}'\n    mode: placeholder\n"), "placeholder_env"},
		{"env in default mode", base("    host: a.example\n    template: 'Bearer {{value}}'\n    placeholder_env: X\n"), "only placeholder and require"},
		{"bad header", base("    host: a.example\n    template: 'Bearer {{value}}'\n    header: 'Bad Header'\n"), `header: "Bad Header"`},
		{"host header", base("    host: a.example\n    template: 'Bearer {{value}}'\n    header: Host\n"), `header: "Host"`},
		{"strip framing", base("    host: a.example\n    template: 'Bearer {{value}}'\n    strip: [Content-Length]\n"), `strip: "Content-Length"`},
		{"lower method", base("    host: a.example\n    template: 'Bearer {{value}}'\n    methods: [get]\n"), `methods: "get"`},
		{"relative path", base("    host: a.example\n    template: 'Bearer {{value}}'\n    paths: [repos]\n"), "must start with /"},
		{"dotted path", base("    host: a.example\n    template: 'Bearer {{value}}'\n    paths: [/a/../b]\n"), "dot segment"},
		{"negative body cap", "max_body_scan: -1\n", "max_body_scan"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestLoadFileNamesPath(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(p, []byte("nope: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadFile(p)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "nope") {
		t.Errorf("got %v, want an error naming %s and the field", err, p)
	}
}

func TestCleanPath(t *testing.T) {
	tests := []struct {
		name, in, want string
		ok             bool
	}{
		{"root", "/", "/", true},
		{"empty", "", "/", true},
		{"plain", "/repos/acme/x", "/repos/acme/x", true},
		{"trailing slash", "/repos/", "/repos/", true},
		{"encoded space", "/a%20b", "/a b", true},
		{"dotdot", "/repos/../admin", "", false},
		{"dot", "/repos/./x", "", false},
		{"trailing dotdot", "/repos/..", "", false},
		{"encoded dot lower", "/repos/%2e%2e/admin", "", false},
		{"encoded dot upper", "/repos/%2E%2E/admin", "", false},
		{"half encoded dot", "/repos/.%2e/admin", "", false},
		{"encoded slash", "/repos%2f..%2fadmin", "", false},
		{"encoded slash upper", "/repos%2Fadmin", "", false},
		{"backslash", "/repos\\..\\admin", "", false},
		{"encoded backslash", "/repos%5c..%5cadmin", "", false},
		{"double slash", "/repos//admin", "", false},
		{"leading double slash", "//evil.example/x", "", false},
		{"double encoding", "/repos/%252e%252e/admin", "", false},
		{"nul", "/repos%00/x", "", false},
		{"semicolon", "/repos;/../admin", "", false},
		{"encoded semicolon", "/repos%3b/x", "", false},
		{"control", "/repos/%0a", "", false},
		{"bad escape", "/repos/%zz", "", false},
		{"invalid utf8", "/repos/%ff", "", false},
		{"relative", "repos", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := cleanPath(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("cleanPath(%q) = %q, %v; want %q, ok=%v", tt.in, got, err, tt.want, tt.ok)
			}
		})
	}
}

func TestPathHasPrefix(t *testing.T) {
	tests := []struct {
		p, prefix string
		want      bool
	}{
		{"/repos", "/repos", true},
		{"/repos/x", "/repos", true},
		{"/reposx", "/repos", false},
		{"/repos/x", "/repos/", true},
		{"/repos", "/repos/", false},
		{"/anything", "/", true},
	}
	for _, tt := range tests {
		if got := pathHasPrefix(tt.p, tt.prefix); got != tt.want {
			t.Errorf("pathHasPrefix(%q, %q): got %v, want %v", tt.p, tt.prefix, got, tt.want)
		}
	}
}
