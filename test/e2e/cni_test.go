package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/cniplugin"
	"github.com/airlock-dev/airlock/test/fakenet"
	"github.com/airlock-dev/airlock/test/poll"
)

// refPlugins is where Debian's containernetworking-plugins puts the
// reference plugins (scripts/deps.sh installs it).
const refPlugins = "/usr/lib/cni"

// cniPod is one pod network the test drives with libcni as a runtime would:
// a bridge of its own with the gateway address, a namespace for the pod, and
// a listener on the gateway address (the bridge's direct route).
type cniPod struct {
	t      *testing.T
	tag    string
	bridge string
	ns     string // namespace name; its path is /run/netns/<ns>
	subnet netip.Prefix
	gw     netip.Addr
	cni    *libcni.CNIConfig
	data   string // host-local's dataDir
	direct *countingListener
}

func (p *cniPod) nsPath() string { return "/run/netns/" + p.ns }

// newCNIPod makes the bridge, the pod namespace and the gateway listener,
// all removed at the test's end.
func newCNIPod(t *testing.T, pluginDir string) *cniPod {
	t.Helper()
	for _, bin := range []string{"bridge", "host-local"} {
		if _, err := os.Stat(filepath.Join(refPlugins, bin)); err != nil {
			t.Fatalf("the reference CNI plugin %s is missing (%v): run scripts/deps.sh (Debian's containernetworking-plugins)", bin, err)
		}
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	tag := hex.EncodeToString(b[:])
	p := &cniPod{t: t, tag: tag, bridge: "alk-br" + tag, ns: "alk-cni-" + tag, data: t.TempDir()}
	p.subnet, p.gw = freeSubnet(t)
	p.cni = libcni.NewCNIConfigWithCacheDir([]string{pluginDir, refPlugins}, t.TempDir(), nil)
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "delete", p.ns).Run()
		_ = exec.Command("ip", "link", "delete", p.bridge).Run()
	})
	for _, argv := range [][]string{
		{"ip", "link", "add", p.bridge, "type", "bridge"},
		{"ip", "addr", "add", p.gw.String() + "/24", "dev", p.bridge},
		{"ip", "link", "set", p.bridge, "up"},
		{"ip", "netns", "add", p.ns},
		{"ip", "-n", p.ns, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", argv, err, out)
		}
	}
	l, err := net.Listen("tcp4", net.JoinHostPort(p.gw.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	p.direct = &countingListener{l: l}
	go p.direct.serve()
	t.Cleanup(func() { l.Close() })
	return p
}

// freeSubnet picks a 10.231.N.0/24 no interface of the host is in.
func freeSubnet(t *testing.T) (netip.Prefix, netip.Addr) {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	_, _ = rand.Read(b[:])
	for try := range 250 {
		n := (int(b[0])+try)%250 + 1
		pfx := netip.MustParsePrefix(fmt.Sprintf("10.231.%d.0/24", n))
		used := false
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP.To4()); ok && pfx.Contains(ip) {
					used = true
				}
			}
		}
		if !used {
			return pfx, pfx.Addr().Next()
		}
	}
	t.Fatal("no free 10.231.N.0/24")
	return netip.Prefix{}, netip.Addr{}
}

