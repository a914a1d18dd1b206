package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
)

// Where the deployment lives, from this package's directory.
const (
	deployDir = "../../deploy"
	chartDir  = "../../deploy/helm/airlock"
)

// The release the plain manifests are rendered as.
const (
	releaseName      = "airlock"
	releaseNamespace = "airlock-system"
)

// clusterVersion is the Kubernetes version the chart is rendered for; the
// chart's kubeVersion must accept it.
var clusterVersion = chartutil.KubeVersion{Version: "v1.34.0", Major: "1", Minor: "34"}

// manifest is one rendered YAML document and the template it came from.
type manifest struct {
	source string // template path, or manifest file name
	body   []byte
}

// renderChart renders the chart as `helm install --dry-run` would with
// values over the chart's own, and returns its non-empty documents in
// template order.
func renderChart(t *testing.T, values map[string]any) []manifest {
	t.Helper()
	docs, err := render(values)
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

func render(values map[string]any) ([]manifest, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, fmt.Errorf("load chart: %w", err)
	}
	if !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, clusterVersion.String()) {
		return nil, fmt.Errorf("chart kubeVersion %q does not accept %s", ch.Metadata.KubeVersion, clusterVersion.String())
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = clusterVersion
	// ToRenderValues merges values over values.yaml and checks the result
	// against values.schema.json.
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{
		Name: releaseName, Namespace: releaseNamespace, Revision: 1, IsInstall: true, IsUpgrade: false,
	}, caps)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	eng := engine.Engine{Strict: true}
	out, err := eng.Render(ch, vals)
	if err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	names := make([]string, 0, len(out))
	for name := range out {
		names = append(names, name)
	}
	sort.Strings(names)
	var docs []manifest
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, d := range splitDocs([]byte(out[name])) {
			docs = append(docs, manifest{source: name, body: d})
		}
	}
	return docs, nil
}

// splitDocs cuts a YAML stream at its "---" lines and drops documents with
// nothing but comments and blank lines.
func splitDocs(b []byte) [][]byte {
	var out [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		if hasContent(d) {
			out = append(out, []byte(d))
		}
	}
	return out
}

func hasContent(doc string) bool {
	for _, line := range strings.Split(doc, "\n") {
		if s := strings.TrimSpace(line); s != "" && !strings.HasPrefix(s, "#") {
			return true
		}
	}
	return false
}

// monitoringDir (below deployDir) is the kustomization that adds, to what
// deploy/ installs, the objects needing the Prometheus Operator's CRDs.
const monitoringDir = "monitoring"

// overlayFiles are the rendered files that live in monitoringDir, not in
// deploy/ itself: a cluster without the CRDs applies deploy/ alone.
var overlayFiles = map[string]bool{"servicemonitor.yaml": true}

// staticPath is where a rendered file lives, relative to deployDir.
func staticPath(name string) string {
	if overlayFiles[name] {
		return filepath.Join(monitoringDir, name)
	}
	return name
}

// staticFiles are the plain manifests of the kustomization in dir (deployDir
// or monitoringDir's), in kustomization order.
func staticFiles(t *testing.T, dir string) []manifest {
	t.Helper()
	k := readKustomization(t, dir)
	var out []manifest
	for _, r := range k.Resources {
		b, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			t.Fatalf("kustomization resource: %v", err)
		}
		for _, d := range splitDocs(b) {
			out = append(out, manifest{source: r, body: d})
		}
	}
	return out
}

// kustomization is the part of kustomize's Kustomization deploy/ uses.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

func readKustomization(t *testing.T, dir string) kustomization {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	decodeInto(t, "kustomization.yaml", b, &k)
	return k
}

// helmOnly are the lines the plain manifests leave out: they name Helm as
// the manager.
var helmOnly = regexp.MustCompile(`(?m)^\s*(helm\.sh/chart|app\.kubernetes\.io/managed-by):.*\n`)

// staticFromChart is what the plain manifests hold: the chart rendered with
// its defaults, without the Helm-only lines and with "# Source" headers
// turned into the file's first comment.
func staticFromChart(t *testing.T) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, m := range renderChart(t, nil) {
		name := filepath.Base(m.source)
		body := helmOnly.ReplaceAll(m.body, nil)
		body = regexp.MustCompile(`(?m)^# Source: .*\n`).ReplaceAll(body, nil)
		body = bytes.TrimLeft(body, "\n")
		header := "# Generated from deploy/helm/airlock (" + filepath.Base(m.source) + ") with its default values by\n" +
			"# `go test ./test/deploy -update`; edit the chart, not this file.\n"
		files[name] = append([]byte(header), body...)
	}
	return files
}
