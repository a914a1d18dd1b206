package cniplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/client/clienttest"
	"github.com/airlock-dev/airlock/test/fakenet"
	"github.com/airlock-dev/airlock/test/roottest"
)

// TestRootAddFailureQuarantines pins a failed ADD that left the pod a way
// out: only an unreachable daemon took the pod's interfaces down, so a
// duplicate CNI_ARGS key (or a bad prevResult, a bad pod field, a panic)
// failed ADD with eth0 still up and its default route in place. For every
// error path, on the real kernel: a pod namespace whose veth reaches a fake
// internet host (proved by a probe before ADD), ADD fails, and afterwards
// every interface but loopback is down, no route is left, and a probe from
// inside reaches nothing (the host counted no connection).
func TestRootAddFailureQuarantines(t *testing.T) {
	roottest.Require(t)
	inet := fakenet.Start(t)
	web := inet.Host(t, "web.test")
	healthy := clienttest.New(t)
	sick := clienttest.New(t)
	sick.SetFailing(api.HealthPartStateDir, "the run directory was removed")
	refusing := clienttest.New(t)
	hang := hangingSocket(t)
	gone := filepath.Join(t.TempDir(), "no-daemon.sock")
	const cid = "c0ffee-quarantine"
	// The refusing daemon has the pod's sandbox id attached already: ADD's
	// attach is a conflict.
	rc := client.New(refusing.Socket)
	if err := rc.Attach(context.Background(), api.AttachRequest{ID: SandboxID(cid), NetNS: "/run/netns/other"}); err != nil {
		t.Fatal(err)
	}
	rc.Close()

	tests := []struct {
		name   string
		stdin  []byte
		args   string
		plugin func(*Plugin)
		want   string // in the error
	}{
		{name: "bad stdin config", stdin: []byte(`{"cniVersion":"1.0.0","name":"pods","type":"airlock-cni","socket":"rel.sock"}`), want: "socket"},
		{name: "duplicate CNI_ARGS key", stdin: netConf(t, healthy.Socket, nil), args: podArgs + ";K8S_POD_NAMESPACE=prod", want: "given twice"},
		{name: "no prevResult", stdin: netConf(t, healthy.Socket, map[string]any{"prevResult": nil}), want: "no prevResult"},
		{name: "bad prevResult", stdin: netConf(t, healthy.Socket, map[string]any{"prevResult": json.RawMessage(`{"cniVersion":"1.0.0","ips":[{"address":"not-an-address"}]}`)}), want: "prevResult"},
		{name: "bad pod field", stdin: netConf(t, healthy.Socket, nil), args: "K8S_POD_NAME=" + strings.Repeat("a", 300), want: "K8S_POD_NAME"},
		{name: "daemon unreachable", stdin: netConf(t, gone, nil), want: "unreachable"},
		{name: "daemon refuses", stdin: netConf(t, refusing.Socket, nil), want: api.CodeConflict},
		{name: "daemon timeout", stdin: netConf(t, hang, map[string]any{"timeout": "300ms"}), want: "deadline"},
		{name: "daemon not healthy", stdin: netConf(t, sick.Socket, nil), want: "run directory was removed"},
		{name: "panic", stdin: netConf(t, healthy.Socket, nil), plugin: func(p *Plugin) {
			p.NewClient = func(string) *client.Client { panic("injected") }
		}, want: "injected"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := newPodNamespace(t, inet, i)
			if out, err := probe(pod, web); err != nil || !strings.Contains(out, "hello") {
				t.Fatalf("before ADD the pod does not reach web.test (%q, %v): the test proves nothing", out, err)
			}
			before := web.Conns()
			p := &Plugin{Stdout: &strings.Builder{}}
			if tc.plugin != nil {
				tc.plugin(p)
			}
			args := tc.args
			if args == "" {
				args = podArgs
			}
			err := p.Add(&skel.CmdArgs{ContainerID: cid, Netns: pod, IfName: "eth0", Args: args, StdinData: tc.stdin})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ADD: got %v, want an error mentioning %q", err, tc.want)
			}
			if cniCode(err) == int(ErrQuarantine) {
				t.Fatalf("ADD: the quarantine failed: %v", err)
			}
			if up, routes := podLinks(t, pod); len(up) != 0 || len(routes) != 0 {
				t.Errorf("after the failed ADD: got interfaces up %v and routes %v, want none", up, routes)
			}
			if out, err := probe(pod, web); err == nil {
				t.Errorf("after the failed ADD the pod still reaches web.test: %q", out)
			}
			if got := web.Conns() - before; got != 0 {
				t.Errorf("web.test accepted %d connections from the quarantined pod, want 0", got)
			}
		})
	}
}