// conflist is the network configuration list: Debian's bridge and
// host-local, then airlock-cni for socket when socket is not "".
func (p *cniPod) conflist(name, socket string) *libcni.NetworkConfigList {
	p.t.Helper()
	plugins := []map[string]any{{
		"type": "bridge", "bridge": p.bridge,
		"ipam": map[string]any{
			"type": "host-local", "subnet": p.subnet.String(), "gateway": p.gw.String(),
			"routes": []map[string]any{{"dst": "0.0.0.0/0"}}, "dataDir": p.data,
		},
	}}
	if socket != "" {
		plugins = append(plugins, map[string]any{
			"type": "airlock-cni", "socket": socket, "timeout": "60s",
			"inbound":      map[string]any{"mode": "accept", "ports": []int{probePort}},
			"capabilities": map[string]any{cniplugin.PodAnnotationsCapability: true},
		})
	}
	b, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": name, "plugins": plugins})
	if err != nil {
		p.t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(b)
	if err != nil {
		p.t.Fatalf("conflist %s: %v", b, err)
	}
	return list
}

// runtimeConf is what containerd passes for a pod: the K8S_POD_* args and
// the pod's annotations through the capability.
func (p *cniPod) runtimeConf(containerID, uid string, annotations map[string]string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: containerID, NetNS: p.nsPath(), IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "ci"}, {"K8S_POD_NAME", "agent-" + p.tag},
			{"K8S_POD_UID", uid}, {"K8S_POD_INFRA_CONTAINER_ID", containerID}},
		CapabilityArgs: map[string]any{cniplugin.PodAnnotationsCapability: annotations},
	}
}

// The pod's ports: its conflist accepts probePort inbound, not otherPort.
const (
	probePort = 8080
	otherPort = 8081
)

// podHTTPD is an HTTP server in the pod namespace on port, counting the
// requests it serves: what a kubelet probe or a Service reaches.
type podHTTPD struct {
	n   atomic.Int64
	srv *http.Server
}

func (p *cniPod) httpd(port int) *podHTTPD {
	p.t.Helper()
	h := &podHTTPD{}
	var l net.Listener
	var err error
	// SO_REUSEPORT lets the attack below bind a client socket to the port.
	lc := net.ListenConfig{Control: reusePort}
	p.inPod(func() { l, err = lc.Listen(context.Background(), "tcp4", fmt.Sprintf("0.0.0.0:%d", port)) })
	if err != nil {
		p.t.Fatal(err)
	}
	h.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.n.Add(1)
		fmt.Fprintf(w, "pod %d %s\n", port, r.URL.Path)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = h.srv.Serve(l) }()
	p.t.Cleanup(func() { h.srv.Close() })
	return h
}

// reusePort sets SO_REUSEPORT on a socket before it binds.
func reusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, unix.SO_REUSEPORT, 1) }); err != nil {
		return err
	}
	return serr
}

// probe is a kubelet's HTTP probe from the host's side of the bridge: GET
// http://ADDR:PORT/healthz, bounded in time.
func probe(addr netip.Addr, port int) (string, error) {
	c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := c.Get(fmt.Sprintf("http://%s/healthz", net.JoinHostPort(addr.String(), fmt.Sprint(port))))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256))
	return string(b), err
}

// countingListener accepts and counts connections, answering "direct\n".
type countingListener struct {
	l net.Listener
	n atomic.Int64
}

func (c *countingListener) serve() {
	for {
		conn, err := c.l.Accept()
		if err != nil {
			return
		}
		c.n.Add(1)
		_, _ = conn.Write([]byte("direct\n"))
		conn.Close()
	}
}

func (c *countingListener) port() int { return c.l.Addr().(*net.TCPAddr).Port }

// inPod runs fn on a thread inside the pod's namespace.
func (p *cniPod) inPod(fn func()) {
	p.t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		h, err := vnetns.GetFromPath(p.nsPath())
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := vnetns.Set(h); err != nil {
			errc <- err
			return
		}
		fn()
		errc <- nil
	}()
	if err := <-errc; err != nil {
		p.t.Fatal(err)
	}
}

// dial connects from the pod and reads what the other end says first.
func dial(addr string) (string, error) {
	c, err := net.DialTimeout("tcp4", addr, 3*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	b := make([]byte, 64)
	n, err := c.Read(b)
	return string(b[:n]), err
}

// iptablesOf is the pod namespace's rules in both backends.
func (p *cniPod) iptablesOf() string {
	var out strings.Builder
	for _, bin := range []string{"iptables-nft-save", "iptables-legacy-save"} {
		b, _ := exec.Command("ip", "netns", "exec", p.ns, bin).Output()
		out.Write(b)
	}
	return out.String()
}

// buildCNI builds ./cmd/airlock-cni as airlock-cni in a directory of its own.
func buildCNI(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	_, file, _, _ := runtime.Caller(0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "airlock-cni"), "./cmd/airlock-cni")
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/airlock-cni: %v: %s", err, out)
	}
	return dir
}

