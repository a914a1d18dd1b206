package deploy

import (
	"path/filepath"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// TestKustomizeBuild builds deploy/ and deploy/monitoring with kustomize's
// own Go packages, as `kubectl apply -k` (and `kubectl kustomize`) would
// before sending anything: each kustomization must resolve, its objects must
// be unique, and what comes out decodes strictly and passes the same checks
// as the files. deploy/ holds no ServiceMonitor (a cluster without the
// Prometheus Operator's CRDs would refuse it); deploy/monitoring holds it
// alone, and the two together are the whole deployment.
func TestKustomizeBuild(t *testing.T) {
	base := kustomizeBuild(t, "deploy/")
	o := decodeAll(t, base)
	checkDeployment(t, o)
	if len(o.namespaces) != 1 || o.daemonSet == nil || o.secret == nil || o.serviceMonitor != nil {
		t.Errorf("kustomize build deploy/: got %d namespaces, daemonset %v, secret %v, servicemonitor %v; want one namespace, a daemonset, a secret and no servicemonitor",
			len(o.namespaces), o.daemonSet != nil, o.secret != nil, o.serviceMonitor != nil)
	}
	mon := kustomizeBuild(t, "deploy/monitoring")
	if len(mon) != 1 || decodeAll(t, mon).serviceMonitor == nil {
		t.Errorf("kustomize build deploy/monitoring: got %d objects, want the ServiceMonitor alone", len(mon))
	}
	o = decodeAll(t, append(base, mon...))
	checkDeployment(t, o)
	if o.serviceMonitor == nil {
		t.Errorf("deploy/ and deploy/monitoring: no servicemonitor")
	}
}

// kustomizeBuild builds dir (deploy/ or deploy/monitoring, as the README
// names them) and returns its documents.
func kustomizeBuild(t *testing.T, dir string) []manifest {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(deployDir, "..", dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return manifestsOf("kustomize build "+dir, out)
}

func manifestsOf(source string, stream []byte) []manifest {
	var out []manifest
	for _, d := range splitDocs(stream) {
		out = append(out, manifest{source: source, body: d})
	}
	return out
}
