package policy

import (
	"context"
	"strings"
	"testing"
	"time"
)

const githubReadTest = `package airlock.egress_test

import data.airlock

test_github_read_refused if {
	d := airlock.decision with input as {"kind": "http", "sandbox": {"id": "s"}, "destination": {"host": "api.github.com", "port": 443}, "http": {"method": "GET", "scheme": "https", "path": "/repos/other/x"}}
	not d.allowed
}
`

const githubTable = `package airlock.egress

http_allow := {"api.github.com": [{"methods": ["GET"], "paths": ["/repos/acme/*"]}]}
`

// A directory's manifest states the presets it builds on; its tests, eval,
// run and serve load exactly those.
func TestManifestPresets(t *testing.T) {
	tests := []struct {
		name     string
		manifest string // "" for none
		presets  []string
		allowed  bool   // GET api.github.com/repos/other/x
		wantErr  string // from New
	}{
		{name: "no manifest: every preset, as before", allowed: true},
		{name: "presets none", manifest: "presets: [none]\n", allowed: false},
		{name: "empty list means none", manifest: "presets: []\n", allowed: false},
		{name: "a preset without github", manifest: "presets: [python]\n", allowed: false},
		{name: "github named", manifest: "presets: [github, python]\n", allowed: true},
		{name: "no presets key: every preset", manifest: "# nothing said\n{}\n", allowed: true},
		{name: "same presets in the configuration", manifest: "presets: [python]\n", presets: []string{"python"}, allowed: false},
		{name: "other presets in the configuration", manifest: "presets: [none]\n", presets: []string{"github"},
			wantErr: "airlock-policy.yaml states presets [none]; the configuration asks for [github]"},
		{name: "unknown preset", manifest: "presets: [nosuch]\n", wantErr: `unknown preset "nosuch"`},
		{name: "unknown key", manifest: "presets: [none]\npreset: [go]\n", wantErr: "field preset not found"},
		{name: "none with others", manifest: "presets: [none, go]\n", wantErr: "none must be the only entry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]string{"policy.rego": githubTable}
			if tt.manifest != "" {
				files[ManifestFile] = tt.manifest
			}
			writeFiles(t, dir, files)
			e, err := New(Config{Dir: dir, Presets: tt.presets, EvalTimeout: 10 * time.Second}, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New: got %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			d := e.Decide(context.Background(), httpIn("GET", "api.github.com", "/repos/other/x"))
			if d.Allowed != tt.allowed {
				t.Fatalf("GET api.github.com/repos/other/x: got allowed=%v, want %v", d.Allowed, tt.allowed)
			}
			// policy test answers as run time does.
			writeFiles(t, dir, map[string]string{"policy_test.rego": githubReadTest})
			rep, err := RunTests(context.Background(), dir)
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() == tt.allowed {
				t.Fatalf("policy test: got ok=%v, want %v (run time allows: %v)", rep.OK(), !tt.allowed, tt.allowed)
			}
		})
	}
}

// A failing test says which expression failed, with its values and the input,
// not a bare "fail" (a correct-looking test that failed because the
// default presets were loaded under it).
func TestFailingTestExplained(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"policy.rego": githubTable, "policy_test.rego": githubReadTest})
	rep, err := RunTests(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed != 1 {
		t.Fatalf("got %d failed, want 1", rep.Failed)
	}
	got := rep.Results[0].Error
	for _, want := range []string{"policy_test.rego:7: not d.allowed", "d.allowed: true", `input: {"destination": {"host": "api.github.com"`, `"method": "GET"`} {
		if !strings.Contains(got, want) {
			t.Errorf("failure text: got %q, want it to contain %q", got, want)
		}
	}
	// run and serve refuse it, with the same text.
	if _, err := New(Config{Dir: dir}, nil); err == nil || !strings.Contains(err.Error(), "not d.allowed") {
		t.Fatalf("New: got %v, want the failing expression", err)
	}
	// eval's engine answers, with a warning.
	var warned error
	e, err := New(Config{Dir: dir, FailingTests: func(err error) { warned = err }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	if warned == nil || !strings.Contains(warned.Error(), "test_github_read_refused") {
		t.Fatalf("FailingTests: got %v", warned)
	}
}

// The manifest example of policies/README.md is a manifest.
func TestReadmeManifestExample(t *testing.T) {
	n := 0
	for _, src := range blocks(t, "../policies/README.md", "yaml") {
		if !strings.Contains(src, "presets:") {
			continue
		}
		n++
		m, err := readManifest(map[string]unitFile{ManifestFile: {Rel: ManifestFile, Name: ManifestFile, Src: []byte(src)}})
		if err != nil || m == nil || m.Presets == nil {
			t.Fatalf("README manifest %q: got %+v, %v", src, m, err)
		}
	}
	if n == 0 {
		t.Fatal("policies/README.md has no manifest example")
	}
}

// A bundle cannot carry a manifest yet: policy bundle says so instead of
// dropping it (the gateways would load other presets than the tests did).
func TestBundleRefusesManifest(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"policy.rego": githubTable, ManifestFile: "presets: [none]\n"})
	var out strings.Builder
	err := BuildBundle(context.Background(), dir, BundleBuild{Revision: "r1"}, &out)
	if err == nil || !strings.Contains(err.Error(), "a bundle cannot carry a manifest yet") {
		t.Fatalf("got %v, want the manifest refused", err)
	}
}