// TestRootCNIPlugin drives airlock-cni with libcni as a runtime would,
// chained after Debian's bridge and host-local, against a real `airlock
// serve`: the pod reaches an allowed host only through airlock and nothing
// else (the denied host and the bridge's direct route count zero), its
// records carry its identity, CHECK notices a removed rule, DEL leaves
// nothing and can be repeated, and ADD with the daemon stopped fails and
// leaves the pod with no way out.
func TestRootCNIPlugin(t *testing.T) {
	e := newServeEnv(t)
	runDir := filepath.Join(e.dir, "run")
	d := startServe(t, e, runDir)
	p := newCNIPod(t, buildCNI(t))
	ctx := t.Context()
	annotations := map[string]string{"airlock.dev/enabled": "true", "labels.airlock.dev/team": "ml"}
	uid := "6f1c0b6e-" + p.tag
	wantPod := audit.Pod{Namespace: "ci", Name: "agent-" + p.tag, UID: uid}
	directAddr := net.JoinHostPort(p.gw.String(), fmt.Sprint(p.direct.port()))

	// The control: bridge and host-local alone give the pod a direct route
	// to the gateway listener; that route is what airlock must close.
	plain := p.conflist("alk-plain-"+p.tag, "")
	plainRT := p.runtimeConf("alk-ctl-"+p.tag, uid, annotations)
	plainRes, err := p.cni.AddNetworkList(ctx, plain, plainRT)
	if err != nil {
		t.Fatalf("control ADD (bridge only): %v", err)
	}
	p.inPod(func() {
		if got, err := dial(directAddr); got != "direct\n" {
			t.Errorf("control: the gateway listener through the bridge: got %q, %v; want its answer (the direct route works without airlock)", got, err)
		}
	})
	httpd, unlisted := p.httpd(probePort), p.httpd(otherPort)
	plain100, err := types100.NewResultFromResult(plainRes)
	if err != nil || len(plain100.IPs) != 1 {
		t.Fatalf("control ADD result: %+v, %v; want one address", plainRes, err)
	}
	// Without airlock the host reaches both of the pod's servers: what the
	// accept rules must keep for one port and refuse for the other.
	for _, port := range []int{probePort, otherPort} {
		if got, err := probe(netip.MustParseAddr(plain100.IPs[0].Address.IP.String()), port); got != fmt.Sprintf("pod %d /healthz\n", port) {
			t.Errorf("control: probe of %d from the host: got %q, %v; want the pod's answer", port, got, err)
		}
	}
	if err := p.cni.DelNetworkList(ctx, plain, plainRT); err != nil {
		t.Fatalf("control DEL: %v", err)
	}
	if n := p.direct.n.Load(); n != 1 {
		t.Fatalf("control: the gateway listener counted %d connections, want 1", n)
	}
	if n, m := httpd.n.Load(), unlisted.n.Load(); n != 1 || m != 1 {
		t.Fatalf("control: the pod's servers counted %d and %d probes, want 1 each", n, m)
	}
	p.direct.n.Store(0)
	httpd.n.Store(0)
	unlisted.n.Store(0)

	// VERSION, as libcni asks it.
	if vi, err := p.cni.GetVersionInfo(ctx, "airlock-cni"); err != nil || !slices.Contains(vi.SupportedVersions(), "1.0.0") {
		t.Fatalf("VERSION: got %v, %v; want 1.0.0 among the supported versions", vi, err)
	}

	// ADD through the chain, as containerd would for an annotated pod.
	list := p.conflist("alk-pods-"+p.tag, d.Socket)
	cid := "alk-pod-" + p.tag + strings.Repeat("0", 40)
	rt := p.runtimeConf(cid, uid, annotations)
	id := cniplugin.SandboxID(cid)
	res, err := p.cni.AddNetworkList(ctx, list, rt)
	if err != nil {
		t.Fatalf("ADD: %v\n%s", err, d.Output())
	}
	r100, err := types100.NewResultFromResult(res)
	if err != nil || len(r100.IPs) != 1 || !p.subnet.Contains(netip.MustParseAddr(r100.IPs[0].Address.IP.String())) {
		t.Fatalf("ADD result: got %+v, %v; want the bridge's address in %s", res, err, p.subnet)
	}
	st, err := d.C.CheckAttach(ctx, id)
	if err != nil || !st.InForce || st.Pod == nil || st.Pod.Namespace != "ci" {
		t.Fatalf("the daemon's view after ADD: got %+v, %v; want %s attached with its pod", st, err, id)
	}
	if st.Inbound.Mode != api.InboundAccept || !slices.Equal(st.Inbound.Ports, []int{probePort}) {
		t.Errorf("the daemon's view of inbound after ADD: %+v, want accept [%d]", st.Inbound, probePort)
	}
	podIP := netip.MustParseAddr(r100.IPs[0].Address.IP.String())

	// A kubelet probe from the host's side of the bridge reaches the pod's
	// server on the accepted port; the other port sees nothing, and its
	// refusal is a drop record.
	if got, err := probe(podIP, probePort); got != fmt.Sprintf("pod %d /healthz\n", probePort) {
		t.Errorf("probe of the accepted port %d: got %q, %v; want the pod's answer", probePort, got, err)
	}
	if got, err := probe(podIP, otherPort); err == nil || got != "" {
		t.Errorf("probe of the port %d not accepted: got %q, %v; want no answer", otherPort, got, err)
	}
	if n, m := httpd.n.Load(), unlisted.n.Load(); n != 1 || m != 0 {
		t.Errorf("the pod's servers on %d and %d counted %d and %d probes, want 1 and 0", probePort, otherPort, n, m)
	}
	poll.Within(10*time.Second, func() bool {
		st, err = d.C.CheckAttach(ctx, id)
		return err == nil && st.InboundAccepted >= 1
	})
	if err != nil || st.InboundAccepted < 1 {
		t.Errorf("accepted inbound connections after the probe: %+v, %v; want at least 1", st, err)
	}

	// From inside: the allowed host through airlock, the denied one not at
	// all, and no direct way to either or to the gateway listener.
	other, evil := snap(w.other), snap(w.evil)
	path := "/cni-" + p.tag
	p.inPod(func() {
		if got, err := fakenet.Get(w.other.IP.String()+":80", "other.example.test", path); !strings.Contains(got, "hello from other.example.test"+path) {
			t.Errorf("allowed host from the pod: got %q, %v", got, err)
		}
		if got, _ := fakenet.Get(w.evil.IP.String()+":80", "evil.example", path); strings.Contains(got, "hello") {
			t.Errorf("denied host answered the pod: %q", got)
		}
		if got, _ := dial(net.JoinHostPort(w.evil.IP.String(), "7")); got != "" {
			t.Errorf("the denied host's TCP echo answered: %q", got)
		}
		if got, _ := dial(directAddr); got == "direct\n" {
			t.Errorf("the gateway listener answered through the bridge's direct route")
		}
		// The accepted port as a source port opens nothing: a connection
		// from it is captured like any other.
		d := net.Dialer{Timeout: 3 * time.Second, Control: reusePort, LocalAddr: &net.TCPAddr{Port: probePort}}
		if c, err := d.Dial("tcp4", directAddr); err == nil {
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			b := make([]byte, 16)
			if n, _ := c.Read(b); n > 0 {
				t.Errorf("a connection from the accepted port %d to the gateway listener got %q", probePort, b[:n])
			}
			c.Close()
		}
		if c, err := net.Dial("udp4", net.JoinHostPort(w.evil.IP.String(), "7")); err == nil {
			_, _ = c.Write([]byte("x"))
			c.Close()
		}
	})
	if got := snap(w.evil).sub(evil); got != (counts{}) {
		t.Errorf("the denied host saw %+v (connections, requests, datagrams), want zero", got)
	}
	if n := p.direct.n.Load(); n != 0 {
		t.Errorf("the gateway listener counted %d connections from the attached pod, want 0", n)
	}
	if got := snap(w.other).sub(other); got.requests != 1 {
		t.Errorf("the allowed host served %d requests, want 1", got.requests)
	}

	// Every record of the sandbox carries the pod; there is an allow for
	// the allowed host and a deny for the other.
	var recs []audit.Record
	poll.Within(10*time.Second, func() bool {
		recs = sandboxRecords(e, id)
		return len(find(recs, match{decision: audit.DecisionAllow, host: "other.example.test", path: path})) > 0 &&
			len(find(recs, match{decision: audit.DecisionDeny, host: "evil.example"})) > 0
	})
	mustFind(t, recs, match{decision: audit.DecisionAllow, host: "other.example.test", path: path})
	mustFind(t, recs, match{decision: audit.DecisionDeny, host: "evil.example"})
	poll.Within(10*time.Second, func() bool {
		return slices.ContainsFunc(sandboxRecords(e, id), func(r audit.Record) bool {
			return r.Kind == audit.KindDrop && r.Protocol == "tcp" && r.IP == podIP.String() && r.Port == otherPort
		})
	})
	recs = sandboxRecords(e, id)
	if !slices.ContainsFunc(recs, func(r audit.Record) bool {
		return r.Kind == audit.KindDrop && r.Protocol == "tcp" && r.IP == podIP.String() && r.Port == otherPort
	}) {
		t.Errorf("no drop record of the refused probe of %s:%d", podIP, otherPort)
	}
	for _, r := range recs {
		if r.Pod == nil || *r.Pod != wantPod {
			t.Errorf("record %s (%s %s) carries pod %+v, want %+v", r.ID, r.Kind, r.Decision, r.Pod, wantPod)
		}
	}

	// A restart of serve keeps the pod: its namespace is re-attached from the
	// state file and the records after it carry the pod too.
	if code := d.Stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exited %d\n%s", code, d.Output())
	}
	d = startServe(t, e, runDir)
	again := path + "-again"
	p.inPod(func() {
		if got, err := fakenet.Get(w.other.IP.String()+":80", "other.example.test", again); !strings.Contains(got, "hello from other.example.test"+again) {
			t.Errorf("allowed host from the pod after serve restarted: got %q, %v", got, err)
		}
	})
	poll.Within(10*time.Second, func() bool {
		recs = sandboxRecords(e, id)
		return len(find(recs, match{decision: audit.DecisionAllow, host: "other.example.test", path: again})) > 0
	})
	if r := mustFind(t, recs, match{decision: audit.DecisionAllow, host: "other.example.test", path: again}); r.Pod == nil || *r.Pod != wantPod {
		t.Errorf("the record after the restart carries pod %+v, want %+v", r.Pod, wantPod)
	}
	// The re-attached pod keeps its inbound mode.
	if got, err := probe(podIP, probePort); got != fmt.Sprintf("pod %d /healthz\n", probePort) {
		t.Errorf("probe after serve restarted: got %q, %v; want the pod's answer", got, err)
	}
	if got, _ := probe(podIP, otherPort); got != "" || unlisted.n.Load() != 0 {
		t.Errorf("the port not accepted answered after serve restarted: %q (its server counted %d)", got, unlisted.n.Load())
	}

	// CHECK passes, then notices the first rule of filter OUTPUT removed.
	if err := p.cni.CheckNetworkList(ctx, list, rt); err != nil {
		t.Fatalf("CHECK with the rules in place: %v", err)
	}
	removeFirstOutputRule(t, p)
	err = p.cni.CheckNetworkList(ctx, list, rt)
	if te := (*types.Error)(nil); !errors.As(err, &te) || te.Code != cniplugin.ErrNotInForce || !strings.Contains(te.Msg, "not in force") {
		t.Fatalf("CHECK after a rule was removed: got %v, want code %d saying the rules are not in force", err, cniplugin.ErrNotInForce)
	}

	// DEL leaves nothing: rules, state, bind mount, the daemon's sandbox.
	if err := p.cni.DelNetworkList(ctx, list, rt); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if rules := p.iptablesOf(); strings.Contains(rules, "AIRLOCK") {
		t.Errorf("airlock rules left in the pod namespace after DEL:\n%s", rules)
	}
	if _, err := os.Lstat(st.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bind mount %s left after DEL: %v", st.Path, err)
	}
	if _, err := os.Lstat(filepath.Join(runDir, "netns", id+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file left after DEL: %v", err)
	}
	if _, err := d.C.CheckAttach(ctx, id); client.Code(err) != api.CodeNotFound {
		t.Errorf("the daemon after DEL: got %v, want not_found", err)
	}
	if err := p.cni.DelNetworkList(ctx, list, rt); err != nil {
		t.Errorf("second DEL: %v", err)
	}

	// ADD with the daemon stopped fails, and the pod has no way out.
	if code := d.Stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exited %d\n%s", code, d.Output())
	}
	cid2 := "alk-pod2-" + p.tag + strings.Repeat("0", 40)
	rt2 := p.runtimeConf(cid2, uid+"-2", annotations)
	_, err = p.cni.AddNetworkList(ctx, list, rt2)
	if te := (*types.Error)(nil); !errors.As(err, &te) || te.Code != types.ErrTryAgainLater || !strings.Contains(te.Msg, "unreachable") {
		t.Fatalf("ADD with the daemon stopped: got %v, want code %d saying the daemon is unreachable", err, types.ErrTryAgainLater)
	}
	evil, other = snap(w.evil), snap(w.other)
	p.inPod(func() {
		for _, addr := range []string{directAddr, w.evil.IP.String() + ":80", w.other.IP.String() + ":80"} {
			if got, err := dial(addr); err == nil || got != "" {
				t.Errorf("after the failed ADD, %s answered the pod: %q, %v", addr, got, err)
			}
		}
	})
	if n := p.direct.n.Load(); n != 0 {
		t.Errorf("after the failed ADD the gateway listener counted %d connections, want 0", n)
	}
	if snap(w.evil).sub(evil) != (counts{}) || snap(w.other).sub(other) != (counts{}) {
		t.Errorf("after the failed ADD a fake host saw the pod")
	}
	if rules := p.iptablesOf(); strings.Contains(rules, "AIRLOCK") {
		t.Errorf("airlock rules in the pod namespace after a failed ADD:\n%s", rules)
	}
}

// sandboxRecords are the audit records of sandbox id.
func sandboxRecords(e *env, id string) []audit.Record {
	var out []audit.Record
	for _, r := range e.records() {
		if r.Sandbox == id {
			out = append(out, r)
		}
	}
	return out
}

// removeFirstOutputRule deletes the first rule of filter OUTPUT in the pod's
// namespace (airlock's jump), in whichever backend holds airlock's rules.
func removeFirstOutputRule(t *testing.T, p *cniPod) {
	t.Helper()
	for _, bin := range []string{"iptables-nft", "iptables-legacy"} {
		out, _ := exec.Command("ip", "netns", "exec", p.ns, bin, "-w", "-S", "OUTPUT").Output()
		if !strings.Contains(string(out), "AIRLOCK") {
			continue
		}
		if b, err := exec.Command("ip", "netns", "exec", p.ns, bin, "-w", "-D", "OUTPUT", "1").CombinedOutput(); err != nil {
			t.Fatalf("%s -D OUTPUT 1: %v: %s", bin, err, b)
		}
		return
	}
	t.Fatalf("no airlock jump in filter OUTPUT of the pod:\n%s", p.iptablesOf())
}
