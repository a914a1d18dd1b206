package netns

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/identity"
	"github.com/airlock-dev/airlock/netns/netnstest"
	"github.com/airlock-dev/airlock/test/fakenet"
	"github.com/airlock-dev/airlock/test/poll"
)

func TestDropAuditIsRateLimited(t *testing.T) {
	w := newWorld(t, Config{DropBurst: 5, DropInterval: 200 * time.Millisecond})
	s := w.create(t, "flood")
	const sent = 300
	err := inSandbox(t, s, func() error {
		c, err := net.Dial("udp4", w.denied.IP.String()+":7")
		if err != nil {
			return err
		}
		defer c.Close()
		for range sent {
			c.Write([]byte("x"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var single, suppressed int
	count := func() bool {
		single, suppressed = 0, 0
		for _, r := range w.audit.Kind(audit.KindDrop) {
			if r.Sandbox != s.ID {
				continue
			}
			if len(r.Reasons) == 1 && r.Reasons[0].ID == ReasonDropSummary {
				var n int
				json.Unmarshal(r.Extra[audit.SummarySuppressedKey], &n)
				suppressed += n
			} else if r.Protocol == "udp" {
				single++
			}
		}
		return single+suppressed >= sent
	}
	poll.Until(t, 5*time.Second, "all drops accounted for", count)
	if single+suppressed != sent {
		t.Errorf("drops accounted: got %d single + %d suppressed, want %d in all", single, suppressed, sent)
	}
	if single > sent/4 {
		t.Errorf("single drop records: got %d, want a few (burst 5 per 200ms)", single)
	}
	if got := w.denied.UDP(); got != 0 {
		t.Errorf("denied host UDP datagrams: got %d, want 0", got)
	}
}

func TestGatewayKilledThenRecovered(t *testing.T) {
	w := newWorld(t, Config{})
	s := w.create(t, "crash")
	if out, err := curl(t, s.Path, "--noproxy", "*", "http://web.test/"); err != nil || !strings.Contains(out, "hello") {
		t.Fatalf("before crash: %v: %q", err, out)
	}
	// A crash: the process's sockets go, the namespace and its rules stay.
	if err := w.m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(s.Path); err != nil {
		t.Fatalf("namespace gone after Close: %v", err)
	}
	before := w.web.Conns() + w.web.Requests()
	for _, args := range [][]string{
		{"--noproxy", "*", "http://web.test/"},
		{"--noproxy", "*", "http://" + w.web.IP.String() + "/"},
		{"-x", "http://127.0.0.1:3128", "http://web.test/"},
	} {
		if out, err := curl(t, s.Path, args...); err == nil {
			t.Errorf("curl %v with the gateway dead succeeded: %q", args, out)
		}
	}
	if out, err := nsExec(t, s.Path, 10*time.Second, "dig", "+short", "+tries=1", "+time=2", "@"+w.net.DNSAddr.Addr().String(), "web.test"); err == nil && strings.TrimSpace(out) != "" {
		t.Errorf("dig with the gateway dead answered: %q", out)
	}
	if got := w.web.Conns() + w.web.Requests() - before; got != 0 {
		t.Errorf("web.test connections+requests with the gateway dead: got %d, want 0", got)
	}
	if got := w.net.Queries("web.test"); got > 1 {
		t.Errorf("fake DNS saw %d queries for web.test, want at most the one before the crash", got)
	}

	// The next gateway removes the namespace: it was made for a sandbox of
	// the process that died, nothing will run in it again. (An attached
	// namespace is re-attached: TestRecoverReattachesOnlyAttached.)
	m2 := w.newManager(t)
	res, err := m2.Recover(context.Background(), RecoverReattach)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if len(res.Reattached) != 0 || len(res.Removed) != 1 || res.Removed[0] != s.ID {
		t.Fatalf("Recover: got %+v, want %s removed and nothing re-attached", res, s.ID)
	}
	if _, err := os.Lstat(s.Path); !os.IsNotExist(err) {
		t.Errorf("namespace %s still there: %v", s.Path, err)
	}
	if _, ok := m2.Get(s.ID); ok {
		t.Errorf("recovered manager manages %s", s.ID)
	}
}

func TestRecoverRemove(t *testing.T) {
	w := newWorld(t, Config{})
	s := w.create(t, "rm")
	w.m.Close()
	m2 := w.newManager(t)
	res, err := m2.Recover(context.Background(), RecoverRemove)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	removed := strings.Join(res.Removed, ",")
	if !strings.Contains(removed, s.ID) {
		t.Errorf("Recover removed %v, want %s", res.Removed, s.ID)
	}
	if _, err := os.Stat(s.Path); !os.IsNotExist(err) {
		t.Errorf("namespace %s still there: %v", s.Path, err)
	}
	if _, err := os.Stat(filepath.Join(w.cfg.StateDir, s.ID+".json")); !os.IsNotExist(err) {
		t.Errorf("state file still there: %v", err)
	}
}

func TestUnprivilegedCannotChangeRulesOrRoutes(t *testing.T) {
	w := newWorld(t, Config{})
	s := w.createReplayed(t, "unpriv")
	_, save := backendBinaries(w.m.Backend())
	rulesBefore, err := nsExec(t, s.Path, 10*time.Second, save)
	if err != nil {
		t.Fatal(err)
	}
	routesBefore, _ := nsExec(t, s.Path, 10*time.Second, "ip", "route")
	nobody := []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"}
	for _, argv := range [][]string{
		{"iptables-legacy", "-w", "-F"},
		{"iptables-legacy", "-w", "-t", "nat", "-F"},
		{"iptables-nft", "-F"},
		{"ip", "route", "del", "default"},
		{"ip", "route", "add", "198.19.0.0/16", "dev", "lo"},
		{"ip", "link", "set", "lo", "down"},
		{"ip", "addr", "add", "198.19.0.1/32", "dev", "lo"},
		{"sh", "-c", "echo 0 > /proc/sys/net/ipv6/conf/all/disable_ipv6"},
	} {
		out, err := nsExec(t, s.Path, 10*time.Second, append(nobody, argv...)...)
		if err == nil {
			t.Errorf("%v as nobody succeeded: %q", argv, out)
		}
	}
	rulesAfter, _ := nsExec(t, s.Path, 10*time.Second, save)
	if !strings.Contains(rulesBefore, "AIRLOCK-OUT") {
		t.Fatalf("no airlock rules seen with %s:\n%s", save, rulesBefore)
	}
	routesAfter, _ := nsExec(t, s.Path, 10*time.Second, "ip", "route")
	if stripComments(rulesAfter) != stripComments(rulesBefore) {
		t.Errorf("rules changed:\n%s\nwant\n%s", rulesAfter, rulesBefore)
	}
	if routesAfter != routesBefore {
		t.Errorf("routes changed: %q, want %q", routesAfter, routesBefore)
	}
	// And nobody still only gets out through the gateway.
	if out, err := curl(t, s.Path, "--noproxy", "*", "http://web.test/"); err != nil || !strings.Contains(out, "hello") {
		t.Fatalf("curl: %v: %q", err, out)
	}
}

// stripComments normalizes iptables-save output: no comments, no counters, and no
// table that holds nothing (only built-in chains with policy ACCEPT), which is what
// an absent table and an emptied one both mean.
func stripComments(s string) string {
	var out strings.Builder
	for _, table := range strings.SplitAfter(stripSave(s), "COMMIT\n") {
		empty := true
		for _, l := range strings.Split(table, "\n") {
			if strings.HasPrefix(l, "-A") || (strings.HasPrefix(l, ":") && !strings.HasSuffix(l, " ACCEPT")) {
				empty = false
			}
		}
		if !empty {
			out.WriteString(table)
		}
	}
	return out.String()
}

func stripSave(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		// Packet counters change with traffic; compare the rules only.
		if strings.HasPrefix(l, ":") {
			if i := strings.LastIndex(l, " ["); i > 0 {
				l = l[:i]
			}
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}

func TestFailedCreateLeavesNothing(t *testing.T) {
	w := newWorld(t, Config{})
	for _, step := range []string{"namespace", "island", "sysctl", "rules", "state", "listen", "serve"} {
		t.Run(step, func(t *testing.T) {
			fds := fdCount(t)
			id := netnstest.SandboxID("fail")
			w.m.hook = func(s string) error {
				if s == step {
					return errInjected
				}
				return nil
			}
			defer func() { w.m.hook = nil }()
			if _, err := w.m.Create(context.Background(), identity.Sandbox{ID: id}); err == nil {
				t.Fatalf("Create with a failure at %s succeeded", step)
			}
			if _, err := os.Lstat(w.m.nsPath(id)); !os.IsNotExist(err) {
				t.Errorf("namespace file left: %v", err)
			}
			if _, err := os.Stat(filepath.Join(w.cfg.StateDir, id+".json")); !os.IsNotExist(err) {
				t.Errorf("state file left: %v", err)
			}
			if n := w.srv.served(); n != 0 {
				t.Errorf("server still serves %d sandboxes", n)
			}
			if _, ok := w.m.Get(id); ok || len(w.m.IDs()) != 0 {
				t.Errorf("manager still lists %v", w.m.IDs())
			}
			if got := fdCount(t); got != fds {
				t.Errorf("fds: got %d, want %d", got, fds)
			}
			// The id is free again.
			w.m.hook = nil
			s, err := w.m.Create(context.Background(), identity.Sandbox{ID: id})
			if err != nil {
				t.Fatalf("Create after the failure: %v", err)
			}
			if err := w.m.Teardown(context.Background(), s.ID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestManyNamespacesLeaveNothing(t *testing.T) {
	w := newWorld(t, Config{})
	const n = 200
	listNS := func() int {
		ents, _ := os.ReadDir(w.m.cfg.RunDir)
		c := 0
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), NamePrefix+"p"+itoa(os.Getpid())+"-") {
				c++
			}
		}
		return c
	}
	get := func(i int, s *Sandbox) {
		err := inSandbox(t, s, func() error {
			out, err := fakenet.Get(w.web.IP.String()+":80", "web.test", "/vm")
			if err != nil || !strings.Contains(out, "hello from web.test /vm") {
				t.Errorf("request %d: %v: %q", i, err, out)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	// Warm up once so lazily opened fds (epoll, the gateway's pooled upstream
	// connection) are in the baseline.
	s := w.create(t, "warm")
	get(-1, s)
	w.m.Teardown(context.Background(), s.ID)
	fds, nsBefore, reqs := fdCount(t), listNS(), w.web.Requests()
	start := time.Now()
	done := 0
	for i := 0; i < n && time.Since(start) < 3*time.Minute; i++ {
		s := w.create(t, "many")
		get(i, s)
		if err := w.m.Teardown(context.Background(), s.ID); err != nil {
			t.Fatalf("Teardown %d: %v", i, err)
		}
		done++
	}
	if done != n {
		t.Fatalf("only %d of %d rounds in the time bound", done, n)
	}
	t.Logf("%d create+request+teardown rounds in %s", n, time.Since(start))
	if got := w.web.Requests() - reqs; got != n {
		t.Errorf("web.test requests: got %d, want %d", got, n)
	}
	if got := listNS(); got != nsBefore {
		t.Errorf("namespaces under %s: got %d, want %d", w.m.cfg.RunDir, got, nsBefore)
	}
	if got := w.srv.served(); got != 0 {
		t.Errorf("server still serves %d sandboxes", got)
	}
	if ents, _ := os.ReadDir(w.cfg.StateDir); len(ents) != 0 {
		t.Errorf("state files left: %d", len(ents))
	}
	// Connections the in-process fake servers are still closing go away shortly.
	deadline := time.Now().Add(5 * time.Second)
	for fdCount(t) != fds && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := fdCount(t); got != fds {
		t.Errorf("fds: got %d, want %d: %v", got, fds, fdTargets(t))
	}
}

func fdTargets(t *testing.T) []string {
	ents, _ := os.ReadDir("/proc/self/fd")
	var out []string
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		out = append(out, e.Name()+"="+l)
	}
	return out
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestPool(t *testing.T) {
	w := newWorld(t, Config{PoolSize: 2})
	poll.Until(t, 5*time.Second, "pool filled", func() bool { return poolReady(w.m) == 2 })
	pooled := func() []string {
		ents, _ := os.ReadDir(w.m.cfg.RunDir)
		var out []string
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), poolPrefix+strconv.Itoa(os.Getpid())+"-") {
				out = append(out, e.Name())
			}
		}
		return out
	}
	if got := len(pooled()); got != 2 {
		t.Fatalf("pool namespaces: got %d, want 2", got)
	}
	s := w.create(t, "pooled")
	if out, err := curl(t, s.Path, "--noproxy", "*", "http://web.test/p"); err != nil || !strings.Contains(out, "hello from web.test /p") {
		t.Fatalf("curl from a pooled namespace: %v: %q", err, out)
	}
	if out, err := nsExec(t, s.Path, 10*time.Second, "dig", "+short", "+tries=1", "+time=3", "@"+w.net.Unused.String(), "web.test"); err != nil || strings.TrimSpace(out) != w.web.IP.String() {
		t.Fatalf("dig from a pooled namespace: %v: %q", err, out)
	}
	poll.Until(t, 5*time.Second, "pool refilled", func() bool { return poolReady(w.m) == 2 })
	// Recover leaves this process's live pool alone.
	if _, err := w.m.Recover(context.Background(), RecoverReattach); err != nil {
		t.Fatal(err)
	}
	if got := poolReady(w.m); got != 2 || len(pooled()) != 2 {
		t.Fatalf("after Recover: pool ready %d, files %v, want 2", got, pooled())
	}
	if err := w.m.Teardown(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	if err := w.m.Close(); err != nil {
		t.Fatal(err)
	}
	if got := pooled(); len(got) != 0 {
		t.Errorf("pool namespaces left after Close: %v", got)
	}
}

// TestRecoverAfterCrashMidCreate leaves a namespace the way a crash right after
// it was made would (state file written, nothing configured) and checks that
// Recover removes it and its state.
func TestRecoverAfterCrashMidCreate(t *testing.T) {
	w := newWorld(t, Config{})
	id := netnstest.SandboxID("mid")
	if err := w.m.prepare(); err != nil {
		t.Fatal(err)
	}
	if err := w.m.writeState(w.m.newState(identity.Sandbox{ID: id, Labels: map[string]string{"a": "b"}}, originCreated)); err != nil {
		t.Fatal(err)
	}
	h, err := newNamespace(w.m.nsPath(id))
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	t.Cleanup(func() { unmountRemove(w.m.nsPath(id)) })
	res, err := w.m.Recover(context.Background(), RecoverReattach)
	if err != nil || len(res.Removed) != 1 || res.Removed[0] != id || len(res.Reattached) != 0 {
		t.Fatalf("Recover: %+v, %v; want %s removed", res, err, id)
	}
	if _, err := os.Lstat(w.m.nsPath(id)); !os.IsNotExist(err) {
		t.Errorf("namespace left: %v", err)
	}
	if _, err := os.Stat(filepath.Join(w.cfg.StateDir, id+".json")); !os.IsNotExist(err) {
		t.Errorf("state file left: %v", err)
	}
}

// TestRecoverLeavesOtherManagersAlone: a Manager with another StateDir (another
// gateway, or another engineer's test) must not take over or remove our sandbox.
func TestRecoverLeavesOtherManagersAlone(t *testing.T) {
	w := newWorld(t, Config{})
	s := w.create(t, "mine")
	other, err := New(Config{StateDir: t.TempDir()}, w.srv, w.audit, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer teardownAll(context.Background(), other)
	for _, p := range []RecoverPolicy{RecoverReattach, RecoverRemove} {
		res, err := other.Recover(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range append(res.Reattached, res.Removed...) {
			if id == s.ID {
				t.Fatalf("Recover(%s) of another manager touched %s", p, id)
			}
		}
	}
	if out, err := curl(t, s.Path, "--noproxy", "*", "http://web.test/"); err != nil || !strings.Contains(out, "hello") {
		t.Fatalf("our sandbox after another manager's Recover: %v: %q", err, out)
	}
}

// TestFailedRulesRunLeavesNothing swaps in the in-memory runner failing its
// restore: Create must fail closed and leave nothing.
func TestFailedRulesRunLeavesNothing(t *testing.T) {
	w := newWorld(t, Config{})
	f := &fakeRunner{rules: map[string]string{}, failOn: "restore"}
	w.m.ipt = f
	id := netnstest.SandboxID("ipt")
	if _, err := w.m.Create(context.Background(), identity.Sandbox{ID: id}); err == nil {
		t.Fatal("Create with a failing iptables-restore succeeded")
	}
	if len(f.calls) != 1 || f.calls[0] != "restore "+w.m.Backend() {
		t.Errorf("runner calls: %v", f.calls)
	}
	if _, err := os.Lstat(w.m.nsPath(id)); !os.IsNotExist(err) {
		t.Errorf("namespace left: %v", err)
	}
	// With the fake succeeding, Create runs, and what it applied is the island
	// ruleset.
	f.failOn = ""
	s, err := w.m.Create(context.Background(), identity.Sandbox{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	var applied string
	for _, r := range f.rules {
		applied = r
	}
	if applied != w.m.ruleSpec(false, Inbound{}).render() {
		t.Errorf("applied rules:\n%s\nwant the island ruleset", applied)
	}
	w.m.Teardown(context.Background(), s.ID)
}