// netConf is a network configuration selecting the pod (select.all) for
// socket, with prevResult, and extra keys set (a nil value removes one).
func netConf(t *testing.T, socket string, extra map[string]any) []byte {
	t.Helper()
	c := map[string]any{"cniVersion": "1.0.0", "name": "pods", "type": "airlock-cni", "socket": socket,
		"select": map[string]any{"all": true}, "prevResult": json.RawMessage(prevResult)}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
			continue
		}
		c[k] = v
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// hangingSocket is a daemon socket that accepts connections and never
// answers, until the test ends.
func hangingSocket(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "alk-hang-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "hang.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return sock
}

// newPodNamespace makes a namespace standing for a pod's, as a main
// plugin leaves it: eth0 up with an address and a default route, its peer
// in the fake internet's namespace (so nothing of the host's is touched).
// It returns the namespace's path; it is removed when the test ends.
func newPodNamespace(t *testing.T, inet *fakenet.Net, i int) string {
	t.Helper()
	name := fmt.Sprintf("alk-cnipod-%d-%d-%d", os.Getpid(), i, time.Now().UnixNano()%100000)
	peer := fmt.Sprintf("alkcq%d", i)
	podIP, peerIP := fmt.Sprintf("198.18.7.%d", 4*i+2), fmt.Sprintf("198.18.7.%d", 4*i+1)
	ipCmd(t, "netns", "add", name)
	t.Cleanup(func() {
		_ = exec.Command("ip", "-n", inet.Name, "link", "delete", peer).Run()
		_ = exec.Command("ip", "netns", "delete", name).Run()
	})
	for _, args := range [][]string{
		{"-n", name, "link", "add", "eth0", "type", "veth", "peer", "name", peer, "netns", inet.Name},
		{"-n", name, "link", "set", "lo", "up"},
		{"-n", name, "addr", "add", podIP + "/30", "dev", "eth0"},
		{"-n", name, "link", "set", "eth0", "up"},
		{"-n", name, "route", "add", "default", "via", peerIP},
		{"-n", inet.Name, "addr", "add", peerIP + "/30", "dev", peer},
		{"-n", inet.Name, "link", "set", peer, "up"},
	} {
		ipCmd(t, args...)
	}
	return "/run/netns/" + name
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// probe sends one HTTP GET from inside the namespace at path to host.
func probe(path string, host *fakenet.Host) (string, error) {
	type result struct {
		out string
		err error
	}
	c := make(chan result, 1)
	go func() {
		// The thread is never unlocked: the runtime retires it with the
		// goroutine, so no other goroutine runs in the pod's namespace.
		runtime.LockOSThread()
		ns, err := vnetns.GetFromPath(path)
		if err != nil {
			c <- result{"", err}
			return
		}
		defer ns.Close()
		if err := vnetns.Set(ns); err != nil {
			c <- result{"", err}
			return
		}
		out, err := fakenet.Get(host.IP.String()+":80", host.Names[0], "/probe")
		if err == nil && out == "" {
			err = fmt.Errorf("no answer")
		}
		c <- result{out, err}
	}()
	r := <-c
	return r.out, r.err
}

// podLinks returns the namespace's interfaces that are up (loopback aside)
// and its IPv4 routes in the main table.
func podLinks(t *testing.T, path string) (up []string, routes []string) {
	t.Helper()
	ns, err := vnetns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if l.Attrs().Flags&net.FlagLoopback == 0 && l.Attrs().Flags&net.FlagUp != 0 {
			up = append(up, l.Attrs().Name)
		}
	}
	rs, err := h.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		routes = append(routes, r.String())
	}
	return up, routes
}
