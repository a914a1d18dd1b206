package deploy

import (
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// TestKustomizeBuild builds deploy/ with kustomize's own Go packages, as
// `kubectl apply -k deploy/` (and `kubectl kustomize`) would before sending
// anything: the kustomization must resolve, its objects must be unique, and
// what comes out decodes strictly and passes the same checks as the files.
func TestKustomizeBuild(t *testing.T) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), deployDir)
	if err != nil {
		t.Fatalf("kustomize build deploy/: %v", err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	o := decodeAll(t, manifestsOf("kustomize build", out))
	if len(o.namespaces) != 1 || o.serviceMonitor == nil || o.secret == nil {
		t.Fatalf("kustomize build: got %d namespaces, servicemonitor %v, secret %v; want all of deploy/", len(o.namespaces), o.serviceMonitor != nil, o.secret != nil)
	}
	checkDeployment(t, o)
}

func manifestsOf(source string, stream []byte) []manifest {
	var out []manifest
	for _, d := range splitDocs(stream) {
		out = append(out, manifest{source: source, body: d})
	}
	return out
}
