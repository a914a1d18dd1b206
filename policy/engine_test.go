package policy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeFiles creates dir/rel for each entry.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for rel, src := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// newEngine builds an engine closed when t ends. A zero EvalTimeout becomes
// 10s: the default 100ms is a production bound that a -race run on a loaded
// 2-core machine can pass (a fail-closed deny where the test wants a
// decision); tests of the deadline set their own.
func newEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	if cfg.EvalTimeout == 0 {
		cfg.EvalTimeout = 10 * time.Second
	}
	e, err := New(cfg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func httpIn(method, host, path string) *Input {
	return &Input{
		Kind:        KindHTTP,
		Sandbox:     Sandbox{ID: "sb-1"},
		Destination: Destination{Host: host, Port: 443},
		HTTP:        &HTTP{Method: method, Scheme: "https", Path: path},
	}
}

func kindIn(kind Kind, host string) *Input {
	return &Input{Kind: kind, Sandbox: Sandbox{ID: "sb-1"}, Destination: Destination{Host: host, Port: 443}}
}

func reasonIDs(d Decision) string {
	ids := make([]string, len(d.Reasons))
	for i, r := range d.Reasons {
		ids[i] = r.ID
	}
	return strings.Join(ids, ",")
}

func TestDecideDefaultPolicy(t *testing.T) {
	all := newEngine(t, Config{AllowHosts: []string{"API.Example.com.", "**.corp.example", "203.0.113.7"}})
	python := newEngine(t, Config{Presets: []string{"python"}})
	none := newEngine(t, Config{Presets: []string{PresetNone}})
	tests := []struct {
		name    string
		e       *Engine
		in      *Input
		allowed bool
		mitm    bool
		reasons string
	}{
		{"registry GET", all, httpIn("GET", "pypi.org", "/simple/x/"), true, false, ""},
		{"registry HEAD", all, httpIn("HEAD", "registry.npmjs.org", "/x"), true, false, ""},
		{"registry POST denied", all, httpIn("POST", "pypi.org", "/legacy/"), false, false, "default_deny"},
		{"git fetch", all, httpIn("POST", "github.com", "/o/r.git/git-upload-pack"), true, false, ""},
		{"git push denied", all, httpIn("POST", "github.com", "/o/r.git/git-receive-pack"), false, false, "default_deny"},
		{"registry connect intercepted", all, kindIn(KindConnect, "proxy.golang.org"), true, true, ""},
		{"registry dns", all, kindIn(KindDNS, "static.crates.io"), true, false, ""},
		{"ubuntu mirror wildcard", all, kindIn(KindTLS, "de.archive.ubuntu.com"), true, true, ""},
		{"tcp to IP denied", all, kindIn(KindTCP, "198.51.100.1"), false, false, "default_deny"},
		{"unknown host denied", all, kindIn(KindConnect, "evil.example"), false, false, "default_deny"},
		{"lookalike denied", all, kindIn(KindDNS, "pypi.org.evil.example"), false, false, "default_deny"},
		{"allow host any method", all, httpIn("DELETE", "api.example.com", "/x"), true, false, ""},
		{"allow wildcard deep", all, kindIn(KindConnect, "a.b.corp.example"), true, false, ""},
		{"allow wildcard not apex", all, kindIn(KindConnect, "corp.example"), false, false, "default_deny"},
		{"allow IP tcp", all, kindIn(KindTCP, "203.0.113.7"), true, false, ""},
		{"python preset only: pypi", python, httpIn("GET", "pypi.org", "/"), true, false, ""},
		{"python preset only: npm denied", python, httpIn("GET", "registry.npmjs.org", "/"), false, false, "default_deny"},
		{"no presets", none, httpIn("GET", "pypi.org", "/"), false, false, "default_deny"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.e.Decide(context.Background(), tc.in)
			if d.Err != nil {
				t.Fatalf("got error %v", d.Err)
			}
			if d.Allowed != tc.allowed || d.MITM != tc.mitm || reasonIDs(d) != tc.reasons {
				t.Fatalf("got allowed=%v mitm=%v reasons=%q, want %v %v %q (%+v)", d.Allowed, d.MITM, reasonIDs(d), tc.allowed, tc.mitm, tc.reasons, d)
			}
			if d.Mode != ModeEnforce || d.Rev != tc.e.Rev() || d.Rev == "" {
				t.Fatalf("got mode %q rev %q, want enforce and %q", d.Mode, d.Rev, tc.e.Rev())
			}
			wantStatus := 403
			if tc.allowed {
				wantStatus = 0
			}
			if d.HTTPStatus != wantStatus {
				t.Fatalf("got http_status %d, want %d", d.HTTPStatus, wantStatus)
			}
		})
	}
	if all.Rev() == python.Rev() || python.Rev() == none.Rev() {
		t.Fatalf("revisions must differ with the configuration: %s %s %s", all.Rev(), python.Rev(), none.Rev())
	}
}

