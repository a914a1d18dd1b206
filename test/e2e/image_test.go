package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/test/ociimage"
	"github.com/airlock-dev/airlock/test/poll"
	"github.com/airlock-dev/airlock/test/runctest"
)

// The DaemonSet's paths, which the daemon's container sees.
const (
	imgConfigDir = "/etc/airlock/config"
	imgCADir     = "/etc/airlock/upstream-ca"
	imgRunDir    = "/run/airlock"
	imgLogDir    = "/var/log/airlock"
)

// xtablesLock is the node's iptables lock file, which the DaemonSet mounts.
const xtablesLock = "/run/xtables.lock"

// imageCaps are the capabilities deploy/daemonset.yaml adds (test/deploy
// keeps that list justified); the container gets these and no others.
var imageCaps = []string{"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_NET_BIND_SERVICE", "CAP_SYS_ADMIN", "CAP_SETUID",
	"CAP_SETGID", "CAP_SETPCAP", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_MKNOD", "CAP_KILL"}

// TestRootImageServeAttach runs the image `make image` builds the way the
// DaemonSet runs it, with nothing but the image and runc: the OCI layout is
// written from the binaries and the host's Debian packages (test/ociimage),
// unpacked by an independent reader (umoci), and run by runc as root with the
// DaemonSet's capabilities only, a read-only root, the host's network, /proc
// /sys masked as container runtimes do, and the DaemonSet's host
// directories bind-mounted. `airlock serve` must start in it, attach a pod's
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

// editImageSpec turns umoci's config (the image's entrypoint and user) into
// the DaemonSet's container.
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
	s.Process.Terminal = false
	s.Process.Args = []string{"/usr/local/bin/airlock", "serve", "--config", imgConfigDir + "/airlock.yaml",
		"--run-dir", imgRunDir + "/serve", "--drain-timeout", "5s"}
	s.Process.Env = append(s.Process.Env, "NODE_NAME=alk-image-node")
	// runAsUser: 0, the DaemonSet's capabilities, allowPrivilegeEscalation: false.
	s.Process.User = specs.User{UID: 0, GID: 0}
	s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: imageCaps, Effective: imageCaps, Permitted: imageCaps}
	s.Process.NoNewPrivileges = true
	s.Root.Readonly = true
	// hostNetwork: true; pid, ipc, uts and mount of its own.
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
	bind := func(src, dst string, opts ...string) specs.Mount {
		return specs.Mount{Destination: dst, Type: "bind", Source: src, Options: append([]string{"rbind"}, opts...)}
	}
	tmpfs := func(dst string) specs.Mount {
		return specs.Mount{Destination: dst, Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "size=64m"}}
	}
	s.Mounts = append(mounts,
		bind(h.config, imgConfigDir, "ro"),
		bind(h.ca, imgCADir, "ro"),
		bind(h.run, imgRunDir, "rw"),
		bind(h.log, imgLogDir, "rw"),
		// mountPropagation: HostToContainer.
		bind("/run/netns", "/run/netns", "rw", "rslave"),
		bind("/sys/fs/cgroup", "/sys/fs/cgroup", "rw"),
		// iptables-legacy's lock, shared with the node's other users.
		bind(xtablesLock, xtablesLock, "rw"),
		tmpfs("/tmp"), tmpfs("/run/airlock-trust"),
	)
	if b, err = json.MarshalIndent(&s, "", "\t"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
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
