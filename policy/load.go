package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/util"
	"gopkg.in/yaml.v3"

	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/identity"
	"github.com/airlock-dev/airlock/policies"
)

// Layout of a policy unit.
const (
	examplesDir = "examples"
	presetsDir  = "presets"
	schemaFile  = "schema/input.json"
	embeddedTag = "embedded:"
)

// unitFile is one file of a policy unit. Rel is slash-separated and relative to
// the unit root; Name is what messages call it (a real path, or embedded:REL).
type unitFile struct {
	Rel  string
	Name string
	Src  []byte
}

// unit is everything one policy is built from: the embedded base overlaid by a
// directory's files.
type unit struct {
	Name  string // "" for the main unit, or examples/NAME
	Files map[string]unitFile
}

// relevant reports whether a file at rel belongs in a unit.
func relevant(rel string) bool {
	base := path.Base(rel)
	switch {
	case strings.HasSuffix(base, ".rego"):
		return true
	case base == "data.json" || base == "data.yaml" || base == "data.yml":
		return true
	case rel == schemaFile || rel == ManifestFile:
		return true
	case path.Dir(rel) == presetsDir && strings.HasSuffix(base, ".json"):
		return true
	}
	return false
}

// readTree collects the relevant files under root of fsys, skipping the top-level
// examples/ directory and hidden entries. name maps rel to a display name.
func readTree(fsys fs.FS, root string, name func(rel string) string) (map[string]unitFile, error) {
	out := map[string]unitFile{}
	err := fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p, root), "/")
		if root == "." {
			rel = p
		}
		if rel == "." || rel == "" {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if rel == examplesDir {
				return fs.SkipDir
			}
			return nil
		}
		if !relevant(rel) {
			return nil
		}
		src, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		out[rel] = unitFile{Rel: rel, Name: name(rel), Src: src}
		return nil
	})
	return out, err
}

// baseFiles returns the embedded library, default policy, presets and schema.
func baseFiles() (map[string]unitFile, error) {
	return readTree(policies.FS, ".", func(rel string) string { return embeddedTag + rel })
}

// dirFiles reads a user directory.
func dirFiles(dir string) (map[string]unitFile, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("policy: dir: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("policy: dir: %s is not a directory", dir)
	}
	files, err := readTree(os.DirFS(dir), ".", func(rel string) string { return filepath.Join(dir, filepath.FromSlash(rel)) })
	if err != nil {
		return nil, fmt.Errorf("policy: dir: %w", err)
	}
	return files, nil
}

// overlay returns base with every file of top added or replaced.
func overlay(base, top map[string]unitFile) map[string]unitFile {
	out := make(map[string]unitFile, len(base)+len(top))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range top {
		out[k] = v
	}
	return out
}

// withoutTests returns files minus the *_test.rego ones.
func withoutTests(files map[string]unitFile) map[string]unitFile {
	out := make(map[string]unitFile, len(files))
	for k, v := range files {
		if !strings.HasSuffix(k, "_test.rego") {
			out[k] = v
		}
	}
	return out
}

