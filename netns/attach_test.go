package netns

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"

	"github.com/airlock-dev/airlock/identity"
	"github.com/airlock-dev/airlock/netns/netnstest"
	"github.com/airlock-dev/airlock/test/fakenet"
)

// container is a namespace made by "someone else" for Attach, with a veth to a
// second namespace, vm, which plays a VM behind a tap: its default route goes
// through the container namespace. vm also runs servers that count what reaches
// them at 198.18.200.2 (TCP 8080, UDP 8081).
type container struct {
	path, vmPath string
	vmTCP, vmUDP atomic.Int64
}

func run(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v: %s", argv, err, out)
	}
}

func newContainer(t *testing.T) *container {
	t.Helper()
	ctr, vm := netnstest.NSName("c"), netnstest.NSName("v")
	hostSide, vmSide := netnstest.LinkName("c"), netnstest.LinkName("v")
	t.Cleanup(func() {
		exec.Command("ip", "netns", "delete", ctr).Run()
		exec.Command("ip", "netns", "delete", vm).Run()
	})
	run(t, "ip", "netns", "add", ctr)
	run(t, "ip", "netns", "add", vm)
	run(t, "ip", "link", "add", hostSide, "netns", ctr, "type", "veth", "peer", "name", vmSide, "netns", vm)
	for _, argv := range [][]string{
		{"ip", "-n", ctr, "link", "set", "lo", "up"},
		{"ip", "-n", ctr, "addr", "add", "198.18.200.1/30", "dev", hostSide},
		{"ip", "-n", ctr, "link", "set", hostSide, "up"},
		{"ip", "-n", vm, "link", "set", "lo", "up"},
		{"ip", "-n", vm, "addr", "add", "198.18.200.2/30", "dev", vmSide},
		{"ip", "-n", vm, "link", "set", vmSide, "up"},
		{"ip", "-n", vm, "route", "add", "default", "via", "198.18.200.1"},
	} {
		run(t, argv...)
	}
	c := &container{path: "/run/netns/" + ctr, vmPath: "/run/netns/" + vm}
	h, err := vnetns.GetFromPath(c.vmPath)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var l net.Listener
	var u net.PacketConn
	err = inNS(h, func() error {
		var err error
		if l, err = net.Listen("tcp4", "198.18.200.2:8080"); err != nil {
			return err
		}
		u, err = net.ListenPacket("udp4", "198.18.200.2:8081")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); u.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.vmTCP.Add(1)
			conn.Write([]byte("vm\n"))
			conn.Close()
		}
	}()
	go func() {
		buf := make([]byte, 64)
		for {
			if _, _, err := u.ReadFrom(buf); err != nil {
				return
			}
			c.vmUDP.Add(1)
		}
	}()
	return c
}

// in runs fn on a thread in the namespace at path.
func in(t *testing.T, path string, fn func() error) error {
	t.Helper()
	h, err := vnetns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	return inNS(h, fn)
}