func TestDecideDoesNotModifyInput(t *testing.T) {
	e := newEngine(t, Config{})
	in := httpIn("GET", "pypi.org", "/")
	e.Decide(context.Background(), in)
	if in.Destination.Suffixes != nil || in.Attributes != nil {
		t.Fatalf("got input modified: %+v", in)
	}
}

// A user policy that reads the fields the engine fills proves they are filled.
func TestDecideFillsSuffixesAndAttributes(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"p.rego": `package airlock.egress

allow if {
	input.destination.suffixes[1] == "example.com"
	input.attributes.request.http.path == "/a?x=1&y=2"
	input.attributes.request.http.host == "w.example.com:8443"
	input.attributes.request.http.headers["x-k"] == "v"
}
`})
	e := newEngine(t, Config{Dir: dir})
	in := &Input{
		Kind:        KindHTTP,
		Sandbox:     Sandbox{ID: "sb-1"},
		Destination: Destination{Host: "w.example.com", Port: 8443},
		HTTP:        &HTTP{Method: "GET", Scheme: "https", Path: "/a", Query: map[string][]string{"y": {"2"}, "x": {"1"}}, Headers: map[string]string{"x-k": "v"}},
	}
	if d := e.Decide(context.Background(), in); !d.Allowed {
		t.Fatalf("got %+v, want allowed", d)
	}
}

func TestModes(t *testing.T) {
	report := newEngine(t, Config{Mode: ModeReport})
	d := report.Decide(context.Background(), httpIn("GET", "evil.example", "/"))
	if d.Allowed || d.Mode != ModeReport || !d.Permit() {
		t.Fatalf("global report: got %+v permit=%v, want denied, report, permitted", d, d.Permit())
	}
	ex := newEngine(t, Config{Dir: filepath.Join("..", "policies", "examples", "report-one-sandbox")})
	in := httpIn("GET", "evil.example", "/")
	in.Sandbox.ID = "sb-trial"
	if d := ex.Decide(context.Background(), in); d.Allowed || d.Mode != ModeReport || !d.Permit() {
		t.Fatalf("trial sandbox: got %+v, want denied in report mode", d)
	}
	if d := ex.Decide(context.Background(), httpIn("GET", "evil.example", "/")); d.Mode != ModeEnforce || d.Permit() {
		t.Fatalf("other sandbox: got %+v, want enforced deny", d)
	}
	// enforce from policy wins over global report.
	exReport := newEngine(t, Config{Mode: ModeReport, Dir: filepath.Join("..", "policies", "examples", "report-one-sandbox")})
	in = httpIn("GET", "evil.example", "/")
	in.Sandbox.Labels = map[string]string{"airlock.mode": "enforce"}
	if d := exReport.Decide(context.Background(), in); d.Mode != ModeEnforce || d.Permit() {
		t.Fatalf("enforce label under global report: got %+v, want enforced deny", d)
	}
}

// TestPodNamespaceExample decides with the engine (the OPA value built from
// Sandbox.Pod, and the decision cache keyed on it) what the pod-namespaces
// example's Rego tests decide from JSON: a pod reaches its namespace's hosts
// only, and a sandbox with no pod gets none of them.
func TestPodNamespaceExample(t *testing.T) {
	e := newEngine(t, Config{Dir: filepath.Join("..", "policies", "examples", "pod-namespaces")})
	pod := func(ns string) *Input {
		in := httpIn("GET", "ghcr.io", "/")
		in.Sandbox = Sandbox{ID: "alk-pod-1", Pod: &Pod{Namespace: ns, Name: "build-1", UID: "u-1", ServiceAccount: "builder"}}
		return in
	}
	tests := []struct {
		name string
		in   *Input
		want bool
	}{
		{"its namespace", pod("ci"), true},
		{"another namespace", pod("sandbox"), false},
		{"its namespace again (cached)", pod("ci"), true},
		{"no pod", httpIn("GET", "ghcr.io", "/"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if d := e.Decide(context.Background(), tc.in); d.Allowed != tc.want {
				t.Fatalf("got allowed=%v (%+v), want %v", d.Allowed, d, tc.want)
			}
		})
	}
}

