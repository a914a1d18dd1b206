package e2e

import (
	"archive/tar"
	"bytes"
	"context"
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

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/cniplugin"
	"github.com/airlock-dev/airlock/test/poll"
	"github.com/airlock-dev/airlock/test/runctest"
)

// podmanTimeout bounds one podman command.
const podmanTimeout = 2 * time.Minute

// podman runs Debian's podman with its CNI backend, every piece of its state
// (storage, run root, network configs, events) in a directory of the test's,
// so it shares nothing with another podman on the machine.
type podman struct {
	t   *testing.T
	dir string
	// cgroup is the parent of the containers' and conmon's cgroups
	// (podman's default is /libpod_parent), removed at the end.
	cgroup string
}

func newPodman(t *testing.T, pluginDir string) *podman {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatalf("podman not found (Debian's podman; scripts/deps.sh installs it): %v", err)
	}
	p := &podman{t: t, dir: t.TempDir(), cgroup: fmt.Sprintf("/alk-podman-%d-%d", os.Getpid(), time.Now().UnixNano())}
	t.Cleanup(func() {
		// conmon's and the containers' cgroups are below it; a conmon may
		// still be exiting after podman rm returned.
		dirs, _ := filepath.Glob(filepath.Join(runctest.CgroupRoot, "*", p.cgroup))
		var err error
		poll.Within(20*time.Second, func() bool {
			err = nil
			for _, d := range dirs {
				err = errors.Join(err, removeCgroupTree(d))
			}
			return err == nil
		})
		if err != nil {
			t.Errorf("remove podman's cgroups: %v", err)
		}
	})
	for _, d := range []string{"net.d", "tmp"} {
		if err := os.MkdirAll(filepath.Join(p.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// network_backend = "cni": podman runs the chain from the config list
	// itself (ADD at start, DEL at removal), as a CRI runtime does.
	conf := fmt.Sprintf(`[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[network]
network_backend = "cni"
cni_plugin_dirs = [%q, %q]
network_config_dir = %q
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = %q
runtime = "runc"
`, pluginDir, refPlugins, filepath.Join(p.dir, "net.d"), filepath.Join(p.dir, "events.log"))
	if err := os.WriteFile(filepath.Join(p.dir, "containers.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// removeCgroupTree removes a cgroup directory and its children (each must
// hold no process); one already gone is no error.
func removeCgroupTree(dir string) error {
	ents, _ := os.ReadDir(dir)
	var err error
	for _, e := range ents {
		if e.IsDir() {
			err = errors.Join(err, removeCgroupTree(filepath.Join(dir, e.Name())))
		}
	}
	if rerr := os.Remove(dir); rerr != nil && !os.IsNotExist(rerr) {
		err = errors.Join(err, rerr)
	}
	return err
}

// run runs podman with args and returns its stdout; a failure is returned
// with stderr.
func (p *podman) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), podmanTimeout)
	defer cancel()
	base := []string{"--root", filepath.Join(p.dir, "storage"), "--runroot", filepath.Join(p.dir, "runroot"),
		"--storage-driver", "vfs", "--tmpdir", filepath.Join(p.dir, "tmp")}
	cmd := exec.CommandContext(ctx, "podman", append(base, args...)...)
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+filepath.Join(p.dir, "containers.conf"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("podman %s: %w: %s%s", strings.Join(args, " "), err, errb.String(), out.String())
	}
	return out.String(), nil
}

func (p *podman) must(args ...string) string {
	p.t.Helper()
	out, err := p.run(args...)
	if err != nil {
		p.t.Fatal(err)
	}
	return out
}

// network writes a CNI config list into podman's network config dir.
func (p *podman) network(name string, plugins ...map[string]any) {
	p.t.Helper()
	b, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": name, "plugins": plugins})
	if err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.dir, "net.d", name+".conflist"), b, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// importBusybox imports a static busybox root filesystem as a local image,
// offline (`podman import` of a tar), and returns its name.
func (p *podman) importBusybox(name string) string {
	p.t.Helper()
	tarPath := filepath.Join(p.dir, "busybox.tar")
	if err := writeBusyboxTar(tarPath); err != nil {
		p.t.Fatal(err)
	}
	p.must("import", tarPath, name)
	return name
}

// writeBusyboxTar writes a root filesystem of Debian's static busybox and
// its applets' links.
func writeBusyboxTar(path string) error {
	applets, err := exec.Command(runctest.Busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("busybox --list: %w", err)
	}
	bb, err := os.ReadFile(runctest.Busybox)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdrs := []*tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777},
	}
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bb))}); err != nil {
		return err
	}
	if _, err := tw.Write(bb); err != nil {
		return err
	}
	for _, a := range strings.Fields(string(applets)) {
		if a == "busybox" || strings.Contains(a, "/") {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}); err != nil {
			return err
		}
	}
	passwd := []byte("root:x:0:0:root:/root:/bin/sh\n")
	if err := tw.WriteHeader(&tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(passwd))}); err != nil {
		return err
	}
	if _, err := tw.Write(passwd); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// TestRootPodmanCNI runs airlock-cni under a real container runtime that
