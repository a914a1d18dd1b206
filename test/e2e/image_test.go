package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/test/ociimage"
	"github.com/airlock-dev/airlock/test/poll"
	"github.com/airlock-dev/airlock/test/runctest"
)

// The DaemonSet's paths, which the daemon's container sees.
const (
	imgCADir  = "/etc/airlock/upstream-ca"
	imgRunDir = "/run/airlock"
	imgLogDir = "/var/log/airlock"
)

// xtablesLock is the node's iptables lock file, which the DaemonSet mounts.
const xtablesLock = "/run/xtables.lock"

// TestRootImageServeAttach runs the image `make image` builds the way the
// DaemonSet runs it, with nothing but the image and runc: the OCI layout is
// written from the binaries and the host's Debian packages (test/ociimage),
// unpacked by an independent reader (umoci), and run by runc as
// deploy/daemonset.yaml's airlock container says (its command, root with its
// capabilities only, no privilege escalation, a read-only root, the host's
// network, its volumes), with /proc/sys read-only and /proc masked as
// containerd and CRI-O do. `airlock serve` must start in it, attach a pod's
// namespace through the socket shared out of the container (as airlock-cni
// does), and the pod's egress then goes through it: the allowed host is
// reached from the gateway, the denied host sees no connection.
func TestRootImageServeAttach(t *testing.T) {
	e := newServeEnv(t) // roottest-gated
	if _, err := exec.LookPath("umoci"); err != nil {
		t.Fatalf("umoci not found (Debian's umoci; scripts/deps.sh installs it): %v", err)
	}
	host := imageHostDirs(t, e)
	bundle := buildImageBundle(t)
	editImageSpec(t, filepath.Join(bundle, "config.json"), host)

	daemon := runctest.Run(t, bundle)
	// Stopped with SIGTERM before runctest's SIGKILL, so the daemon detaches
	// and removes its own namespaces.
	t.Cleanup(func() { stopImageDaemon(t, daemon) })
	c := client.New(filepath.Join(host.run, "airlock.sock"))
	t.Cleanup(c.Close)
	if !poll.Within(2*time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.Health(ctx)
		return err == nil
	}) {
		out, _ := os.ReadFile(daemon.Log)
		t.Fatalf("airlock serve in the image did not answer within 2 minutes:\n%s", out)
	}

	pod := newPodNet(t)
	ctr := runctest.Start(t, runctest.Options{
		NetNS: pod.path,
		Files: map[string]string{"etc/resolv.conf": "nameserver " + w.net.DNSAddr.Addr().String() + "\n"},
	})
	id := sandboxID("image")
	req := api.AttachRequest{ID: id, NetNS: pod.path, Labels: map[string]string{"runtime": "runc", "image": "airlock"}}
	if err := c.Attach(context.Background(), req); err != nil {
		out, _ := os.ReadFile(daemon.Log)
		t.Fatalf("attach %s through the image's socket: %v\n%s", pod.path, err, out)
	}
	t.Cleanup(func() {
		if err := c.Detach(context.Background(), id); err != nil {
			t.Errorf("detach: %v", err)
		}
	})
	evil := snap(w.evil)
	checkAllowed(t, ctr, id)
	checkAttacks(t, pod, ctr, id)
	if got := snap(w.evil).sub(evil); got != (counts{}) {
		t.Errorf("denied host saw %+v (connections, requests, datagrams), want none", got)
	}
	checkRecords(t, e, id)
	if t.Failed() {
		out, _ := os.ReadFile(daemon.Log)
		t.Logf("the daemon's output:\n%s", out)
	}
}

// imageHost are the host directories the container mounts.
type imageHost struct {
	config, ca, run, log string
}