// overlayLib replaces the library so a test can load a deliberately broken
// decision and watch Decide fail closed. The other files check what a unit
// ignores: examples/, hidden entries, non-policy files.
func overlayLib(t *testing.T, lib string) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"lib/airlock.rego":            lib,
		"examples/ignored/x.rego":     "this is not rego and is never loaded",
		".hidden/also-ignored.rego":   "neither is this",
		"notes/README.md":             "ignored",
		"notes/not-data.json":         "{not json either",
		"notes/data-but-ignored.yaml": ": also ignored",
	})
	return dir
}

func TestFailClosed(t *testing.T) {
	tests := []struct {
		name    string
		lib     string
		timeout time.Duration
		want    string
	}{
		{"undefined decision", "package airlock\n\ndecision := 1 if false\n", 0, "undefined"},
		{"decision not an object", "package airlock\n\ndecision := \"allow\"\n", 0, "want an object"},
		{"allowed wrong type", "package airlock\n\ndecision := {\"allowed\": \"yes\", \"reasons\": [], \"mitm\": false, \"http_status\": 0}\n", 0, "decision.allowed"},
		{"reasons wrong type", "package airlock\n\ndecision := {\"allowed\": false, \"reasons\": \"no\", \"mitm\": false, \"http_status\": 403}\n", 0, "decision.reasons"},
		{"reason without id", "package airlock\n\ndecision := {\"allowed\": false, \"reasons\": [{\"msg\": \"x\"}], \"mitm\": false, \"http_status\": 403}\n", 0, "reasons[0]"},
		{"status not integer", "package airlock\n\ndecision := {\"allowed\": true, \"reasons\": [], \"mitm\": false, \"http_status\": 1.5}\n", 0, "http_status"},
		{"missing key", "package airlock\n\ndecision := {\"allowed\": true, \"reasons\": []}\n", 0, "lacks"},
		{"unknown key", "package airlock\n\ndecision := {\"allowed\": true, \"reasons\": [], \"mitm\": false, \"http_status\": 0, \"extra\": 1}\n", 0, "unknown key"},
		{"bad mode", "package airlock\n\ndecision := {\"allowed\": true, \"reasons\": [], \"mitm\": false, \"http_status\": 0, \"mode\": \"off\"}\n", 0, "decision.mode"},
		{"passthrough wrong type", "package airlock\n\ndecision := {\"allowed\": true, \"reasons\": [], \"mitm\": false, \"passthrough\": 1, \"http_status\": 0}\n", 0, "decision.passthrough"},
		{"passthrough with mitm", "package airlock\n\ndecision := {\"allowed\": true, \"reasons\": [], \"mitm\": true, \"passthrough\": true, \"http_status\": 0}\n", 0, "both mitm and passthrough"},
		{"deny without reason", "package airlock\n\ndecision := {\"allowed\": false, \"reasons\": [], \"mitm\": false, \"http_status\": 403}\n", 0, "without a reason"},
		{"eval error: conflict", "package airlock\n\ndecision := {\"allowed\": true} if input.kind == \"http\"\n\ndecision := {\"allowed\": false} if input.destination.port == 443\n", 0, "conflict"},
		{"deadline", `package airlock

slow if {
	some i in numbers.range(1, 20000)
	some j in numbers.range(1, 20000)
	i * j == -1
}

decision := {"allowed": true, "reasons": [], "mitm": false, "http_status": 0} if not slow
`, 20 * time.Millisecond, "deadline"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, mode := range []Mode{ModeEnforce, ModeReport} {
				e := newEngine(t, Config{Dir: overlayLib(t, tc.lib), EvalTimeout: tc.timeout, Mode: mode})
				d := e.Decide(context.Background(), httpIn("GET", "pypi.org", "/"))
				if d.Allowed || d.Permit() || d.Err == nil || !errors.Is(d.Err, ErrPolicy) {
					t.Fatalf("mode %s: got %+v permit=%v, want a fail-closed deny", mode, d, d.Permit())
				}
				if reasonIDs(d) != ReasonPolicyError || d.HTTPStatus != 403 || d.Rev != e.Rev() {
					t.Fatalf("got reasons %q status %d rev %q, want policy_error 403 %q", reasonIDs(d), d.HTTPStatus, d.Rev, e.Rev())
				}
				if !strings.Contains(d.Err.Error(), tc.want) {
					t.Fatalf("got error %q, want it to mention %q", d.Err, tc.want)
				}
			}
		})
	}
	t.Run("nil input", func(t *testing.T) {
		e := newEngine(t, Config{})
		if d := e.Decide(context.Background(), nil); d.Permit() || reasonIDs(d) != ReasonPolicyError {
			t.Fatalf("got %+v, want policy_error", d)
		}
	})
	t.Run("cancelled context", func(t *testing.T) {
		e := newEngine(t, Config{CacheSize: -1})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if d := e.Decide(ctx, httpIn("GET", "pypi.org", "/")); d.Permit() || reasonIDs(d) != ReasonPolicyError {
			t.Fatalf("got %+v, want policy_error", d)
		}
	})
}

