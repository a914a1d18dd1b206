package policy

import (
	"bytes"
	"fmt"
	"slices"
	"sort"

	"gopkg.in/yaml.v3"
)

// ManifestFile is a policy directory's manifest: what the policy builds on.
//
//	# airlock-policy.yaml
//	presets: [none]        # or [python, go]; absent: every preset
//
// A directory without one builds on every preset, as before manifests existed.
// The manifest is the policy's own statement, so its tests, `policy eval`, run
// and serve all load the same presets: a configuration (--preset,
// policy.presets) that asks for others is refused at load, naming both.
const ManifestFile = "airlock-policy.yaml"

// manifest is the decoded ManifestFile.
type manifest struct {
	// Presets the policy builds on; nil when the file does not say.
	Presets *[]string `yaml:"presets"`
}

// readManifest decodes files' manifest, if any (strictly: an unknown key is
// an error naming it).
func readManifest(files map[string]unitFile) (*manifest, error) {
	f, ok := files[ManifestFile]
	if !ok {
		return nil, nil
	}
	var m manifest
	dec := yaml.NewDecoder(bytes.NewReader(f.Src))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name, err)
	}
	if m.Presets != nil {
		for i, p := range *m.Presets {
			if p == "" {
				return nil, fmt.Errorf("%s: presets[%d] is empty", f.Name, i)
			}
			if p == PresetNone && len(*m.Presets) > 1 {
				return nil, fmt.Errorf("%s: presets: %s must be the only entry", f.Name, PresetNone)
			}
		}
	}
	return &m, nil
}

// applyManifest returns cfg with the presets the unit's manifest states. A
// configuration naming other presets is an error: the policy's tests ran
// with the manifest's.
func applyManifest(files map[string]unitFile, cfg Config) (Config, error) {
	m, err := readManifest(files)
	if err != nil || m == nil || m.Presets == nil {
		return cfg, err
	}
	want := *m.Presets
	if len(want) == 0 {
		want = []string{PresetNone}
	}
	if len(cfg.Presets) > 0 && !samePresets(cfg.Presets, want) {
		return cfg, fmt.Errorf("policy: %s states presets %v; the configuration asks for %v (drop --preset / policy.presets, or edit the file)",
			files[ManifestFile].Name, want, cfg.Presets)
	}
	cfg.Presets = append([]string(nil), want...)
	return cfg, nil
}

func samePresets(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	sort.Strings(x)
	sort.Strings(y)
	return slices.Equal(slices.Compact(x), slices.Compact(y))
}