// invokes the CNI chain itself: Debian's podman with its CNI backend starts a
// busybox container on a network whose config list chains airlock-cni after
// Debian's bridge and host-local. On a network without airlock-cni the
// container reaches the bridge's gateway listener directly (the control); on
// the airlock network its egress goes only through airlock: the allowed host
// is reached from the gateway by the explicit proxy and by a direct
// connection after DNS through the filter, while the denied host (by name,
// by address) and the gateway listener see no connection, and the records
// carry the sandbox id airlock-cni gives podman's container. Removing the
// container (CNI DEL) detaches it.
func TestRootPodmanCNI(t *testing.T) {
	e := newServeEnv(t) // roottest-gated
	d := startServe(t, e, filepath.Join(e.dir, "run"))
	// Stopped, not killed, so it removes its pool namespaces; after the
	// container's removal (registered later, run earlier).
	t.Cleanup(func() { d.Stop(syscall.SIGTERM) })
	pluginDir := buildCNI(t)
	pod := newCNIPod(t, pluginDir) // the bridge, its subnet and the gateway listener
	pm := newPodman(t, pluginDir)
	image := pm.importBusybox("localhost/alk-busybox:" + pod.tag)
	bridge := map[string]any{
		"type": "bridge", "bridge": pod.bridge,
		"ipam": map[string]any{
			"type": "host-local", "subnet": pod.subnet.String(), "gateway": pod.gw.String(),
			"routes": []map[string]any{{"dst": "0.0.0.0/0"}}, "dataDir": pod.data,
		},
	}
	plainNet, airNet := "alk-plain-"+pod.tag, "alk-air-"+pod.tag
	pm.network(plainNet, bridge)
	pm.network(airNet, bridge, map[string]any{
		"type": "airlock-cni", "socket": d.Socket, "timeout": "60s", "select": map[string]any{"all": true},
	})
	directURL := fmt.Sprintf("http://%s/", net.JoinHostPort(pod.gw.String(), fmt.Sprint(pod.direct.port())))
	dns := "--dns=" + w.net.DNSAddr.Addr().String()

	// The control: the bridge alone lets the container connect to the
	// gateway listener, the route airlock must close.
	if out, err := pm.run("run", "--rm", "--cgroup-parent", pm.cgroup, "--network", plainNet, image, "sh", "-c", "timeout 10 nc "+pod.gw.String()+" "+fmt.Sprint(pod.direct.port())+" </dev/null"); err != nil || !strings.Contains(out, "direct") {
		t.Fatalf("control container on the bridge alone: %v: %q", err, out)
	}
	if pod.direct.n.Load() != 1 {
		t.Fatalf("gateway listener connections from the control: got %d, want 1", pod.direct.n.Load())
	}

	name := "alk-pm-" + pod.tag
	cid := strings.TrimSpace(pm.must("run", "-d", "--cgroup-parent", pm.cgroup, "--name", name, "--network", airNet, dns, image, "sleep", "600"))
	removed := false
	t.Cleanup(func() {
		if !removed {
			if _, err := pm.run("rm", "-f", "-t", "0", name); err != nil {
				t.Errorf("%v", err)
			}
		}
	})
	id := cniplugin.SandboxID(cid)
	st, err := d.C.CheckAttach(context.Background(), id)
	if err != nil || !st.InForce {
		t.Fatalf("the daemon's view of podman's container %s (sandbox %s): %+v, %v; want attached and in force", cid, id, st, err)
	}

	exec := func(env []string, argv ...string) (string, error) {
		args := []string{"exec"}
		for _, e := range env {
			args = append(args, "--env", e)
		}
		return pm.run(append(append(args, name, "timeout", "20"), argv...)...)
	}
	n := len(w.other.Seen())
	evil := snap(w.evil)
	direct := pod.direct.n.Load()
	for _, a := range []struct {
		name string
		env  []string
		path string
	}{
		{"explicit proxy", proxyEnv, "/podman-proxy-" + id},
		{"direct connection", nil, "/podman-direct-" + id},
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
	if want := []string{"/podman-proxy-" + id, "/podman-direct-" + id}; !slices.Equal(paths, want) {
		t.Errorf("allowed host served %q, want %q", paths, want)
	}
	for _, a := range []struct {
		name string
		env  []string
		argv []string
	}{
		{"denied host through the proxy", proxyEnv, []string{"wget", "-q", "-O-", "http://evil.example/podman-proxy"}},
		{"denied host by name", nil, []string{"wget", "-q", "-O-", "http://evil.example/podman-direct"}},
		{"denied host by address", nil, []string{"wget", "-q", "-O-", "http://" + w.evil.IP.String() + "/podman-ip"}},
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
		t.Errorf("gateway listener connections from the attached container: got %d, want 0", got)
	}
	if !poll.Within(20*time.Second, func() bool {
		recs, _ := audittest.ReadFile(e.audit)
		return slices.ContainsFunc(recs, func(r audit.Record) bool {
			return r.Sandbox == id && r.Decision == audit.DecisionAllow && r.Path == "/podman-direct-"+id
		}) && slices.ContainsFunc(recs, func(r audit.Record) bool {
			return r.Sandbox == id && r.Decision == audit.DecisionDeny && r.Host == "evil.example"
		})
	}) {
		recs, _ := audittest.ReadFile(e.audit)
		t.Errorf("no allow and deny records of sandbox %s:\n%s", id, dump(recs))
	}

	pm.must("rm", "-f", "-t", "0", name)
	removed = true
	if _, err := d.C.CheckAttach(context.Background(), id); err == nil || !strings.Contains(err.Error(), "no attached sandbox") {
		t.Errorf("check of sandbox %s after podman rm (CNI DEL): got %v, want no attached sandbox", id, err)
	}
}
