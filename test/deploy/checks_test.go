package deploy

import (
	"bytes"
	"strings"
	"testing"
)

// TestChecksCatch: each row breaks the deployment the way a careless edit
// would (in the chart's values or in the rendered text) and the checks must
// fail with the named problem; the default rendering passes them all.
func TestChecksCatch(t *testing.T) {
	type edit struct{ doc, old, new string } // in the document whose source ends in doc
	tests := []struct {
		name   string
		values map[string]any
		edits  []edit
		want   string
	}{
		{name: "unknown field in the pod spec", edits: []edit{{"daemonset.yaml", "      hostIPC: false\n", "      hostIPC: false\n      hostIPCMode: none\n"}},
			want: `unknown field "spec.template.spec.hostIPCMode"`},
		{name: "misspelled container field", edits: []edit{{"daemonset.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true"}},
			want: "unknown field"},
		{name: "unknown ServiceMonitor field", edits: []edit{{"servicemonitor.yaml", "      path: /metrics\n", "      path: /metrics\n      honorLabelz: true\n"}},
			want: `unknown field "spec.endpoints[0].honorLabelz"`},
		{name: "unknown airlock config key", values: map[string]any{"config": map[string]any{"policy": map[string]any{"dri": "/x"}}},
			want: "field dri not found"},
		{name: "privileged container", edits: []edit{{"daemonset.yaml", "privileged: false", "privileged: true"}},
			want: "privileged must be set false"},
		{name: "host PID", edits: []edit{{"daemonset.yaml", "hostPID: false", "hostPID: true"}},
			want: "hostPID true"},
		{name: "unjustified capability", edits: []edit{{"daemonset.yaml", "                - KILL\n", "                - KILL\n                - SYS_MODULE\n"}},
			want: "adds SYS_MODULE, which nothing justifies"},
		{name: "capabilities kept", edits: []edit{{"daemonset.yaml", "drop: [ALL]", "drop: [NET_RAW]"}},
			want: "must drop ALL"},
		{name: "writable root", edits: []edit{{"daemonset.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false"}},
			want: "readOnlyRootFilesystem must be true"},
		{name: "bidirectional mount", edits: []edit{{"daemonset.yaml", "mountPropagation: HostToContainer", "mountPropagation: Bidirectional"}},
			want: "Bidirectional propagation"},
		{name: "airlock-cni not last", values: map[string]any{"cni": map[string]any{"plugins": []any{map[string]any{"type": "airlock-cni"}, map[string]any{"type": "bridge"}}}},
			want: "airlock-cni must be last and only last"},
		{name: "conflist not JSON", edits: []edit{{"configmap.yaml", `"cniVersion": "1.0.0",`, `"cniVersion": "1.0.0",,`}},
			want: "invalid character"},
		{name: "airlock-cni timeout out of bounds", values: map[string]any{"cni": map[string]any{"timeout": "10m"}},
			want: `airlock-cni: timeout: "10m" is not a duration`},
		{name: "misspelled airlock-cni key", edits: []edit{{"configmap.yaml", `"select": {`, `"selects": {`}},
			want: `airlock-cni: network configuration: json: unknown field "selects"`},
		{name: "annotation selection without the capability", edits: []edit{{"configmap.yaml", `"io.kubernetes.cri.pod-annotations": true`, `"io.kubernetes.cri.pod-annotations": false`}},
			want: "without the io.kubernetes.cri.pod-annotations capability"},
		{name: "plugin dials another socket", edits: []edit{{"configmap.yaml", `"socket": "/run/airlock/airlock.sock"`, `"socket": "/run/other.sock"`}},
			want: `airlock-cni socket "/run/other.sock", the daemon listens on "/run/airlock/airlock.sock"`},
		{name: "socket off the node", values: map[string]any{"config": map[string]any{"api": map[string]any{"socket": "/var/lib/airlock.sock"}}},
			want: "api.socket /var/lib/airlock.sock: not on any volume"},
		{name: "secrets file reads a missing key", values: map[string]any{"secrets": map[string]any{"values": map[string]any{"github-token": nil}}},
			want: "which Secret airlock-secrets does not hold"},
		{name: "bad secrets file", values: map[string]any{"secrets": map[string]any{"file": map[string]any{"bindings": []any{map[string]any{"secret": "nope", "host": "x.example"}}}}},
			want: "secret airlock-secrets secrets.yaml"},
		{name: "metrics port apart from the config", values: map[string]any{"metrics": map[string]any{"port": 9465}},
			want: "the container port is 9465, metrics.listen 0.0.0.0:9464"},
		{name: "no stdout audit stream", values: map[string]any{"config": map[string]any{"audit": map[string]any{"export": []any{}}}},
			want: "no jsonl sink on stdout"},
		{name: "node name not from the downward API", edits: []edit{{"daemonset.yaml", "fieldPath: spec.nodeName", "fieldPath: metadata.name"}},
			want: "NODE_NAME not from spec.nodeName"},
		{name: "no iptables lock", edits: []edit{{"daemonset.yaml", "              mountPath: /run/xtables.lock\n", "              mountPath: /run/xtables-lock\n"}},
			want: "does not mount /run/xtables.lock"},
		{name: "iptables lock not the node's", edits: []edit{{"daemonset.yaml", "            path: /run/xtables.lock\n", "            path: /var/run/other.lock\n"}},
			want: "want the node's /run/xtables.lock"},
		{name: "init container on another image", edits: []edit{{"daemonset.yaml", "        - name: install-cni\n          image: airlock:0.1.0", "        - name: install-cni\n          image: busybox:1"}},
			want: "runs busybox:1"},
	}
	if errs := failures(func(r reporter) { checkDeployment(r, decodeAll(r, renderChart(t, nil))) }); len(errs) > 0 {
		t.Fatalf("the default rendering fails the checks: %v", errs)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			docs := renderChart(t, tc.values)
			for _, e := range tc.edits {
				done := false
				for i := range docs {
					if strings.HasSuffix(docs[i].source, e.doc) && bytes.Contains(docs[i].body, []byte(e.old)) {
						docs[i].body = bytes.Replace(docs[i].body, []byte(e.old), []byte(e.new), 1)
						done = true
						break
					}
				}
				if !done {
					t.Fatalf("edit: %s holds no %q", e.doc, e.old)
				}
			}
			errs := failures(func(r reporter) { checkDeployment(r, decodeAll(r, docs)) })
			if !strings.Contains(strings.Join(errs, "\n"), tc.want) {
				t.Fatalf("got failures %q, want one containing %q", errs, tc.want)
			}
		})
	}
}

