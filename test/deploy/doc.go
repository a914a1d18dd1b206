// Package deploy checks the Kubernetes deployment under deploy/: it renders
// the Helm chart (deploy/helm/airlock) with helm's own Go packages and the
// kustomization with kustomize's, decodes every object and every plain
// manifest strictly into the k8s.io/api types (an unknown field fails),
// checks that the chart and the manifests agree, that the config in the
// ConfigMap and the secrets file in the Secret pass airlock's own strict
// loaders and point where the DaemonSet mounts them, that the CNI config
// list chains airlock-cni last, and the pod's security properties (no
// privileged, no host IPC or PID, capabilities dropped but the justified
// ones, read-only root). `go test ./test/deploy -update` rewrites the plain
// manifests from the chart.
//
// Entry point: go test ./test/deploy/. The package has no code of its own
// outside tests.
//
// test/deploy must never import: cmd/airlock, daemon, dnsfilter, gateway,
// netns, sandboxd, policy.
package deploy
