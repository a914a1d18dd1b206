package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go"
	ocispecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/cniplugin"
	"github.com/airlock-dev/airlock/test/poll"
	"github.com/airlock-dev/airlock/test/runctest"
)

// criTimeout bounds one CRI call.
const criTimeout = 2 * time.Minute

// containerdCRI is Debian's containerd with its CRI plugin, every piece of its
// state (root, state, sockets, CNI configs, the pod cgroup parent) its own,
// driven over the CRI as a kubelet would.
type containerdCRI struct {
	t      *testing.T
	dir    string
	sock   string
	cgroup string
	rt     cri.RuntimeServiceClient
	img    cri.ImageServiceClient
}

// newContainerd starts containerd with the CRI plugin running the CNI chain
// from netDir with the plugins of binDir, and the sandbox (pause) image
// pause, which the caller imports before the first pod.
func newContainerd(t *testing.T, binDir, netDir, pause string) *containerdCRI {
	t.Helper()
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found (Debian's containerd; scripts/deps.sh installs it): %v", bin, err)
		}
	}
	dir, err := os.MkdirTemp("", "alk-ctrd-") // short: socket paths
	if err != nil {
		t.Fatal(err)
	}
	c := &containerdCRI{t: t, dir: dir, sock: filepath.Join(dir, "c.sock"), cgroup: fmt.Sprintf("/alk-ctrd-%d-%d", os.Getpid(), time.Now().UnixNano())}
	conf := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.internal.v1.tracing", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # The pod's oom_score_adj (-998) is not lowered past the test's own: a
  # process without CAP_SYS_RESOURCE (this machine's sessions) may not.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.sock, filepath.Join(dir, "t.sock"), filepath.Join(dir, "opt"),
		pause, binDir, netDir, filepath.Join(dir, "runc"))
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	daemon := exec.Command("containerd", "--config", cfg)
	daemon.Stdout, daemon.Stderr = logf, logf
	daemon.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- daemon.Wait() }()
	t.Cleanup(func() {
		_ = daemon.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = daemon.Process.Kill()
			<-exited
		}
		logf.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logf.Name())
			t.Logf("containerd's log:\n%s", tail(out, 8000))
		}
		for _, m := range mountsBelow(dir) {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
		dirs, _ := filepath.Glob(filepath.Join(runctest.CgroupRoot, "*", c.cgroup))
		for _, d := range dirs {
			if err := removeCgroupTree(d); err != nil {
				t.Errorf("remove containerd's pod cgroups: %v", err)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove containerd's state: %v", err)
		}
	})
	if !poll.Within(30*time.Second, func() bool {
		_, err := os.Stat(c.sock)
		return err == nil
	}) {
		out, _ := os.ReadFile(logf.Name())
		t.Fatalf("containerd did not open %s:\n%s", c.sock, tail(out, 8000))
	}
	conn, err := grpc.NewClient("unix://"+c.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c.rt, c.img = cri.NewRuntimeServiceClient(conn), cri.NewImageServiceClient(conn)
	if !poll.Within(30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := c.rt.Status(ctx, &cri.StatusRequest{})
		return err == nil && st.GetStatus() != nil
	}) {
		out, _ := os.ReadFile(logf.Name())
		t.Fatalf("containerd's CRI did not answer:\n%s", tail(out, 8000))
	}
	return c
}

func (c *containerdCRI) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), criTimeout)
}

// importImage imports an OCI archive of Debian's static busybox as name
// into the CRI's namespace, offline (`ctr images import`).
func (c *containerdCRI) importImage(name string) {
	c.t.Helper()
	archive := filepath.Join(c.dir, "image.tar")
	if err := writeBusyboxOCI(archive, name); err != nil {
		c.t.Fatal(err)
	}
	out, err := exec.Command("ctr", "--address", c.sock, "--namespace", "k8s.io", "images", "import", archive).CombinedOutput()
	if err != nil {
		c.t.Fatalf("ctr images import: %v\n%s", err, out)
	}
}