func TestNewRejects(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		cfg   Config
		want  string
	}{
		{"bad rego", map[string]string{"p.rego": "package airlock.egress\n\nallow if {\n"}, Config{}, "p.rego:"},
		{"rego v0 syntax", map[string]string{"p.rego": "package airlock.egress\n\nallow { true }\n"}, Config{}, "p.rego:3"},
		{"bad data json", map[string]string{"data.json": `{"a": `}, Config{}, "data.json"},
		{"data not object", map[string]string{"data.json": `[1]`}, Config{}, "must be a JSON object"},
		{"bad data yaml", map[string]string{"x/data.yaml": "a: [1"}, Config{}, "data.yaml"},
		{"data conflict", map[string]string{"data.json": `{"t": {"a": 1}}`, "t/data.yaml": "a: 2\n"}, Config{}, "data conflict at data.t.a"},
		{"reserved data", map[string]string{"data.json": `{"airlock": {"hosts": {}}}`}, Config{}, "computed by the engine"},
		{"preset key not normalized", map[string]string{"presets/x.json": `{"PyPI.org": true}`}, Config{}, `want "pypi.org"`},
		{"preset key invalid", map[string]string{"presets/x.json": `{"a..b": true}`}, Config{}, `preset x: key "a..b"`},
		{"preset value not true", map[string]string{"presets/x.json": `{"a.example": false}`}, Config{}, "value must be true"},
		{"preset dns port", map[string]string{"presets/x.json": `{"a.example": {"ports": [53]}}`}, Config{}, "carries DNS"},
		{"allow host bad port", nil, Config{AllowHosts: []string{"pypi.org:0"}}, "allow_hosts"},
		{"preset not object", map[string]string{"presets/x.json": `["a.example"]`}, Config{}, "preset x: must be an object"},
		{"unknown preset", nil, Config{Presets: []string{"pythn"}}, `unknown preset "pythn"`},
		{"none with others", nil, Config{Presets: []string{"none", "go"}}, "cannot be combined"},
		{"bad mode", nil, Config{Mode: "audit"}, "mode"},
		{"bad allow host", nil, Config{AllowHosts: []string{"exa mple.com"}}, "allow_hosts"},
		{"negative timeout", nil, Config{EvalTimeout: -1}, "eval_timeout"},
		{"negative cache bytes", nil, Config{CacheBytes: -1}, "cache_bytes"},
		{"watch without dir", nil, Config{Watch: true, Dir: ""}, "watch"},
		{"schema: unknown input field", map[string]string{"p.rego": "package airlock.egress\n\nallow if input.destination.hostname == \"x\"\n"}, Config{}, "p.rego:3"},
		{"schema: wrong type", map[string]string{"p.rego": "package airlock.egress\n\nallow if input.destination.port == \"443\"\n"}, Config{}, "p.rego:3"},
		{"strict: unused import", map[string]string{"p.rego": "package airlock.egress\n\nimport data.foo\n\nallow if input.kind == \"dns\"\n"}, Config{}, "p.rego:3"},
		{"strict: unused variable", map[string]string{"p.rego": "package airlock.egress\n\nallow if {\n\tx := 1\n\tinput.kind == \"dns\"\n}\n"}, Config{}, "p.rego:4"},
		{"denied builtin http.send", map[string]string{"p.rego": "package airlock.egress\n\nallow if http.send({\"method\": \"GET\", \"url\": \"http://127.0.0.1:1/\"}).status_code == 200\n"}, Config{}, "http.send"},
		{"denied builtin opa.runtime", map[string]string{"p.rego": "package airlock.egress\n\nallow if opa.runtime().env.X == \"y\"\n"}, Config{}, "opa.runtime"},
		{"failing own test", map[string]string{"p_test.rego": "package p_test\n\nimport data.airlock\n\ntest_x if airlock.decision.allowed with input as {\"kind\": \"dns\", \"sandbox\": {\"id\": \"s\"}, \"destination\": {\"host\": \"evil.example\", \"port\": 53}}\n"}, Config{}, "test_x"},
		{"missing dir", nil, Config{Dir: "/nonexistent/airlock-policy"}, "dir"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if tc.files != nil {
				cfg.Dir = t.TempDir()
				writeFiles(t, cfg.Dir, tc.files)
			}
			e, err := New(cfg, nil)
			if err == nil {
				e.Close()
				t.Fatalf("got nil error, want one mentioning %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %q, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestUserDataYAMLAndPresets(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"presets/internal.json": `{"pkgs.corp.example": true, "*.mirror.corp.example": true}`,
		"teams/data.yaml":       "ml:\n  hf.example: true\n",
		"p.rego": `package airlock.egress

import data.airlock

allow if {
	some k in airlock.host_keys
	data.teams[input.sandbox.labels.team][k]
}
`,
	})
	e := newEngine(t, Config{Dir: dir, Presets: []string{"internal"}})
	if d := e.Decide(context.Background(), kindIn(KindTLS, "eu.mirror.corp.example")); !d.Allowed {
		t.Fatalf("user preset: got %+v, want allowed", d)
	}
	if d := e.Decide(context.Background(), kindIn(KindTLS, "pypi.org")); d.Allowed {
		t.Fatalf("inactive preset: got %+v, want denied", d)
	}
	in := kindIn(KindTLS, "hf.example")
	in.Sandbox.Labels = map[string]string{"team": "ml"}
	if d := e.Decide(context.Background(), in); !d.Allowed {
		t.Fatalf("yaml data: got %+v, want allowed", d)
	}
}

func TestReloadKeepsOldSnapshot(t *testing.T) {
	dir := t.TempDir()
	good := "package airlock.egress\n\nallow if input.destination.host == \"one.example\"\n"
	writeFiles(t, dir, map[string]string{"p.rego": good})
	e := newEngine(t, Config{Dir: dir})
	rev := e.Rev()
	ctx := context.Background()
	check := func(host string, want bool) {
		t.Helper()
		if d := e.Decide(ctx, kindIn(KindConnect, host)); d.Allowed != want || d.Err != nil {
			t.Fatalf("%s: got %+v, want allowed=%v", host, d, want)
		}
	}
	check("one.example", true)
	if err := e.Reload(ctx); err != nil || e.Rev() != rev {
		t.Fatalf("unchanged reload: got %v rev %s, want nil and %s", err, e.Rev(), rev)
	}
	broken := []struct {
		name, src, want string
	}{
		{"syntax", "package airlock.egress\n\nallow if {\n", "p.rego:"},
		{"schema", "package airlock.egress\n\nallow if input.sandbox.name == \"x\"\n", "p.rego:3"},
		{"strict", "package airlock.egress\n\nallow if {\n\ty := 2\n\tinput.kind == \"tcp\"\n}\n", "p.rego:4"},
	}
	for _, b := range broken {
		writeFiles(t, dir, map[string]string{"p.rego": b.src})
		err := e.Reload(ctx)
		if err == nil || !strings.Contains(err.Error(), b.want) || !strings.Contains(err.Error(), "keeping revision "+rev) {
			t.Fatalf("%s: got %v, want a reload error mentioning %q and the kept revision", b.name, err, b.want)
		}
		if e.Rev() != rev {
			t.Fatalf("%s: got rev %s, want old %s", b.name, e.Rev(), rev)
		}
		check("one.example", true)
	}
	// A policy whose own test fails is refused too.
	writeFiles(t, dir, map[string]string{
		"p.rego":      "package airlock.egress\n\nallow if input.destination.host == \"two.example\"\n",
		"p_test.rego": "package p_test\n\nimport data.airlock\n\ntest_one if airlock.decision.allowed with input as {\"kind\": \"dns\", \"sandbox\": {\"id\": \"s\"}, \"destination\": {\"host\": \"one.example\", \"port\": 53}}\n",
	})
	if err := e.Reload(ctx); err == nil || !strings.Contains(err.Error(), "test_one") {
		t.Fatalf("failing test: got %v, want an error naming test_one", err)
	}
	check("one.example", true)
	check("two.example", false)
	// A good change swaps the snapshot.
	writeFiles(t, dir, map[string]string{"p_test.rego": "package p_test\n\nimport data.airlock\n\ntest_two if airlock.decision.allowed with input as {\"kind\": \"dns\", \"sandbox\": {\"id\": \"s\"}, \"destination\": {\"host\": \"two.example\", \"port\": 53}}\n"})
	if err := e.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if e.Rev() == rev {
		t.Fatalf("got rev unchanged after a good reload")
	}
	check("one.example", false)
	check("two.example", true)
}

func TestWatchReloads(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"p.rego": "package airlock.egress\n\nallow if input.destination.host == \"one.example\"\n"})
	e := newEngine(t, Config{Dir: dir, Watch: true, ReloadDebounce: 20 * time.Millisecond})
	rev := e.Rev()
	writeFiles(t, dir, map[string]string{"sub/q.rego": "package airlock.egress\n\nallow if input.destination.host == \"two.example\"\n"})
	deadline := time.Now().Add(20 * time.Second)
	for e.Rev() == rev {
		if time.Now().After(deadline) {
			t.Fatal("got no reload after a file change")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d := e.Decide(context.Background(), kindIn(KindDNS, "two.example")); !d.Allowed {
		t.Fatalf("got %+v, want the reloaded policy to allow two.example", d)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCache(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, Config{})
	s := e.cur.Load()
	if s.cache == nil {
		t.Fatal("got no cache for a deterministic policy")
	}
	in := httpIn("GET", "pypi.org", "/")
	d1 := e.Decide(ctx, in)
	d2 := e.Decide(ctx, in)
	if s.cache.Len() != 1 || d1.Allowed != d2.Allowed || d1.Rev != d2.Rev {
		t.Fatalf("got cache len %d, decisions %+v %+v", s.cache.Len(), d1, d2)
	}
	d2.Reasons = append(d2.Reasons, Reason{ID: "mutated"})
	if d3 := e.Decide(ctx, in); len(d3.Reasons) != 0 {
		t.Fatalf("got cached reasons mutated by a caller: %+v", d3)
	}
	e.Decide(ctx, httpIn("POST", "pypi.org", "/"))
	if s.cache.Len() != 2 {
		t.Fatalf("got cache len %d, want 2", s.cache.Len())
	}
	if off := newEngine(t, Config{CacheSize: -1}); off.cur.Load().cache != nil {
		t.Fatal("got a cache with CacheSize -1")
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"p.rego": "package airlock.egress\n\nallow if time.now_ns() > 0\n"})
	if nd := newEngine(t, Config{Dir: dir}); nd.cur.Load().cache != nil {
		t.Fatal("got a cache for a policy calling time.now_ns")
	}
}

func TestUsedInputFields(t *testing.T) {
	e := newEngine(t, Config{})
	got := e.cur.Load().used
	if got.all || !got.kind || !got.destination || !got.http || !got.sandbox || got.tls || got.dns || got.at {
		t.Fatalf("default policy: got %+v, want kind, sandbox (its allow list), destination, http only", got)
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"p.rego": "package airlock.egress\n\nallow if count(object.keys(input)) > 100\n"})
	if got := newEngine(t, Config{Dir: dir}).cur.Load().used; !got.all {
		t.Fatalf("bare input: got %+v, want all", got)
	}
}

