package deploy

import (
	"bytes"
	"flag"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/airlock-dev/airlock/cniplugin"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/secrets"
)

var update = flag.Bool("update", false, "rewrite deploy/*.yaml from the chart")

// justifiedCaps are the capabilities the daemon may add, each for the reason
// the DaemonSet's comment gives (deploy/README.md has the table). Anything
// else added fails the test.
var justifiedCaps = map[corev1.Capability]string{
	"NET_ADMIN":        "iptables, routes, sysctls, lo and NFLOG in each namespace",
	"NET_RAW":          "iptables-legacy's raw socket",
	"NET_BIND_SERVICE": "the DNS filter's port 53 in each namespace",
	"SYS_ADMIN":        "setns, unshare, namespace bind mounts, the executor's namespaces and mounts",
	"SETUID":           "commands run as the sandbox's uid; user namespace id maps",
	"SETGID":           "commands run as the sandbox's gid",
	"SETPCAP":          "commands' bounding and ambient capabilities dropped",
	"CHOWN":            "the sandbox's $HOME and workspace chowned to its uid",
	"DAC_OVERRIDE":     "files a sandbox owns written and removed by the daemon",
	"FOWNER":           "files a sandbox owns written and removed by the daemon",
	"MKNOD":            "the sandbox's /dev nodes",
	"KILL":             "timeouts and teardown signal the sandbox's processes",
}

// mountDirs are where the DaemonSet mounts its config and secrets.
const (
	configMount  = "/etc/airlock/config"
	secretsMount = "/etc/airlock/secrets"
)

func TestChartRendersStrictly(t *testing.T) {
	o := decodeAll(t, renderChart(t, nil))
	checkDeployment(t, o)
}

func TestStaticManifestsDecodeStrictly(t *testing.T) {
	base := staticFiles(t, deployDir)
	for _, docs := range [][]manifest{base, append(base, staticFiles(t, filepath.Join(deployDir, monitoringDir))...)} {
		o := decodeAll(t, docs)
		if len(o.namespaces) != 1 || o.namespaces[0].Name != releaseNamespace {
			t.Fatalf("namespace.yaml: got %d namespaces, want exactly %q", len(o.namespaces), releaseNamespace)
		}
		checkDeployment(t, o)
	}
}

// TestStaticMatchesChart: the plain manifests are the chart rendered with its
// defaults, less the Helm-only lines, deploy/ holding all but the objects
// that need the Prometheus Operator, which the monitoring overlay adds;
// -update rewrites them.
func TestStaticMatchesChart(t *testing.T) {
	want := staticFromChart(t)
	if *update {
		for name, body := range want {
			if err := os.WriteFile(filepath.Join(deployDir, staticPath(name)), body, 0o644); err != nil {
				t.Fatalf("%v", err)
			}
		}
	}
	wantRes := map[string][]string{deployDir: {"namespace.yaml"}, filepath.Join(deployDir, monitoringDir): nil}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		dir := filepath.Join(deployDir, filepath.Dir(staticPath(name)))
		wantRes[dir] = append(wantRes[dir], name)
	}
	for dir, res := range wantRes {
		k := readKustomization(t, dir)
		if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
			t.Errorf("%s/kustomization.yaml: got %s %s, want kustomize.config.k8s.io/v1beta1 Kustomization", dir, k.APIVersion, k.Kind)
		}
		if !slices.Equal(k.Resources, res) {
			t.Errorf("%s/kustomization.yaml resources: got %v, want %v", dir, k.Resources, res)
		}
		onDisk, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, p := range onDisk {
			if n := filepath.Base(p); n != "kustomization.yaml" && !slices.Contains(k.Resources, n) {
				t.Errorf("%s is not a resource of %s/kustomization.yaml", p, dir)
			}
		}
	}
	for name, body := range want {
		got, err := os.ReadFile(filepath.Join(deployDir, staticPath(name)))
		if err != nil {
			t.Errorf("deploy/%s: %v (go test ./test/deploy -update writes it)", staticPath(name), err)
			continue
		}
		if !bytes.Equal(got, body) {
			t.Errorf("deploy/%s differs from the chart rendered with its defaults (edit the chart, then go test ./test/deploy -update):\n got:\n%s\nwant:\n%s", staticPath(name), got, body)
		}
	}
}