// units returns the main unit for dir (embedded base when dir is empty) and,
// when withExamples, one unit per examples/NAME directory: dir's own, or the
// embedded ones when dir is empty.
func units(dir string, withExamples bool) ([]unit, error) {
	base, err := baseFiles()
	if err != nil {
		return nil, fmt.Errorf("policy: embedded policies: %w", err)
	}
	main := base
	var exFS fs.FS
	exName := func(rel string) string { return embeddedTag + rel }
	if dir != "" {
		top, err := dirFiles(dir)
		if err != nil {
			return nil, err
		}
		// A directory's tests are its own: the embedded tests describe the
		// embedded policy alone and would judge a user's rules unfairly.
		main = overlay(withoutTests(base), top)
		exFS = os.DirFS(dir)
		exName = func(rel string) string { return filepath.Join(dir, filepath.FromSlash(rel)) }
	} else {
		exFS = policies.FS
	}
	out := []unit{{Files: main}}
	if !withExamples {
		return out, nil
	}
	entries, err := fs.ReadDir(exFS, examplesDir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("policy: examples: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		root := examplesDir + "/" + e.Name()
		files, err := readTree(exFS, root, func(rel string) string { return exName(root + "/" + rel) })
		if err != nil {
			return nil, fmt.Errorf("policy: %s: %w", root, err)
		}
		if len(files) == 0 {
			continue
		}
		// An example is tested on its own: the base without its tests.
		out = append(out, unit{Name: root, Files: overlay(withoutTests(main), files)})
	}
	return out, nil
}

// built is a parsed and checked unit, before compilation.
type built struct {
	Modules map[string]*ast.Module // by display name, tests included
	Tests   map[string]bool        // display names of *_test.rego modules
	Data    map[string]any         // merged data, config documents included
	Schema  any
	Rev     string
	Files   map[string]unitFile
}

// build parses a unit's modules, merges its data, validates presets and adds the
// config documents (data.airlock.config, data.airlock.hosts).
func build(u unit, cfg Config) (*built, error) {
	cfg, err := applyManifest(u.Files, cfg)
	if err != nil {
		return nil, err
	}
	b := &built{
		Modules: map[string]*ast.Module{},
		Tests:   map[string]bool{},
		Data:    map[string]any{},
		Files:   u.Files,
	}
	rels := make([]string, 0, len(u.Files))
	for rel := range u.Files {
		rels = append(rels, rel)
	}
	sort.Strings(rels)
	h := sha256.New()
	presets := map[string]any{}
	for _, rel := range rels {
		f := u.Files[rel]
		fmt.Fprintf(h, "%s\x00%d\x00", rel, len(f.Src))
		h.Write(f.Src)
		switch {
		case strings.HasSuffix(rel, ".rego"):
			m, err := ast.ParseModuleWithOpts(f.Name, string(f.Src), ast.ParserOptions{RegoVersion: ast.RegoV1, ProcessAnnotation: true})
			if err != nil {
				return nil, err
			}
			b.Modules[f.Name] = m
			if strings.HasSuffix(rel, "_test.rego") {
				b.Tests[f.Name] = true
			}
		case rel == ManifestFile:
			// Read by applyManifest; hashed into the revision above.
		case rel == schemaFile:
			var s any
			if err := util.UnmarshalJSON(f.Src, &s); err != nil {
				return nil, fmt.Errorf("%s: %w", f.Name, err)
			}
			b.Schema = s
		case path.Dir(rel) == presetsDir:
			var doc any
			if err := util.UnmarshalJSON(f.Src, &doc); err != nil {
				return nil, fmt.Errorf("%s: %w", f.Name, err)
			}
			presets[strings.TrimSuffix(path.Base(rel), ".json")] = doc
		default:
			doc, err := decodeData(f)
			if err != nil {
				return nil, err
			}
			var at []string
			if d := path.Dir(rel); d != "." {
				at = strings.Split(d, "/")
			}
			if err := mergeAt(b.Data, at, doc, f.Name); err != nil {
				return nil, err
			}
		}
	}
	if b.Schema == nil {
		return nil, fmt.Errorf("policy: %s missing", schemaFile)
	}
	derived, err := derive(b.Modules, b.Tests)
	if err != nil {
		return nil, err
	}
	if err := mergeAt(b.Data, []string{"airlock", "presets"}, presets, "presets/"); err != nil {
		return nil, err
	}
	cfgDoc, err := configDocs(b.Data, cfg)
	if err != nil {
		return nil, err
	}
	air := b.Data["airlock"].(map[string]any)
	for k, v := range cfgDoc {
		air[k] = v
	}
	// The library skips the derived rules' checks when there are none.
	air["derived"] = map[string]any{"http": derived}
	cj, _ := json.Marshal(map[string]any{"mode": cfg.Mode, "presets": cfg.Presets, "allow": cfg.AllowHosts})
	h.Write(cj)
	b.Rev = hex.EncodeToString(h.Sum(nil))[:16]
	return b, nil
}

// decodeData reads a data.json or data.yaml file into JSON-compatible values.
func decodeData(f unitFile) (any, error) {
	src := f.Src
	if strings.HasSuffix(f.Rel, ".yaml") || strings.HasSuffix(f.Rel, ".yml") {
		var y any
		dec := yaml.NewDecoder(bytes.NewReader(src))
		dec.KnownFields(true)
		if err := dec.Decode(&y); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		j, err := json.Marshal(y)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		src = j
	}
	var doc any
	if err := util.UnmarshalJSON(src, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name, err)
	}
	if _, ok := doc.(map[string]any); !ok {
		return nil, fmt.Errorf("%s: data must be a JSON object", f.Name)
	}
	return doc, nil
}

