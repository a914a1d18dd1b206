package netns

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/identity"
	"github.com/airlock-dev/airlock/netns/netnstest"
	"github.com/airlock-dev/airlock/test/poll"
)

// waiter is a shell started inside a namespace by its path (as the executor's
// init joins a pooled one): it tries web.test at once, then waits for a line on
// stdin and tries again.
type waiter struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

const waiterScript = `curl -sS --max-time 3 --noproxy '*' http://web.test/before; r=$?; echo; echo "first=$r"
curl -sS --max-time 3 --noproxy '*' -H 'Host: web.test' http://WEBIP/before; r=$?; echo; echo "direct=$r"
read go
curl -sS --max-time 5 --noproxy '*' http://web.test/after; r=$?; echo; echo "second=$r"`

func startWaiter(t *testing.T, path, webIP string) *waiter {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, "nsenter", "--net="+path, "--", "sh", "-c", strings.ReplaceAll(waiterScript, "WEBIP", webIP))
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return &waiter{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
}

// until reads the waiter's output up to the line starting with prefix and
// returns everything read.
func (w *waiter) until(t *testing.T, prefix string) string {
	t.Helper()
	var all strings.Builder
	for {
		line, err := w.out.ReadString('\n')
		all.WriteString(line)
		if strings.HasPrefix(line, prefix) {
			return all.String()
		}
		if err != nil {
			t.Fatalf("waiter output ended before %q: %v: %q", prefix, err, all.String())
		}
	}
}

// poolNamesOnDisk lists this process's pool namespaces under the run dir.
func poolNamesOnDisk(m *Manager) []string {
	ents, _ := os.ReadDir(m.cfg.RunDir)
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), poolPrefix+strconv.Itoa(os.Getpid())+"-") {
			out = append(out, filepath.Join(m.cfg.RunDir, e.Name()))
		}
	}
	return out
}

func mounted(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), " "+path+" ")
}