func TestRunTestsPoliciesTree(t *testing.T) {
	rep, err := RunTests(context.Background(), filepath.Join("..", "policies"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		if !r.Pass {
			t.Errorf("FAIL %s %s.%s (%s): %s", r.Unit, r.Package, r.Name, r.Location, r.Error)
		}
	}
	units := map[string]bool{}
	for _, r := range rep.Results {
		units[r.Unit] = true
	}
	for _, u := range []string{"", "examples/git-fetch-only", "examples/http-allow-table", "examples/method-path-rules", "examples/pod-namespaces", "examples/report-one-sandbox", "examples/response-content", "examples/team-allowlists"} {
		if !units[u] {
			t.Errorf("got no tests for unit %q", u)
		}
	}
	if !rep.OK() || rep.Coverage < 90 {
		t.Fatalf("got passed=%d failed=%d coverage=%.1f, want all passing and coverage >= 90", rep.Passed, rep.Failed, rep.Coverage)
	}
	for _, f := range rep.Files {
		if strings.HasSuffix(f.File, "_test.rego") {
			t.Errorf("got test file %s in coverage", f.File)
		}
		if !strings.HasPrefix(f.File, filepath.Join("..", "policies")) {
			t.Errorf("got file %s, want the tree's own copy (overlay)", f.File)
		}
	}
	t.Logf("policies/: %d tests pass, coverage %.1f%%", rep.Passed, rep.Coverage)
}

func TestRunTestsEmbeddedAndFailing(t *testing.T) {
	rep, err := RunTests(context.Background(), "")
	if err != nil || !rep.OK() {
		t.Fatalf("embedded: got %v %+v", err, rep)
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"x_test.rego": "package x_test\n\ntest_fails if false\n"})
	rep, err = RunTests(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.Failed != 1 {
		t.Fatalf("got failed=%d, want 1", rep.Failed)
	}
	writeFiles(t, dir, map[string]string{"x.rego": "package airlock.egress\n\nallow if {\n"})
	if _, err := RunTests(context.Background(), dir); err == nil {
		t.Fatal("got nil error for a unit that does not parse")
	}
}

func TestCheck(t *testing.T) {
	probs, err := Check(filepath.Join("..", "policies"))
	if err != nil || len(probs) != 0 {
		t.Fatalf("policies/: got %v %v, want no problems", probs, err)
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"p.rego":                 "package airlock.egress\n\nallow if input.destination.hostname == \"x\"\n",
		"examples/e/e.rego":      "package airlock.egress\n\nallow if {\n\tz := 1\n\tinput.kind == \"dns\"\n}\n",
		"examples/e/e_test.rego": "package e_test\n\ntest_ok if true\n",
	})
	probs, err = Check(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range probs {
		got = append(got, p.String())
	}
	joined := strings.Join(got, "\n")
	for _, want := range []string{filepath.Join(dir, "p.rego") + ":3:", filepath.Join(dir, "examples/e/e.rego") + ":4:"} {
		if !strings.Contains(joined, want) {
			t.Fatalf("got problems:\n%s\nwant one at %s", joined, want)
		}
	}
}

// TestPassthroughDecision: a user policy's passthrough rule reaches the
// Decision for an allowed tls or connect to a registry the default policy
// intercepts (mitm off), and only for the hosts it names.
func TestPassthroughDecision(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"p.rego": "package airlock.egress\n\npassthrough if input.destination.host == \"pypi.org\"\n"})
	e := newEngine(t, Config{Dir: dir})
	tests := []struct {
		name                  string
		kind                  Kind
		host                  string
		passthrough, mitm, ok bool
	}{
		{"tls to the named host", KindTLS, "pypi.org", true, false, true},
		{"connect to the named host", KindConnect, "pypi.org", true, false, true},
		{"another registry stays intercepted", KindTLS, "files.pythonhosted.org", false, true, true},
		{"a denied host gets none", KindTLS, "evil.example", false, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := &Input{Kind: tc.kind, Sandbox: Sandbox{ID: "s"}, Destination: Destination{Host: tc.host, Port: 443}}
			d := e.Decide(context.Background(), in)
			if d.Allowed != tc.ok || d.Passthrough != tc.passthrough || d.MITM != tc.mitm || d.Err != nil {
				t.Errorf("got allowed=%v passthrough=%v mitm=%v err=%v, want %v %v %v", d.Allowed, d.Passthrough, d.MITM, d.Err, tc.ok, tc.passthrough, tc.mitm)
			}
		})
	}
}