// imageHostDirs writes the daemon's config (the chart's default config, but
// for the fake internet's resolver, subnet and CA, the one allowed host and a
// loopback metrics port) and points e.audit at the log the container writes.
func imageHostDirs(t *testing.T, e *env) imageHost {
	t.Helper()
	h := imageHost{
		config: filepath.Join(e.dir, "img-config"), ca: filepath.Join(e.dir, "img-ca"),
		run: filepath.Join(e.dir, "img-run"), log: filepath.Join(e.dir, "img-log"),
	}
	f, err := os.OpenFile(xtablesLock, os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, d := range []string{h.config, h.ca, h.run, h.log} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ca, err := os.ReadFile(w.caFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.ca, "ca.pem"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf(`api: {group: "", socket: %s/airlock.sock}
audit: {file: %s/audit.jsonl}
metrics: {listen: "127.0.0.1:0"}
policy: {mode: enforce, allow: [other.example.test]}
dns: {upstreams: [%q]}
upstream: {allow_cidrs: [%q], ca_file: %s/ca.pem}
sandbox: {pool_size: 1}
`, imgRunDir, imgLogDir, w.net.DNSAddr.String(), w.net.Subnet.String(), imgCADir)
	if err := os.WriteFile(filepath.Join(h.config, "airlock.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	e.audit = filepath.Join(h.log, "audit.jsonl")
	return h
}

// buildImageBundle writes the image's OCI layout from the airlock binary the
// tests use and a fresh airlock-cni, and unpacks it with umoci.
func buildImageBundle(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(w.bin, filepath.Join(bin, "airlock")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"airlock-core", "airlock-init"} {
		if err := os.Symlink(filepath.Join(filepath.Dir(w.bin), name), filepath.Join(bin, name)); err != nil {
			t.Fatal(err) // built beside airlock by TestMain
		}
	}
	if err := buildPackage("./cmd/airlock-cni", filepath.Join(bin, "airlock-cni")); err != nil {
		t.Fatal(err)
	}
	tree, err := ociimage.Assemble(bin)
	if err != nil {
		t.Fatalf("assemble the image: %v", err)
	}
	layout := filepath.Join(dir, "layout")
	if _, err := tree.WriteLayout(layout, "test"); err != nil {
		t.Fatalf("write the OCI layout: %v", err)
	}
	bundle := filepath.Join(dir, "bundle")
	mustRun(t, "umoci", "unpack", "--image", layout+":test", bundle)
	return bundle
}

// daemonSetFile is the plain DaemonSet (the chart rendered with its
// defaults), which the image test follows.
const daemonSetFile = "../../deploy/daemonset.yaml"

// editImageSpec turns umoci's config (the image's entrypoint and user) into
// the airlock container of deploy/daemonset.yaml: its command and args, user,
// capabilities, privilege escalation, read-only root, host network, and its
// volumes, each hostPath bound from the directory the test gives it (h, or
// the node's own for /run/netns, /sys/fs/cgroup and /run/xtables.lock) and
// each emptyDir a tmpfs. A volume the test does not know fails it: a change
// to the DaemonSet's mounts must be followed here.
func editImageSpec(t *testing.T, path string, h imageHost) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if s.Process.User.UID != ociimage.NonRootUID {
		t.Errorf("the image's user: got uid %d, want %d", s.Process.User.UID, ociimage.NonRootUID)
	}
	if len(s.Process.Args) == 0 || s.Process.Args[0] != "/usr/local/bin/airlock" {
		t.Errorf("the image's entrypoint: got %q, want /usr/local/bin/airlock", s.Process.Args)
	}
	ds, c := daemonSetContainer(t)
	sc := c.SecurityContext
	if sc == nil || sc.RunAsUser == nil || sc.Capabilities == nil || sc.AllowPrivilegeEscalation == nil || sc.ReadOnlyRootFilesystem == nil {
		t.Fatalf("%s: the airlock container's securityContext lacks runAsUser, capabilities, allowPrivilegeEscalation or readOnlyRootFilesystem", daemonSetFile)
	}
	s.Process.Terminal = false
	s.Process.Args = append(slices.Concat(c.Command, c.Args), "--drain-timeout", "5s")
	s.Process.Env = append(s.Process.Env, "NODE_NAME=alk-image-node")
	s.Process.User = specs.User{UID: uint32(*sc.RunAsUser), GID: uint32(*sc.RunAsUser)}
	var caps []string
	for _, c := range sc.Capabilities.Add {
		caps = append(caps, "CAP_"+string(c))
	}
	s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}
	s.Process.NoNewPrivileges = !*sc.AllowPrivilegeEscalation
	s.Root.Readonly = *sc.ReadOnlyRootFilesystem
	if !ds.Spec.Template.Spec.HostNetwork {
		t.Fatalf("%s: hostNetwork is false; this test runs the daemon on the host's network", daemonSetFile)
	}
	// pid, ipc, uts and mount of its own; the host's network.
	s.Linux.Namespaces = []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace},
		{Type: specs.UTSNamespace}, {Type: specs.MountNamespace}}
	// What containerd and CRI-O mask and make read-only in a container that
	// is not privileged.
	s.Linux.MaskedPaths = []string{"/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
		"/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware"}
	s.Linux.ReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
	var mounts []specs.Mount
	for _, m := range s.Mounts {
		if m.Destination != "/sys/fs/cgroup" {
			mounts = append(mounts, m)
		}
	}
	s.Mounts = append(mounts, daemonSetMounts(t, ds, c, h)...)
	if b, err = json.MarshalIndent(&s, "", "\t"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// daemonSetContainer reads deploy/daemonset.yaml and returns it and its
// airlock container.
func daemonSetContainer(t *testing.T) (*appsv1.DaemonSet, *corev1.Container) {
	t.Helper()
	b, err := os.ReadFile(daemonSetFile)
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(b, &ds); err != nil {
		t.Fatalf("%s: %v", daemonSetFile, err)
	}
	for i, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "airlock" {
			return &ds, &ds.Spec.Template.Spec.Containers[i]
		}
	}
	t.Fatalf("%s: no airlock container", daemonSetFile)
	return nil, nil
}

// daemonSetMounts are the container's volume mounts as OCI mounts.
func daemonSetMounts(t *testing.T, ds *appsv1.DaemonSet, c *corev1.Container, h imageHost) []specs.Mount {
	t.Helper()
	// Where each of the DaemonSet's volumes comes from in the test.
	sources := map[string]string{
		"config": h.config, "run": h.run, "log": h.log,
		"netns": "/run/netns", "cgroup": "/sys/fs/cgroup", "xtables-lock": xtablesLock,
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		volumes[v.Name] = v
	}
	// The fake internet's CA, which only the test's config names.
	out := []specs.Mount{{Destination: imgCADir, Type: "bind", Source: h.ca, Options: []string{"rbind", "ro"}}}
	for _, m := range c.VolumeMounts {
		v, ok := volumes[m.Name]
		switch {
		case !ok:
			t.Fatalf("%s: mount %s of a volume the pod does not have", daemonSetFile, m.Name)
		case m.Name == "secrets":
			continue // the test's config reads no secrets file
		case v.EmptyDir != nil:
			out = append(out, specs.Mount{Destination: m.MountPath, Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "size=64m"}})
			continue
		}
		src, ok := sources[m.Name]
		if !ok {
			t.Fatalf("%s: volume %s at %s: the image test does not know where it comes from; add it to daemonSetMounts", daemonSetFile, m.Name, m.MountPath)
		}
		opts := []string{"rbind", "rw"}
		if m.ReadOnly {
			opts[1] = "ro"
		}
		if m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationHostToContainer {
			opts = append(opts, "rslave")
		}
		out = append(out, specs.Mount{Destination: m.MountPath, Type: "bind", Source: src, Options: opts})
	}
	return out
}

// stopImageDaemon sends the daemon SIGTERM and waits up to a minute for its
// container to stop.
func stopImageDaemon(t *testing.T, c *runctest.Container) {
	if err := c.Signal(syscall.SIGTERM); err != nil {
		t.Logf("%v", err)
		return
	}
	if !poll.Within(time.Minute, func() bool {
		st := c.Status()
		return st == "" || st == specs.StateStopped
	}) {
		t.Errorf("the daemon's container did not stop within a minute of SIGTERM")
	}
}