// TestPooledCreateFrom: a process started in a pooled namespace before it has
// a sandbox has no way out (the target and the DNS server see nothing); once
// CreateFrom gave the namespace to a sandbox, the same process reaches the
// allowed host through the rules and the test gateway's listeners.
func TestPooledCreateFrom(t *testing.T) {
	w := newWorld(t, Config{PoolSize: 1})
	ctx := context.Background()
	poll.Until(t, 5*time.Second, "pool filled", func() bool { return poolReady(w.m) == 1 })
	p, err := w.m.TakePooled(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Discard()
	if !strings.HasPrefix(filepath.Base(p.Path()), poolPrefix) || !mounted(t, p.Path()) {
		t.Fatalf("pooled path %s: want a mounted pool namespace", p.Path())
	}
	poll.Until(t, 5*time.Second, "pool refilled", func() bool { return poolReady(w.m) == 1 })
	if ready := <-w.m.pool; ready == p.Path() {
		t.Fatal("the taken namespace is still in the pool")
	} else {
		w.m.pool <- ready
	}

	reqs, queries := w.web.Requests()+w.web.Conns(), w.net.Queries("web.test")
	proc := startWaiter(t, p.Path(), w.web.IP.String())
	first := proc.until(t, "direct=")
	if strings.Contains(first, "hello") || strings.Contains(first, "first=0") || strings.Contains(first, "direct=0") {
		t.Fatalf("a process in the pooled namespace got out before CreateFrom: %q", first)
	}
	if got := w.web.Requests() + w.web.Conns() - reqs; got != 0 {
		t.Fatalf("web.test saw %d connections/requests before CreateFrom, want 0", got)
	}
	if got := w.net.Queries("web.test") - queries; got != 0 {
		t.Fatalf("the DNS server saw %d queries before CreateFrom, want 0", got)
	}
	// Recover in this process leaves a taken namespace alone.
	if _, err := w.m.Recover(ctx, RecoverReattach); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.Path()); err != nil {
		t.Fatalf("Recover removed the taken pooled namespace: %v", err)
	}

	id := netnstest.SandboxID("pooled")
	s, err := w.m.CreateFrom(ctx, identity.Sandbox{ID: id, Labels: map[string]string{"test": t.Name()}}, p)
	if err != nil {
		t.Fatalf("CreateFrom: %v", err)
	}
	w.m.unmounts.Wait() // the pool name goes in the background
	if s.Path != w.m.nsPath(id) || mounted(t, p.Path()) {
		t.Fatalf("sandbox at %s, pool name mounted %v; want %s and the pool name gone", s.Path, mounted(t, p.Path()), w.m.nsPath(id))
	}
	if _, ok := w.m.poolNames.Load(p.Path()); ok {
		t.Fatalf("the pool name %s is still tracked after its unmount", p.Path())
	}
	if _, err := os.Stat(filepath.Join(w.cfg.StateDir, id+".json")); err != nil {
		t.Fatalf("state file: %v", err)
	}
	procNS, err := nsInode("/proc/" + strconv.Itoa(proc.cmd.Process.Pid) + "/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if sbNS, err := nsInode(s.Path); err != nil || sbNS != procNS {
		t.Fatalf("the process's namespace %v is not the sandbox's %v (%v)", procNS, sbNS, err)
	}
	if _, err := io.WriteString(proc.stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	second := proc.until(t, "second=")
	if !strings.Contains(second, "hello from web.test /after") || !strings.Contains(second, "second=0") {
		t.Fatalf("after CreateFrom: got %q, want web.test's answer", second)
	}
	if got := w.web.Requests() - reqs; got != 1 {
		t.Errorf("web.test requests: got %d, want 1", got)
	}
	if err := p.Discard(); err != nil || !mounted(t, s.Path) {
		t.Fatalf("Discard after CreateFrom: %v, sandbox mounted %v; want a no-op", err, mounted(t, s.Path))
	}
	if _, err := w.m.CreateFrom(ctx, identity.Sandbox{ID: netnstest.SandboxID("again")}, p); err == nil {
		t.Fatal("a second CreateFrom of one pooled namespace succeeded")
	}
	if err := w.m.Teardown(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(s.Path); !os.IsNotExist(err) {
		t.Errorf("namespace left after Teardown: %v", err)
	}
}

// TestPooledDiscardLeavesNothing: a pooled namespace discarded, one that
// CreateFrom failed with, and one still held at Close leave no mount, no
// file and no state.
func TestPooledDiscardLeavesNothing(t *testing.T) {
	w := newWorld(t, Config{}) // no pool: TakePooled makes one now
	ctx := context.Background()
	gone := func(t *testing.T, what, path string) {
		t.Helper()
		if _, err := os.Lstat(path); !os.IsNotExist(err) || mounted(t, path) {
			t.Errorf("%s: %s left (%v)", what, path, err)
		}
		if _, ok := w.m.poolNames.Load(path); ok {
			t.Errorf("%s: %s still tracked as ours", what, path)
		}
	}
	t.Run("discard", func(t *testing.T) {
		fds := fdCount(t)
		p, err := w.m.TakePooled(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !mounted(t, p.Path()) {
			t.Fatalf("%s not mounted", p.Path())
		}
		if err := p.Discard(); err != nil {
			t.Fatal(err)
		}
		if err := p.Discard(); err != nil {
			t.Fatalf("second Discard: %v", err)
		}
		gone(t, "discarded", p.Path())
		if _, err := w.m.CreateFrom(ctx, identity.Sandbox{ID: netnstest.SandboxID("late")}, p); err == nil {
			t.Fatal("CreateFrom of a discarded namespace succeeded")
		}
		if got := fdCount(t); got != fds {
			t.Errorf("fds: got %d, want %d", got, fds)
		}
	})
	t.Run("create from fails", func(t *testing.T) {
		for _, step := range []string{"bad id", "state", "namespace", "listen", "serve"} {
			p, err := w.m.TakePooled(ctx)
			if err != nil {
				t.Fatal(err)
			}
			id := netnstest.SandboxID("pfail")
			if step == "bad id" {
				id = "pool-1"
			}
			w.m.hook = func(s string) error {
				if s == step {
					return errInjected
				}
				return nil
			}
			_, err = w.m.CreateFrom(ctx, identity.Sandbox{ID: id}, p)
			w.m.hook = nil
			if err == nil {
				t.Fatalf("%s: CreateFrom succeeded", step)
			}
			gone(t, step+": pooled", p.Path())
			gone(t, step+": sandbox", w.m.nsPath(id))
			if _, err := os.Stat(filepath.Join(w.cfg.StateDir, id+".json")); !os.IsNotExist(err) {
				t.Errorf("%s: state file left: %v", step, err)
			}
			if n := w.srv.served(); n != 0 || len(w.m.IDs()) != 0 {
				t.Errorf("%s: served %d, managed %v; want none", step, n, w.m.IDs())
			}
		}
	})
	t.Run("held at close", func(t *testing.T) {
		m := w.newManager(t)
		p, err := m.TakePooled(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		gone(t, "held at Close", p.Path())
		if _, err := m.TakePooled(ctx); err == nil {
			t.Fatal("TakePooled after Close succeeded")
		}
		if left := poolNamesOnDisk(m); len(left) != 0 {
			t.Errorf("pool namespaces left: %v", left)
		}
	})
}

// TestCloseWaitsForPoolNameUnmounts: CreateFrom unmounts the pool name in
// the background; Close returns only once every such unmount is done, so a
// stopped manager leaves no pool name of its own behind.
func TestCloseWaitsForPoolNameUnmounts(t *testing.T) {
	w := newWorld(t, Config{})
	ctx := context.Background()
	var paths []string
	var taken []*Pooled
	for range 4 {
		p, err := w.m.TakePooled(ctx)
		if err != nil {
			t.Fatal(err)
		}
		taken = append(taken, p)
		paths = append(paths, p.Path())
	}
	// Back to back, then Close at once: several unmounts are still under way.
	for i, p := range taken {
		id := netnstest.SandboxID("unmount" + strconv.Itoa(i))
		sb, err := w.m.CreateFrom(ctx, identity.Sandbox{ID: id}, p)
		if err != nil {
			t.Fatal(err)
		}
		// Close forgets its sandboxes and leaves their namespaces (as serve
		// leaves them for the next start): remove each by its path.
		t.Cleanup(func() { _ = unmountRemove(sb.Path) })
	}
	if err := w.m.Close(); err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		if _, err := os.Lstat(path); !os.IsNotExist(err) || mounted(t, path) {
			t.Errorf("pool name %s left after Close (%v)", path, err)
		}
	}
}

// TestRecoverSparesAnotherManagersPool: two Managers in one process (as in the
// daemon's tests, or a recovery beside a daemon) share the pid in their pool
// names. Their names must still differ (they once both counted from 1, and
// one's Close unmounted the other's pool), and one's Recover must not take the
// other's live pool for a stale one. CI caught both as TestRootSandboxAPI's
// create failing with "bind mount ... no such file or directory".
func TestRecoverSparesAnotherManagersPool(t *testing.T) {
	w := newWorld(t, Config{PoolSize: 2})
	ctx := context.Background()
	fill := func(m *Manager) {
		deadline := time.Now().Add(30 * time.Second)
		for poolReady(m) < 2 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if poolReady(m) < 2 {
			t.Fatal("the pool did not fill")
		}
	}
	ours := func(m *Manager) map[string]bool {
		out := map[string]bool{}
		for _, path := range poolNamesOnDisk(m) {
			if _, ok := m.poolNames.Load(path); ok {
				out[path] = true
			}
		}
		return out
	}
	fill(w.m)
	cfg := w.cfg
	cfg.StateDir = t.TempDir() // same run dir, same pid, its own state
	other, err := New(cfg, w.srv, w.audit, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	if _, err := other.Recover(ctx, RecoverRemove); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	fill(other)
	mine, theirs := ours(w.m), ours(other)
	for path := range mine {
		if theirs[path] {
			t.Errorf("both Managers made pool namespace %s", path)
		}
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	for path := range mine {
		if !mounted(t, path) {
			t.Errorf("the other Manager's Recover or Close removed live pool namespace %s", path)
		}
	}
	sb, err := w.m.Create(ctx, identity.Sandbox{ID: netnstest.SandboxID("pool-spared")})
	if err != nil {
		t.Fatalf("create from the pool after the other's Recover and Close: %v", err)
	}
	if err := w.m.Teardown(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
}

// TestPooledRemovedFromOutside pins a ready pool namespace removed with
// `ip netns delete` while it waited: TakePooled handed its path out and
// everything built on it failed. Now TakePooled drops it and hands out
// one that is there, and Check tells a taken namespace that was removed
// afterwards.
func TestPooledRemovedFromOutside(t *testing.T) {
	w := newWorld(t, Config{PoolSize: 1})
	ctx := context.Background()
	poll.Until(t, 5*time.Second, "pool filled", func() bool { return poolReady(w.m) == 1 })
	ready := <-w.m.pool
	w.m.pool <- ready
	if out, err := exec.Command("ip", "netns", "delete", filepath.Base(ready)).CombinedOutput(); err != nil {
		t.Fatalf("ip netns delete: %v: %s", err, out)
	}
	p, err := w.m.TakePooled(ctx)
	if err != nil {
		t.Fatalf("TakePooled after the ready namespace was removed: %v", err)
	}
	defer p.Discard()
	if p.Path() == ready || !mounted(t, p.Path()) {
		t.Fatalf("TakePooled handed out %s (removed: %s), want a mounted namespace", p.Path(), ready)
	}
	if err := p.Check(); err != nil {
		t.Fatalf("Check of a namespace that is there: %v", err)
	}
	if out, err := exec.Command("ip", "netns", "delete", filepath.Base(p.Path())).CombinedOutput(); err != nil {
		t.Fatalf("ip netns delete: %v: %s", err, out)
	}
	if err := p.Check(); err == nil {
		t.Fatal("Check of a namespace removed from outside: got nil, want an error")
	}
}