// TestChartValues: the values a cluster sets render into the objects, and
// what must stay consistent follows them.
func TestChartValues(t *testing.T) {
	t.Run("image, node selector, resources", func(t *testing.T) {
		o := decodeAll(t, renderChart(t, map[string]any{
			"image":        map[string]any{"repository": "registry.example/airlock", "tag": "v9.9.9", "pullPolicy": "Always"},
			"nodeSelector": map[string]any{"airlock.dev/egress": "true"},
			"resources":    map[string]any{"requests": map[string]any{"cpu": "250m", "memory": "512Mi"}, "limits": map[string]any{"memory": "4Gi"}},
		}))
		checkDeployment(t, o)
		pod := o.daemonSet.Spec.Template.Spec
		main := container(t, pod.Containers, "airlock")
		if main.Image != "registry.example/airlock:v9.9.9" || main.ImagePullPolicy != "Always" {
			t.Errorf("image: got %s (%s)", main.Image, main.ImagePullPolicy)
		}
		if pod.NodeSelector["airlock.dev/egress"] != "true" || len(pod.NodeSelector) != 2 {
			t.Errorf("nodeSelector: got %v, want the chart's kubernetes.io/os plus airlock.dev/egress", pod.NodeSelector)
		}
		if got := main.Resources.Limits.Memory().String(); got != "4Gi" {
			t.Errorf("memory limit: got %s, want 4Gi", got)
		}
	})
	t.Run("socket and run dir moved together", func(t *testing.T) {
		o := decodeAll(t, renderChart(t, map[string]any{
			"hostPaths": map[string]any{"run": "/run/airlock-b"},
			"config":    map[string]any{"api": map[string]any{"socket": "/run/airlock-b/api.sock"}},
		}))
		checkDeployment(t, o) // the conflist's socket and the hostPath follow
		if !strings.Contains(o.configMap.Data["05-airlock.conflist"], `"socket": "/run/airlock-b/api.sock"`) {
			t.Errorf("conflist: %s", o.configMap.Data["05-airlock.conflist"])
		}
	})
	t.Run("optional objects off", func(t *testing.T) {
		o := decodeAll(t, renderChart(t, map[string]any{
			"serviceMonitor": map[string]any{"enabled": false},
			"secrets":        map[string]any{"create": false, "name": "corp-airlock-secrets"},
			"cni":            map[string]any{"install": false},
		}))
		checkDeployment(t, o)
		pod := o.daemonSet.Spec.Template.Spec
		if o.serviceMonitor != nil || o.secret != nil || len(pod.InitContainers) != 0 {
			t.Errorf("got servicemonitor %v, secret %v, %d init containers; want none", o.serviceMonitor != nil, o.secret != nil, len(pod.InitContainers))
		}
		for _, v := range pod.Volumes {
			if v.Name == "cni-bin" || v.Name == "cni-conf" {
				t.Errorf("volume %s without cni.install", v.Name)
			}
			if v.Name == "secrets" && v.Secret.SecretName != "corp-airlock-secrets" {
				t.Errorf("secrets volume: got %s, want corp-airlock-secrets", v.Secret.SecretName)
			}
		}
	})
	t.Run("unknown value refused", func(t *testing.T) {
		for _, v := range []map[string]any{
			{"imagee": map[string]any{}},
			{"serviceMonitor": map[string]any{"enabeld": true}},
			{"cni": map[string]any{"confName": "airlock.conf"}},
		} {
			if _, err := render(v); err == nil || !strings.Contains(err.Error(), "values") {
				t.Errorf("values %v: got %v, want a schema error", v, err)
			}
		}
	})
}