// writeBusyboxOCI writes an OCI image archive (a tar of an image layout)
// whose one layer is writeBusyboxTar's root filesystem and whose command
// sleeps, so it serves as the pod's sandbox (pause) image too.
func writeBusyboxOCI(path, name string) error {
	rootfs := path + ".rootfs"
	if err := writeBusyboxTar(rootfs); err != nil {
		return err
	}
	raw, err := os.ReadFile(rootfs)
	if err != nil {
		return err
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(raw); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	blobs := map[digest.Digest][]byte{}
	put := func(b []byte) digest.Digest {
		d := digest.Digest(fmt.Sprintf("sha256:%x", sha256.Sum256(b)))
		blobs[d] = b
		return d
	}
	layer := put(gz.Bytes())
	config, err := json.Marshal(ocispecv1.Image{
		Platform: ocispecv1.Platform{Architecture: "amd64", OS: "linux"},
		Config:   ocispecv1.ImageConfig{Cmd: []string{"/bin/sleep", "2147483"}, Env: []string{"PATH=/bin"}},
		RootFS:   ocispecv1.RootFS{Type: "layers", DiffIDs: []digest.Digest{digest.FromBytes(raw)}},
	})
	if err != nil {
		return err
	}
	cfg := put(config)
	manifest, err := json.Marshal(ocispecv1.Manifest{
		Versioned: ocispec.Versioned{SchemaVersion: 2},
		MediaType: ocispecv1.MediaTypeImageManifest,
		Config:    ocispecv1.Descriptor{MediaType: ocispecv1.MediaTypeImageConfig, Digest: cfg, Size: int64(len(config))},
		Layers:    []ocispecv1.Descriptor{{MediaType: ocispecv1.MediaTypeImageLayerGzip, Digest: layer, Size: int64(gz.Len())}},
	})
	if err != nil {
		return err
	}
	man := put(manifest)
	index, err := json.Marshal(ocispecv1.Index{
		Versioned: ocispec.Versioned{SchemaVersion: 2},
		MediaType: ocispecv1.MediaTypeImageIndex,
		Manifests: []ocispecv1.Descriptor{{
			MediaType: ocispecv1.MediaTypeImageManifest, Digest: man, Size: int64(len(manifest)),
			Platform:    &ocispecv1.Platform{Architecture: "amd64", OS: "linux"},
			Annotations: map[string]string{"io.containerd.image.name": name, ocispecv1.AnnotationRefName: name},
		}},
	})
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	file := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(b))}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	err = errors.Join(file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)), file("index.json", index))
	for d, b := range blobs {
		err = errors.Join(err, file("blobs/sha256/"+d.Encoded(), b))
	}
	if err := errors.Join(err, tw.Close()); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// TestRootContainerdCRI runs airlock-cni under containerd's CRI plugin, the