// TestReloadAnnouncesChange: Changed closes when a new revision is swapped in,
// never for an unchanged or failed reload, and a decision cached under the
// old revision is not served after the swap (the gateway re-decides its open
// connections on Changed and must get the new answer).
func TestReloadAnnouncesChange(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"p.rego": "package airlock.egress\n\nallow if input.destination.host == \"one.example\"\n"})
	e := newEngine(t, Config{Dir: dir})
	ctx := context.Background()
	in := kindIn(KindConnect, "one.example")
	for range 2 { // the second is served from the cache when it is on
		if d := e.Decide(ctx, in); !d.Allowed {
			t.Fatalf("before: got %+v, want allowed", d)
		}
	}
	ch := e.Changed()
	closed := func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	if err := e.Reload(ctx); err != nil || closed() {
		t.Fatalf("unchanged reload: got err %v closed %v, want nil and false", err, closed())
	}
	writeFiles(t, dir, map[string]string{"p.rego": "package airlock.egress\n\nallow if {\n"})
	if err := e.Reload(ctx); err == nil || closed() {
		t.Fatalf("failed reload: got err %v closed %v, want an error and false", err, closed())
	}
	writeFiles(t, dir, map[string]string{"p.rego": "package airlock.egress\n\nallow if input.destination.host == \"two.example\"\n"})
	if err := e.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if !closed() {
		t.Fatal("Changed not closed after a new revision was swapped in")
	}
	if d := e.Decide(ctx, in); d.Allowed {
		t.Fatalf("after: got %+v, want denied (an answer of the old revision)", d)
	}
}