func dialRead(addr string) (string, error) {
	c, err := net.DialTimeout("tcp4", addr, 3*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

func sendUDP(addr string, n int) error {
	c, err := net.Dial("udp4", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	for range n {
		c.Write([]byte("x"))
	}
	return nil
}

func TestAttachAndDetach(t *testing.T) {
	w := newWorld(t, Config{})
	c := newContainer(t)
	ctx := context.Background()

	// Before: the container reaches the "VM" directly.
	if err := in(t, c.path, func() error { _, err := dialRead("198.18.200.2:8080"); return err }); err != nil || c.vmTCP.Load() != 1 {
		t.Fatalf("baseline connection: %v, vm count %d", err, c.vmTCP.Load())
	}
	_, save := backendBinaries(w.m.Backend())
	rulesBefore, _ := nsExec(t, c.path, 10*time.Second, save)
	sysBefore, _ := nsExec(t, c.path, 10*time.Second, "sysctl", "net.ipv6.conf.all.disable_ipv6", "net.ipv4.conf.all.route_localnet")

	id := netnstest.SandboxID("attach")
	s, err := w.m.Attach(ctx, identity.Sandbox{ID: id, Labels: map[string]string{"kind": "vm"}}, c.path, Inbound{})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if _, err := w.m.Attach(ctx, identity.Sandbox{ID: netnstest.SandboxID("again")}, c.path, Inbound{}); err == nil {
		t.Errorf("attaching the same namespace twice succeeded")
	}
	// Another namespace under the id in use: refused as ErrIDInUse (the
	// daemon's API answers it as a conflict), and that namespace untouched.
	other := newContainer(t)
	otherBefore, _ := nsExec(t, other.path, 10*time.Second, save)
	if _, err := w.m.Attach(ctx, identity.Sandbox{ID: id}, other.path, Inbound{}); !errors.Is(err, ErrIDInUse) {
		t.Errorf("attaching another namespace as %s: got %v, want ErrIDInUse", id, err)
	}
	if after, _ := nsExec(t, other.path, 10*time.Second, save); after != otherBefore {
		t.Errorf("the refused namespace's rules changed:\n%s", after)
	}
	if _, err := w.m.Attach(ctx, identity.Sandbox{ID: netnstest.SandboxID("host")}, "/proc/self/ns/net", Inbound{}); err == nil {
		t.Errorf("attaching the host namespace succeeded")
	}

	t.Run("container egress goes through the gateway", func(t *testing.T) {
		tcp := c.vmTCP.Load()
		err := in(t, c.path, func() error {
			if out, err := dialRead("198.18.200.2:8080"); err == nil && strings.Contains(out, "vm") {
				t.Errorf("direct connection to the vm passed: %q", out)
			}
			out, err := fakenet.Get(w.web.IP.String()+":80", "web.test", "/vm")
			if err != nil || !strings.Contains(out, "hello from web.test /vm") {
				t.Errorf("allowed host through the gateway: %v: %q", err, out)
			}
			return sendUDP("198.18.200.2:8081", 3)
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.vmTCP.Load() - tcp; got != 0 {
			t.Errorf("vm TCP connections while attached: got %d, want 0", got)
		}
		if got := c.vmUDP.Load(); got != 0 {
			t.Errorf("vm UDP datagrams while attached: got %d, want 0", got)
		}
		w.audit.Wait(t, "udp drop record", dropOf(s.ID, "udp", "198.18.200.2", 8081))
	})
	t.Run("traffic arriving on the veth (a VM's tap) is captured", func(t *testing.T) {
		reqs := w.web.Requests()
		err := in(t, c.vmPath, func() error {
			out, err := fakenet.Get(w.web.IP.String()+":80", "web.test", "/vm")
			if err != nil || !strings.Contains(out, "hello from web.test /vm") {
				t.Errorf("vm to allowed host: %v: %q", err, out)
			}
			if out, _ := fakenet.Get(w.denied.IP.String()+":80", "denied.test", "/vm"); strings.Contains(out, "hello") {
				t.Errorf("vm reached the denied host: %q", out)
			}
			return sendUDP(w.denied.IP.String()+":7", 3)
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := w.web.Requests() - reqs; got != 1 {
			t.Errorf("web.test requests from the vm: got %d, want 1", got)
		}
		if got := w.denied.Conns() + w.denied.UDP(); got != 0 {
			t.Errorf("denied host saw %d connections/datagrams, want 0", got)
		}
		out, err := nsExec(t, c.vmPath, 10*time.Second, "dig", "+short", "+tries=1", "+time=3", "@"+w.net.Unused.String(), "web.test")
		if err != nil || strings.TrimSpace(out) != w.web.IP.String() {
			t.Errorf("dig from the vm: %v: %q, want %s", err, out, w.web.IP)
		}
		w.audit.Wait(t, "forward drop record", dropOf(s.ID, "udp", w.denied.IP.String(), 7))
	})
	t.Run("IPv6 is off while attached", func(t *testing.T) {
		out, _ := nsExec(t, c.path, 10*time.Second, "sysctl", "-n", "net.ipv6.conf.all.disable_ipv6")
		if strings.TrimSpace(out) != "1" {
			t.Errorf("disable_ipv6 = %q, want 1", out)
		}
	})

	if err := w.m.Detach(ctx, id); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	rulesAfter, _ := nsExec(t, c.path, 10*time.Second, save)
	if stripComments(rulesAfter) != stripComments(rulesBefore) {
		t.Errorf("rules after detach:\n%s\nwant\n%s", rulesAfter, rulesBefore)
	}
	sysAfter, _ := nsExec(t, c.path, 10*time.Second, "sysctl", "net.ipv6.conf.all.disable_ipv6", "net.ipv4.conf.all.route_localnet")
	if sysAfter != sysBefore {
		t.Errorf("sysctls after detach: %q, want %q", sysAfter, sysBefore)
	}
	tcp := c.vmTCP.Load()
	if err := in(t, c.path, func() error { _, err := dialRead("198.18.200.2:8080"); return err }); err != nil || c.vmTCP.Load() != tcp+1 {
		t.Errorf("direct connection after detach: %v, count %d, want %d", err, c.vmTCP.Load(), tcp+1)
	}
	if _, err := exec.Command("test", "-e", w.m.nsPath(id)).Output(); err == nil {
		t.Errorf("bind mount %s left after detach", w.m.nsPath(id))
	}
}

func TestAttachFailureRestores(t *testing.T) {
	w := newWorld(t, Config{})
	c := newContainer(t)
	// Some pre-existing rule the namespace's owner had.
	run(t, "nsenter", "--net="+c.path, "--", "iptables-legacy", "-w", "-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT")
	_, save := backendBinaries(IPTablesLegacy)
	before, _ := nsExec(t, c.path, 10*time.Second, save)
	for _, step := range []string{"namespace", "save", "state", "sysctl", "rules", "listen", "serve"} {
		t.Run(step, func(t *testing.T) {
			w.m.hook = func(s string) error {
				if s == step {
					return errInjected
				}
				return nil
			}
			defer func() { w.m.hook = nil }()
			id := netnstest.SandboxID("afail")
			if _, err := w.m.Attach(context.Background(), identity.Sandbox{ID: id}, c.path, Inbound{}); err == nil {
				t.Fatalf("Attach with a failure at %s succeeded", step)
			}
			after, _ := nsExec(t, c.path, 10*time.Second, save)
			if stripComments(after) != stripComments(before) {
				t.Errorf("rules after failed attach:\n%s\nwant\n%s", after, before)
			}
			if err := exec.Command("test", "-e", w.m.nsPath(id)).Run(); err == nil {
				t.Errorf("bind mount left")
			}
			if w.srv.served() != 0 {
				t.Errorf("server still serves a sandbox")
			}
		})
	}
}

// TestAttachWithDefaultRoute attaches a namespace whose default route leaves
// by a veth, as a CNI pod's does. Regression: filter OUTPUT saw the veth as the
// output device of DNS and TCP that nat OUTPUT had redirected to 127.0.0.1, so
// "-o lo" missed them and every lookup and captured connection was dropped.
func TestAttachWithDefaultRoute(t *testing.T) {
	w := newWorld(t, Config{})
	c := newContainer(t)
	ctr := c.path[len("/run/netns/"):]
	run(t, "ip", "-n", ctr, "route", "add", "default", "via", "198.18.200.2")
	routesBefore, _ := nsExec(t, c.path, 10*time.Second, "ip", "route")

	id := netnstest.SandboxID("defroute")
	if _, err := w.m.Attach(context.Background(), identity.Sandbox{ID: id}, c.path, Inbound{}); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	reqs := w.web.Requests()
	err := in(t, c.path, func() error {
		out, err := fakenet.Get(w.web.IP.String()+":80", "web.test", "/defroute")
		if err != nil || !strings.Contains(out, "hello from web.test /defroute") {
			t.Errorf("allowed host through the gateway: %v: %q", err, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := w.web.Requests() - reqs; got != 1 {
		t.Errorf("web.test requests: got %d, want 1", got)
	}
	out, err := nsExec(t, c.path, 10*time.Second, "dig", "+short", "+tries=1", "+time=3", "@"+w.net.Unused.String(), "web.test")
	if err != nil || strings.TrimSpace(out) != w.web.IP.String() {
		t.Errorf("dig through the filter: %v: %q, want %s", err, out, w.web.IP)
	}
	if got := c.vmTCP.Load(); got != 0 {
		t.Errorf("vm (the next hop) saw %d TCP connections, want 0", got)
	}

	if err := w.m.Detach(context.Background(), id); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if routesAfter, _ := nsExec(t, c.path, 10*time.Second, "ip", "route"); routesAfter != routesBefore {
		t.Errorf("routes after detach: %q, want %q", routesAfter, routesBefore)
	}
}

// TestAttachLoopbackDown pins the bug where attaching a routed namespace
// (an interface and a default route of its own, as a CNI pod's) whose lo was
// down (a runtime that had not brought it up yet) failed with "bind: cannot
// assign requested address", which named neither lo nor the fix. (A namespace
// without a route gets the island route on lo, and lo up with it.) The error now says lo is down in the namespace the
// caller gave and how to bring it up, is a LoopbackDownError, and the failed
// attach leaves no rules; with lo up the same namespace attaches.
func TestAttachLoopbackDown(t *testing.T) {
	w := newWorld(t, Config{})
	name := netnstest.NSName("lo")
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", name).Run() })
	run(t, "ip", "netns", "add", name)
	for _, argv := range [][]string{
		{"ip", "-n", name, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1"},
		{"ip", "-n", name, "link", "set", "eth1", "up"},
		{"ip", "-n", name, "addr", "add", "198.18.201.1/30", "dev", "eth0"},
		{"ip", "-n", name, "link", "set", "eth0", "up"},
		{"ip", "-n", name, "route", "add", "default", "via", "198.18.201.2"},
	} {
		run(t, argv...)
	}
	path := "/run/netns/" + name
	_, save := backendBinaries(w.m.Backend())
	before, _ := nsExec(t, path, 10*time.Second, save)

	id := netnstest.SandboxID("lodown")
	_, err := w.m.Attach(context.Background(), identity.Sandbox{ID: id}, path, Inbound{})
	var lo *LoopbackDownError
	if !errors.As(err, &lo) || lo.Namespace != path {
		t.Fatalf("got %v, want a LoopbackDownError for %s", err, path)
	}
	want := "loopback is down in namespace " + path + ": bring it up (ip link set lo up) or let the runtime do it"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("got %q, want it to contain %q", err, want)
	}
	if after, _ := nsExec(t, path, 10*time.Second, save); stripComments(after) != stripComments(before) {
		t.Errorf("rules after the failed attach:\n%s\nwant\n%s", after, before)
	}

	run(t, "ip", "-n", name, "link", "set", "lo", "up")
	if _, err := w.m.Attach(context.Background(), identity.Sandbox{ID: id}, path, Inbound{}); err != nil {
		t.Fatalf("attach with lo up: %v", err)
	}
	if err := w.m.Detach(context.Background(), id); err != nil {
		t.Errorf("detach: %v", err)
	}
}