// runtime of most Kubernetes nodes, driven over the CRI as a kubelet drives
// it: containerd invokes the CNI chain itself (Debian's bridge and
// host-local, then airlock-cni) for a pod whose annotation
// airlock.dev/enabled selects it, passing the annotations through the
// io.kubernetes.cri.pod-annotations capability. The pod's container then
// reaches the allowed host only through airlock (explicit proxy, and a
// direct connection after DNS through the filter), the denied host (by name,
// by address) and the bridge's gateway listener see no connection, the
// records carry the sandbox id airlock-cni gives the pod, and removing the
// pod (CNI DEL) detaches it.
func TestRootContainerdCRI(t *testing.T) {
	e := newServeEnv(t) // roottest-gated
	d := startServe(t, e, filepath.Join(e.dir, "run"))
	t.Cleanup(func() { d.Stop(syscall.SIGTERM) })
	pluginDir := buildCNI(t)
	pod := newCNIPod(t, pluginDir) // the bridge, its subnet and the gateway listener
	binDir, netDir := t.TempDir(), t.TempDir()
	for _, bin := range []string{"bridge", "host-local", "loopback"} {
		if err := os.Symlink(filepath.Join(refPlugins, bin), filepath.Join(binDir, bin)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(pluginDir, "airlock-cni"), filepath.Join(binDir, "airlock-cni")); err != nil {
		t.Fatal(err)
	}
	conflist, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "alk-ctrd-" + pod.tag, "plugins": []map[string]any{
		{"type": "bridge", "bridge": pod.bridge, "ipam": map[string]any{
			"type": "host-local", "subnet": pod.subnet.String(), "gateway": pod.gw.String(),
			"routes": []map[string]any{{"dst": "0.0.0.0/0"}}, "dataDir": pod.data,
		}},
		{"type": "airlock-cni", "socket": d.Socket, "timeout": "60s",
			"select":       map[string]any{"annotation": "airlock.dev/enabled"},
			"capabilities": map[string]any{"io.kubernetes.cri.pod-annotations": true}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(netDir, "10-airlock.conflist"), conflist, 0o644); err != nil {
		t.Fatal(err)
	}
	image := "localhost/alk-busybox:" + pod.tag
	c := newContainerd(t, binDir, netDir, image)
	c.importImage(image)

	// The control: a pod the annotation does not select is passed through
	// untouched, and the bridge alone lets it connect to the gateway
	// listener, the route airlock must close.
	control := c.runPod(t, "alk-ctl-"+pod.tag, "false", image)
	if out, err := control.exec(nil, "nc", pod.gw.String(), fmt.Sprint(pod.direct.port())); err != nil || !strings.Contains(out, "direct") {
		t.Fatalf("control pod on the bridge alone: %v: %q", err, out)
	}
	if pod.direct.n.Load() != 1 {
		t.Fatalf("gateway listener connections from the control pod: got %d, want 1", pod.direct.n.Load())
	}
	if _, err := d.C.CheckAttach(context.Background(), cniplugin.SandboxID(control.id)); err == nil {
		t.Errorf("the control pod (annotation false) was attached")
	}
	c.removePod(control.id)

	p := c.runPod(t, "alk-pod-"+pod.tag, "true", image)
	id := cniplugin.SandboxID(p.id)
	st, err := d.C.CheckAttach(context.Background(), id)
	if err != nil || !st.InForce {
		t.Fatalf("the daemon's view of containerd's pod %s (sandbox %s): %+v, %v; want attached and in force", p.id, id, st, err)
	}
	checkCRIEgress(t, e, pod, id, p.exec)

	c.removePod(p.id)
	if _, err := d.C.CheckAttach(context.Background(), id); err == nil || !strings.Contains(err.Error(), "no attached sandbox") {
		t.Errorf("check of sandbox %s after the pod's removal (CNI DEL): got %v, want no attached sandbox", id, err)
	}
}

// criPod is a pod containerd runs, with one container that sleeps.
type criPod struct {
	c       *containerdCRI
	id, ctr string
}

// runPod runs a pod with the annotation airlock.dev/enabled set to enabled,
// the fake internet's resolver, and one busybox container; it is removed at
// the test's end unless removePod did it before.
func (c *containerdCRI) runPod(t *testing.T, name, enabled, image string) *criPod {
	t.Helper()
	cfg := &cri.PodSandboxConfig{
		Metadata:    &cri.PodSandboxMetadata{Name: name, Namespace: "alk-e2e", Uid: name + "-uid"},
		Annotations: map[string]string{"airlock.dev/enabled": enabled},
		DnsConfig:   &cri.DNSConfig{Servers: []string{w.net.DNSAddr.Addr().String()}},
		Linux:       &cri.LinuxPodSandboxConfig{CgroupParent: c.cgroup},
	}
	ctx, cancel := c.ctx()
	defer cancel()
	run, err := c.rt.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatalf("RunPodSandbox %s (containerd runs the CNI chain): %v", name, err)
	}
	p := &criPod{c: c, id: run.PodSandboxId}
	t.Cleanup(func() { c.removePod(p.id) })
	ctr, err := c.rt.CreateContainer(ctx, &cri.CreateContainerRequest{
		PodSandboxId:  p.id,
		SandboxConfig: cfg,
		Config: &cri.ContainerConfig{
			Metadata: &cri.ContainerMetadata{Name: "agent"},
			Image:    &cri.ImageSpec{Image: image},
			Command:  []string{"/bin/sleep", "600"},
		},
	})
	if err != nil {
		t.Fatalf("CreateContainer in %s: %v", name, err)
	}
	p.ctr = ctr.ContainerId
	if _, err := c.rt.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: p.ctr}); err != nil {
		t.Fatalf("StartContainer in %s: %v", name, err)
	}
	return p
}

// exec runs argv in the pod's container with env added, bounded by 20 s.
func (p *criPod) exec(env []string, argv ...string) (string, error) {
	ctx, cancel := p.c.ctx()
	defer cancel()
	cmd := append(append([]string{"env"}, env...), append([]string{"timeout", "20"}, argv...)...)
	res, err := p.c.rt.ExecSync(ctx, &cri.ExecSyncRequest{ContainerId: p.ctr, Cmd: cmd, Timeout: 30})
	if err != nil {
		return "", err
	}
	out := string(res.Stdout) + string(res.Stderr)
	if res.ExitCode != 0 {
		return out, fmt.Errorf("%v: exit %d", argv, res.ExitCode)
	}
	return out, nil
}