// TestEmptyPolicyDenies: a policy that allows nothing more never turns into
// "allow everything": no allow hosts and the default presets only, or a user
// file that adds no rule, denies every other host for every kind in enforce
// mode (report mode is entered only when
// asked for; TestModes covers what it records), and a reload to such a
// policy denies what the old one allowed.
func TestEmptyPolicyDenies(t *testing.T) {
	empty := t.TempDir()
	writeFiles(t, empty, map[string]string{"p.rego": "package airlock.egress\n"})
	engines := []struct {
		name string
		cfg  Config
	}{
		{"no allow hosts, default presets", Config{}},
		{"a user file with no rule", Config{Dir: empty}},
	}
	kinds := []Kind{KindHTTP, KindConnect, KindTLS, KindTCP, KindDNS}
	for _, en := range engines {
		e := newEngine(t, en.cfg)
		if e.Mode() != ModeEnforce {
			t.Fatalf("%s: mode got %s, want %s", en.name, e.Mode(), ModeEnforce)
		}
		for _, k := range kinds {
			for _, host := range []string{"example.com", "evil.example", "127.0.0.1", "169.254.169.254"} { // not in a default preset
				in := kindIn(k, host)
				if k == KindHTTP {
					in = httpIn("GET", host, "/")
				}
				if d := e.Decide(context.Background(), in); d.Permit() || d.Allowed || d.Mode != ModeEnforce {
					t.Errorf("%s: %s %s: got %+v, want an enforced deny", en.name, k, host, d)
				}
			}
		}
	}
	// A reload from a policy that allows a host to one that allows nothing.
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"p.rego": "package airlock.egress\n\nallow if input.destination.host == \"one.example\"\n"})
	e := newEngine(t, Config{Dir: dir})
	if d := e.Decide(context.Background(), kindIn(KindConnect, "one.example")); !d.Allowed {
		t.Fatalf("before: got %+v, want allowed", d)
	}
	writeFiles(t, dir, map[string]string{"p.rego": "package airlock.egress\n"})
	if err := e.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := e.Decide(context.Background(), kindIn(KindConnect, "one.example")); d.Permit() {
		t.Fatalf("after: got %+v, want denied", d)
	}
}