// checkDeployment checks what must hold of any rendering: the objects are
// all there and point at each other, the config and secrets files pass
// airlock's own loaders, the CNI list chains airlock-cni last, and the pod
// takes no privilege it does not need.
func checkDeployment(t reporter, o objects) {
	t.Helper()
	if o.configMap == nil || o.daemonSet == nil || o.service == nil {
		t.Fatalf("missing objects: configmap %v, daemonset %v, service %v", o.configMap != nil, o.daemonSet != nil, o.service != nil)
	}
	pod := &o.daemonSet.Spec.Template.Spec
	main := container(t, pod.Containers, "airlock")
	cfg := checkConfig(t, o, main)
	checkSecrets(t, o, pod, main, cfg)
	checkCNI(t, o, pod, cfg)
	checkSecurity(t, pod)
	checkXtablesLock(t, pod, main)
	checkWiring(t, o, main, cfg)
}

// checkXtablesLock: iptables-legacy takes /run/xtables.lock, which it cannot
// create on the read-only root; the daemon gets the node's (the lock is the
// node's other iptables users' too). TestRootImageServeAttach runs the image
// this way.
func checkXtablesLock(t reporter, pod *corev1.PodSpec, main *corev1.Container) {
	t.Helper()
	const lock = "/run/xtables.lock"
	for _, m := range main.VolumeMounts {
		if m.MountPath != lock {
			continue
		}
		_, v := mountFor(t, pod, main, m.Name)
		if v.HostPath == nil || v.HostPath.Path != lock || v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathFileOrCreate || m.ReadOnly {
			t.Errorf("%s: got volume %s %+v (read-only %v), want the node's %s, FileOrCreate, writable", lock, m.Name, v.VolumeSource, m.ReadOnly, lock)
		}
		return
	}
	t.Errorf("the airlock container does not mount %s: iptables-legacy fails on the read-only root", lock)
}

func container(t reporter, cs []corev1.Container, name string) *corev1.Container {
	t.Helper()
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

// mountFor returns the container's mount of the volume and the volume.
func mountFor(t reporter, pod *corev1.PodSpec, c *corev1.Container, volume string) (corev1.VolumeMount, corev1.Volume) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.Name != volume {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == volume {
				return m, v
			}
		}
		t.Fatalf("container %s mounts volume %q, which the pod does not have", c.Name, volume)
	}
	t.Fatalf("container %s does not mount volume %q", c.Name, volume)
	return corev1.VolumeMount{}, corev1.Volume{}
}

// mountOf returns the mount of c whose path holds p (the deepest one).
func mountOf(c *corev1.Container, p string) (corev1.VolumeMount, bool) {
	var best corev1.VolumeMount
	found := false
	for _, m := range c.VolumeMounts {
		if (p == m.MountPath || strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/")) && len(m.MountPath) > len(best.MountPath) {
			best, found = m, true
		}
	}
	return best, found
}