// mergeAt merges doc into root at path at. Objects merge key by key; any other
// overlap is a conflict named by its data path.
func mergeAt(root map[string]any, at []string, doc any, from string) error {
	cur := root
	for i, k := range at {
		next, ok := cur[k]
		if !ok {
			m := map[string]any{}
			cur[k] = m
			cur = m
			continue
		}
		m, ok := next.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: data conflict at data.%s", from, strings.Join(at[:i+1], "."))
		}
		cur = m
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: data at data.%s must be an object", from, strings.Join(at, "."))
	}
	return mergeObj(cur, obj, at, from)
}

func mergeObj(dst, src map[string]any, at []string, from string) error {
	for k, v := range src {
		p := append(append([]string{}, at...), k)
		old, ok := dst[k]
		if !ok {
			dst[k] = v
			continue
		}
		om, ok1 := old.(map[string]any)
		nm, ok2 := v.(map[string]any)
		if !ok1 || !ok2 {
			return fmt.Errorf("%s: data conflict at data.%s", from, strings.Join(p, "."))
		}
		if err := mergeObj(om, nm, p, from); err != nil {
			return err
		}
	}
	return nil
}

// configDocs validates data.airlock.presets and returns the documents the
// engine computes: config (what the gateway was told) and hosts (the merged
// host indexes the default policy looks up).
func configDocs(data map[string]any, cfg Config) (map[string]any, error) {
	air, _ := data["airlock"].(map[string]any)
	for _, k := range []string{"config", "hosts", "derived"} {
		if _, ok := air[k]; ok {
			return nil, fmt.Errorf("policy: data.airlock.%s is computed by the engine; set presets and allow_hosts in the config instead", k)
		}
	}
	all, _ := air["presets"].(map[string]any)
	names := make([]string, 0, len(all))
	for name, v := range all {
		names = append(names, name)
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("policy: preset %s: must be an object keyed by host", name)
		}
		for k, val := range obj {
			n, err := hostname.NormalizePattern(k)
			if err != nil {
				return nil, fmt.Errorf("policy: preset %s: key %q: %w", name, k, err)
			}
			if n != k {
				return nil, fmt.Errorf("policy: preset %s: key %q is not normalized (want %q)", name, k, n)
			}
			if _, err := identity.ParseHostPorts(val); err != nil {
				return nil, fmt.Errorf("policy: preset %s: key %q: %w", name, k, err)
			}
		}
	}
	sort.Strings(names)
	active := cfg.Presets
	switch {
	case len(active) == 0:
		active = names
	case len(active) == 1 && active[0] == PresetNone:
		active = []string{}
	}
	merged := map[string]*identity.HostPorts{}
	for _, name := range active {
		obj, ok := all[name].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("policy: presets: unknown preset %q (known: %s, %s)", name, strings.Join(names, ", "), PresetNone)
		}
		for k, val := range obj {
			e, _ := identity.ParseHostPorts(val) // validated above
			m := merged[k]
			if m == nil {
				merged[k] = e
				continue
			}
			for p := range e.Ports {
				m.AddPort(p)
			}
			m.Git = m.Git || e.Git
		}
	}
	registry := make(map[string]any, len(merged))
	for k, e := range merged {
		registry[k] = e.Value()
	}
	allow, err := identity.AllowEntries(cfg.AllowHosts)
	if err != nil {
		return nil, err
	}
	activeAny := make([]any, len(active))
	for i, a := range active {
		activeAny[i] = a
	}
	allowAny := make([]any, len(cfg.AllowHosts))
	for i, a := range cfg.AllowHosts {
		allowAny[i] = a
	}
	return map[string]any{
		"config": map[string]any{"presets": activeAny, "allow_hosts": allowAny, "mode": string(cfg.Mode)},
		"hosts":  map[string]any{"registry": registry, "allow": allow},
	}, nil
}