// removePod stops and removes a pod as the kubelet does: containerd runs
// the chain's DEL.
func (c *containerdCRI) removePod(id string) {
	c.t.Helper()
	ctx, cancel := c.ctx()
	defer cancel()
	// A pod already removed is not found: nothing to do.
	if _, err := c.rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: id}); status.Code(err) == codes.NotFound {
		return
	} else if err != nil {
		c.t.Errorf("StopPodSandbox %s: %v", id, err)
	}
	if _, err := c.rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		c.t.Errorf("RemovePodSandbox %s: %v", id, err)
	}
}

// checkCRIEgress: from the pod's container the allowed host is reached only
// from the gateway, and the denied host, its address and the bridge's
// gateway listener see nothing; the records name the sandbox.
func checkCRIEgress(t *testing.T, e *env, pod *cniPod, id string, exec func(env []string, argv ...string) (string, error)) {
	t.Helper()
	n := len(w.other.Seen())
	evil := snap(w.evil)
	direct := pod.direct.n.Load()
	for _, a := range []struct {
		name string
		env  []string
		path string
	}{
		{"explicit proxy", proxyEnv, "/cri-proxy-" + id},
		{"direct connection", nil, "/cri-direct-" + id},
	} {
		if out, err := exec(a.env, "wget", "-q", "-O-", "http://other.example.test"+a.path); err != nil || !strings.Contains(out, "hello from other.example.test"+a.path) {
			t.Errorf("%s to the allowed host: %v: %q", a.name, err, out)
		}
	}
	var paths []string
	for _, r := range seenSince(w.other, n) {
		paths = append(paths, r.URL.Path)
		if host, _, _ := net.SplitHostPort(r.RemoteAddr); host != w.net.HostAddr.String() {
			t.Errorf("%s came from %s, want the gateway's %s", r.URL.Path, r.RemoteAddr, w.net.HostAddr)
		}
	}
	if want := []string{"/cri-proxy-" + id, "/cri-direct-" + id}; !slices.Equal(paths, want) {
		t.Errorf("allowed host served %q, want %q", paths, want)
	}
	directURL := fmt.Sprintf("http://%s/", net.JoinHostPort(pod.gw.String(), fmt.Sprint(pod.direct.port())))
	for _, a := range []struct {
		name string
		env  []string
		argv []string
	}{
		{"denied host through the proxy", proxyEnv, []string{"wget", "-q", "-O-", "http://evil.example/cri-proxy"}},
		{"denied host by name", nil, []string{"wget", "-q", "-O-", "http://evil.example/cri-direct"}},
		{"denied host by address", nil, []string{"wget", "-q", "-O-", "http://" + w.evil.IP.String() + "/cri-ip"}},
		{"the bridge's gateway listener", nil, []string{"wget", "-q", "-O-", directURL}},
	} {
		if out, err := exec(a.env, a.argv...); err == nil || strings.Contains(out, "hello from") || strings.Contains(out, "direct") {
			t.Errorf("%s: answered: %v: %q", a.name, err, out)
		}
	}
	if got := snap(w.evil).sub(evil); got != (counts{}) {
		t.Errorf("denied host saw %+v (connections, requests, datagrams), want none", got)
	}
	if got := pod.direct.n.Load() - direct; got != 0 {
		t.Errorf("gateway listener connections from the pod: got %d, want 0", got)
	}
	if !poll.Within(20*time.Second, func() bool {
		recs, _ := audittest.ReadFile(e.audit)
		return slices.ContainsFunc(recs, func(r audit.Record) bool {
			return r.Sandbox == id && r.Decision == audit.DecisionAllow && r.Path == "/cri-direct-"+id
		}) && slices.ContainsFunc(recs, func(r audit.Record) bool {
			return r.Sandbox == id && r.Decision == audit.DecisionDeny && r.Host == "evil.example"
		})
	}) {
		recs, _ := audittest.ReadFile(e.audit)
		t.Errorf("no allow and deny records of sandbox %s:\n%s", id, dump(recs))
	}
}

// mountsBelow lists the mount points under dir, deepest first.
func mountsBelow(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// tail is the last n bytes of b.
func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