// checkConfig decodes airlock.yaml with config.Decode (strict, defaults,
// validation) and checks that the daemon reads it where it is mounted and
// keeps its socket and log on the node.
func checkConfig(t reporter, o objects, main *corev1.Container) config.Config {
	t.Helper()
	raw, ok := o.configMap.Data["airlock.yaml"]
	if !ok {
		t.Fatalf("configmap %s has no airlock.yaml", o.configMap.Name)
	}
	cfg, err := config.Decode(strings.NewReader(raw))
	if err != nil {
		t.Fatalf("configmap airlock.yaml: %v", err)
	}
	pod := &o.daemonSet.Spec.Template.Spec
	m, v := mountFor(t, pod, main, "config")
	if v.ConfigMap == nil || v.ConfigMap.Name != o.configMap.Name || m.MountPath != configMount {
		t.Errorf("config volume: got %+v at %s, want configmap %s at %s", v.VolumeSource, m.MountPath, o.configMap.Name, configMount)
	}
	wantArgs := []string{"serve", "--config", path.Join(configMount, "airlock.yaml")}
	if !slices.Equal(main.Command, []string{"/usr/local/bin/airlock"}) || len(main.Args) < 3 || !slices.Equal(main.Args[:3], wantArgs) {
		t.Errorf("command %v, args %v: want /usr/local/bin/airlock %v ...", main.Command, main.Args, wantArgs)
	}
	// The socket and the run dir on the node, for airlock-cni and re-attach.
	for what, p := range map[string]string{"api.socket": cfg.API.Socket, "--run-dir": argAfter(main.Args, "--run-dir"), "audit.file": cfg.Audit.File} {
		hm, ok := mountOf(main, p)
		if !ok {
			t.Errorf("%s %s: not on any volume (the root filesystem is read-only and not the node's)", what, p)
			continue
		}
		_, vol := mountFor(t, pod, main, hm.Name)
		if vol.HostPath == nil || hm.ReadOnly {
			t.Errorf("%s %s: on volume %s, want a writable hostPath", what, p, hm.Name)
		}
	}
	if cfg.API.Group != "" {
		t.Errorf("api.group: got %q, want \"\" (root only: airlock-cni runs as root on the node)", cfg.API.Group)
	}
	// One audit stream per node: the records go to stdout as JSON lines and
	// carry the node's name, which the pod learns from the downward API.
	var stdout bool
	for _, e := range cfg.Audit.Export {
		stdout = stdout || e.Format == "jsonl" && e.Endpoint == "-"
	}
	if !stdout {
		t.Errorf("audit.export: no jsonl sink on stdout (endpoint \"-\"): %+v", cfg.Audit.Export)
	}
	if cfg.Audit.Node == "" && !envFromField(main, "NODE_NAME", "spec.nodeName") {
		t.Errorf("audit.node unset and NODE_NAME not from spec.nodeName: records would carry the pod's name")
	}
	return cfg
}

func argAfter(args []string, flag string) string {
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

func envFromField(c *corev1.Container, name, field string) bool {
	for _, e := range c.Env {
		if e.Name == name {
			return e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == field
		}
	}
	return false
}

// checkSecrets parses the secrets file with secrets.Parse and checks every
// file it reads is a key of the same Secret.
func checkSecrets(t reporter, o objects, pod *corev1.PodSpec, main *corev1.Container, cfg config.Config) {
	t.Helper()
	if cfg.Secrets.File == "" {
		return
	}
	m, v := mountFor(t, pod, main, "secrets")
	if v.Secret == nil || m.MountPath != secretsMount || !m.ReadOnly {
		t.Fatalf("secrets volume: got %+v at %s (read-only %v), want a Secret read-only at %s", v.VolumeSource, m.MountPath, m.ReadOnly, secretsMount)
	}
	if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o077 != 0 {
		t.Errorf("secrets volume defaultMode: got %v, want no group or other bits", v.Secret.DefaultMode)
	}
	if path.Dir(cfg.Secrets.File) != secretsMount {
		t.Fatalf("secrets.file %s: not in the Secret's mount %s", cfg.Secrets.File, secretsMount)
	}
	if o.secret == nil {
		return // secrets.create false: an existing Secret, not rendered
	}
	if o.secret.Name != v.Secret.SecretName {
		t.Errorf("secret: got %s, the pod mounts %s", o.secret.Name, v.Secret.SecretName)
	}
	data := map[string]string{}
	for k, b := range o.secret.Data {
		data[k] = string(b)
	}
	maps.Copy(data, o.secret.StringData)
	raw, ok := data[path.Base(cfg.Secrets.File)]
	if !ok {
		t.Fatalf("secret %s has no %s", o.secret.Name, path.Base(cfg.Secrets.File))
	}
	sc, err := secrets.Parse([]byte(raw))
	if err != nil {
		t.Fatalf("secret %s %s: %v", o.secret.Name, path.Base(cfg.Secrets.File), err)
	}
	for _, s := range sc.Secrets {
		if s.File == "" {
			continue
		}
		if path.Dir(s.File) != secretsMount {
			t.Errorf("secret %s reads %s, outside the Secret's mount", s.ID, s.File)
		} else if _, ok := data[path.Base(s.File)]; !ok {
			t.Errorf("secret %s reads %s, which Secret %s does not hold", s.ID, s.File, o.secret.Name)
		}
	}
}

// checkCNI parses the chained config list: valid JSON, the main plugin(s)
// first, airlock-cni last with the daemon's socket, installed by the init
// container into the node's CNI dirs.
func checkCNI(t reporter, o objects, pod *corev1.PodSpec, cfg config.Config) {
	t.Helper()
	if len(pod.InitContainers) == 0 {
		return // cni.install false
	}
	var name, raw string
	for k, v := range o.configMap.Data {
		if strings.HasSuffix(k, ".conflist") {
			if name != "" {
				t.Fatalf("configmap: two config lists, %s and %s", name, k)
			}
			name, raw = k, v
		}
	}
	if name == "" {
		t.Fatalf("configmap: no .conflist")
	}
	// As a runtime reads it (libcni), then airlock-cni's entry as the plugin
	// does (strictly: a misspelt key fails).
	list, err := libcni.ConfListFromBytes([]byte(raw))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if list.CNIVersion != "1.0.0" || list.Name == "" || len(list.Plugins) < 2 {
		t.Fatalf("%s: got cniVersion %q, name %q, %d plugins; want 1.0.0, a name, a main plugin and airlock-cni", name, list.CNIVersion, list.Name, len(list.Plugins))
	}
	for i, p := range list.Plugins {
		last := i == len(list.Plugins)-1
		if (p.Network.Type == "airlock-cni") != last {
			t.Errorf("%s plugins[%d]: type %s; airlock-cni must be last and only last", name, i, p.Network.Type)
		}
	}
	ac, err := cniplugin.ParseConfig(list.Plugins[len(list.Plugins)-1].Bytes)
	if err != nil {
		t.Fatalf("%s: airlock-cni's entry: %v", name, err)
	}
	if ac.Socket != cfg.API.Socket {
		t.Errorf("%s: airlock-cni socket %q, the daemon listens on %q", name, ac.Socket, cfg.API.Socket)
	}
	if !ac.Select.All && !ac.Capabilities[cniplugin.PodAnnotationsCapability] {
		t.Errorf("%s: airlock-cni selects by annotation %q without the %s capability: the runtime would pass none", name, ac.Select.Annotation, cniplugin.PodAnnotationsCapability)
	}
	ic := container(t, pod.InitContainers, "install-cni")
	script := strings.Join(ic.Command, " ")
	for _, want := range []string{"/usr/local/bin/airlock-cni", "/host/cni/bin/airlock-cni", "/etc/airlock/cni/" + name, "/host/cni/net.d/" + name} {
		if !strings.Contains(script, want) {
			t.Errorf("install-cni: the script does not name %s:\n%s", want, script)
		}
	}
	for vol, mnt := range map[string]string{"cni-bin": "/host/cni/bin", "cni-conf": "/host/cni/net.d"} {
		m, v := mountFor(t, pod, ic, vol)
		if v.HostPath == nil || m.MountPath != mnt {
			t.Errorf("install-cni volume %s: got %+v at %s, want a hostPath at %s", vol, v.VolumeSource, m.MountPath, mnt)
		}
	}
}

// checkSecurity: no privileged container, no host PID or IPC, every
// capability dropped but the justified ones, no privilege escalation, a
// read-only root, no API token, no mount propagating back to the node.
func checkSecurity(t reporter, pod *corev1.PodSpec) {
	t.Helper()
	if pod.HostPID || pod.HostIPC {
		t.Errorf("hostPID %v, hostIPC %v: want neither", pod.HostPID, pod.HostIPC)
	}
	if !pod.HostNetwork {
		t.Errorf("hostNetwork: want true (the socket and metrics are the node's)")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("automountServiceAccountToken: want false (airlock never calls the API server)")
	}
	for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("container %s: no securityContext", c.Name)
			continue
		}
		if sc.Privileged == nil || *sc.Privileged {
			t.Errorf("container %s: privileged must be set false", c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("container %s: allowPrivilegeEscalation must be false", c.Name)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("container %s: readOnlyRootFilesystem must be true", c.Name)
		}
		if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("container %s: seccompProfile: got %v, want RuntimeDefault", c.Name, sc.SeccompProfile)
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("container %s: capabilities must drop ALL", c.Name)
			continue
		}
		for _, cp := range sc.Capabilities.Add {
			if _, ok := justifiedCaps[cp]; !ok || c.Name != "airlock" {
				t.Errorf("container %s adds %s, which nothing justifies", c.Name, cp)
			}
		}
		for _, m := range c.VolumeMounts {
			if m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional {
				t.Errorf("container %s mount %s: Bidirectional propagation (needs privileged)", c.Name, m.Name)
			}
		}
	}
	// Every hostPath is one the README explains.
	want := map[string]bool{"run": true, "log": true, "netns": true, "cgroup": true, "xtables-lock": true, "cni-bin": true, "cni-conf": true}
	for _, v := range pod.Volumes {
		if v.HostPath != nil && !want[v.Name] {
			t.Errorf("volume %s: hostPath %s is not one deploy/README.md explains", v.Name, v.HostPath.Path)
		}
	}
}

// checkWiring: the selectors match, the metrics port is the one the config
// listens on, and the ServiceMonitor scrapes the Service's port.
func checkWiring(t reporter, o objects, main *corev1.Container, cfg config.Config) {
	t.Helper()
	ds := o.daemonSet
	podLabels := labels.Set(ds.Spec.Template.Labels)
	if ds.Spec.Selector == nil || !labels.SelectorFromSet(ds.Spec.Selector.MatchLabels).Matches(podLabels) {
		t.Errorf("daemonset selector %v does not match its pods' labels %v", ds.Spec.Selector, podLabels)
	}
	if !labels.SelectorFromSet(o.service.Spec.Selector).Matches(podLabels) {
		t.Errorf("service selector %v does not match the daemon's pods", o.service.Spec.Selector)
	}
	_, port, err := net.SplitHostPort(cfg.Metrics.Listen)
	if err != nil {
		t.Fatalf("metrics.listen %q: %v", cfg.Metrics.Listen, err)
	}
	var cport int32
	for _, p := range main.Ports {
		if p.Name == "metrics" {
			cport = p.ContainerPort
		}
	}
	if strconv.Itoa(int(cport)) != port {
		t.Errorf("metrics: the container port is %d, metrics.listen %s", cport, cfg.Metrics.Listen)
	}
	if len(o.service.Spec.Ports) != 1 || o.service.Spec.Ports[0].TargetPort.StrVal != "metrics" {
		t.Errorf("service ports: got %+v, want one targeting the metrics port", o.service.Spec.Ports)
	}
	if img := main.Image; img == "" || strings.HasSuffix(img, ":") {
		t.Errorf("image %q: no tag", img)
	}
	for _, c := range ds.Spec.Template.Spec.InitContainers {
		if c.Image != main.Image {
			t.Errorf("init container %s runs %s, the daemon %s: want the same image", c.Name, c.Image, main.Image)
		}
	}
	sm := o.serviceMonitor
	if sm == nil {
		return
	}
	if sm.Namespace != o.service.Namespace || !slices.Contains(sm.Spec.NamespaceSelector.MatchNames, o.service.Namespace) {
		t.Errorf("servicemonitor: namespace %s, matchNames %v; the service is in %s", sm.Namespace, sm.Spec.NamespaceSelector.MatchNames, o.service.Namespace)
	}
	if !labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(o.service.Labels)) {
		t.Errorf("servicemonitor selector %v does not match the service's labels %v", sm.Spec.Selector.MatchLabels, o.service.Labels)
	}
	if len(sm.Spec.Endpoints) == 0 {
		t.Fatalf("servicemonitor: no endpoints")
	}
	for i, e := range sm.Spec.Endpoints {
		if e.Port != o.service.Spec.Ports[0].Name {
			t.Errorf("servicemonitor endpoints[%d].port %q: the service's port is %q", i, e.Port, o.service.Spec.Ports[0].Name)
		}
		if !promDuration.MatchString(e.Interval) {
			t.Errorf("servicemonitor endpoints[%d].interval %q: not a Prometheus duration", i, e.Interval)
		}
	}
}
