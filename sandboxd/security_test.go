package sandboxd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func randName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// hostDir makes a directory on the host root filesystem (not /tmp or
// /var/tmp, which the sandbox covers with tmpfs mounts of its own) and removes
// it at the end.
func hostDir(t testing.TB, mode os.FileMode) string {
	t.Helper()
	d := filepath.Join("/var/lib", randName("airlock-test-"))
	if err := os.Mkdir(d, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, mode); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

const pyPrefix = "import ctypes, errno, os, socket, subprocess\nlibc = ctypes.CDLL(None, use_errno=True)\n" +
	"def err(r):\n    e = ctypes.get_errno()\n    print('OK' if r == 0 or r > 0 else errno.errorcode.get(e, str(e)))\n"

func py(body string) []string { return []string{"python3", "-c", pyPrefix + body} }

// TestEscapesDenied: each attempt must fail, with the errno the kernel (seccomp,
// missing capability) gives. Each would succeed for an unsandboxed process of the
// same uid (vsock, io_uring, user namespaces, bpf with unprivileged bpf...).
func TestEscapesDenied(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	cases := []struct {
		name string
		argv []string
		want string
	}{
		{"ptrace child", py("c = subprocess.Popen(['sleep', '5'])\nerr(libc.ptrace(16, c.pid, 0, 0))\nc.kill()"), "EPERM"},
		{"process_vm_readv", py("c = subprocess.Popen(['sleep', '5'])\nerr(libc.syscall(310, c.pid, 0, 0, 0, 0, 0))\nc.kill()"), "EPERM"},
		{"mount tmpfs", py("err(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None))"), "EPERM"},
		{"unshare user ns", py("err(libc.unshare(0x10000000))"), "EPERM"},
		{"unshare command", sh("unshare -Ur true 2>/dev/null && echo ESCAPED || echo DENIED"), "DENIED"},
		{"clone newuser", py("err(libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0))"), "EPERM"},
		{"clone3", py("err(libc.syscall(435, 0, 0))"), "ENOSYS"},
		{"setns", py("fd = os.open('/proc/self/ns/net', os.O_RDONLY)\nerr(libc.setns(fd, 0))"), "EPERM"},
		{"raw socket", py("try:\n    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); print('OK')\nexcept OSError as x: print(errno.errorcode[x.errno])"), "EPERM"},
		{"packet socket", py("try:\n    socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0); print('OK')\nexcept OSError as x: print(errno.errorcode[x.errno])"), "EPERM"},
		// Created, never connected: this machine's host sits behind vsock.
		{"vsock socket", py("try:\n    socket.socket(40, socket.SOCK_STREAM, 0); print('OK')\nexcept OSError as x: print(errno.errorcode[x.errno])"), "EPERM"},
		{"netlink socket", py("try:\n    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0); print('OK')\nexcept OSError as x: print(errno.errorcode[x.errno])"), "EPERM"},
		{"io_uring_setup", py("p = ctypes.create_string_buffer(120)\nerr(libc.syscall(425, 8, p))"), "EPERM"},
		{"bpf", py("a = ctypes.create_string_buffer(128)\nerr(libc.syscall(321, 0, a, 128))"), "EPERM"},
		{"userfaultfd", py("err(libc.syscall(323, 0))"), "EPERM"},
		{"perf_event_open", py("a = ctypes.create_string_buffer(128)\nerr(libc.syscall(298, a, 0, -1, -1, 0))"), "EPERM"},
		{"keyctl", py("err(libc.syscall(250, 0, -3, 0))"), "EPERM"},
		{"chroot", py("err(libc.chroot(b'/tmp'))"), "EPERM"},
		{"pivot_root", py("err(libc.syscall(155, b'/tmp', b'/tmp'))"), "EPERM"},
		{"open_tree", py("err(libc.syscall(428, -100, b'/tmp', 1))"), "EPERM"},
		{"prlimit another process", py("c = subprocess.Popen(['sleep', '5'])\nl = (ctypes.c_ulong * 2)(64, 64)\nerr(libc.syscall(302, c.pid, 7, l, None))\nc.kill()"), "EPERM"},
		{"setrlimit self allowed", sh("ulimit -n 100 && ulimit -n"), "100"},
		{"unix socket allowed", py("socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); print('OK')"), "OK"},
		{"inet6 socket allowed", py("socket.socket(socket.AF_INET6, socket.SOCK_STREAM); print('OK')"), "OK"},
		{"capabilities all zero", sh("grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t ' ' ' | tr '\\n' ';'"),
			"CapInh: 0000000000000000;CapPrm: 0000000000000000;CapEff: 0000000000000000;CapBnd: 0000000000000000;CapAmb: 0000000000000000;NoNewPrivs: 1;Seccomp: 2;"},
		{"no sys", sh("ls -A /sys | wc -l"), "0"},
		{"proc masked", sh("cat /proc/timer_list /proc/keys /proc/kallsyms 2>/dev/null | wc -c"), "0"},
		{"proc sys read-only", sh("echo x > /proc/sys/kernel/hostname 2>/dev/null && echo WROTE || echo DENIED"), "DENIED"},
		{"pid namespace", sh("ls /proc | grep -c '^[0-9]'"), ""},
		{"resolv.conf", sh("head -n1 /etc/resolv.conf"), "nameserver 127.0.0.1"},
		{"hostname", []string{"hostname"}, "sandbox"},
		{"no root home", sh("ls -A /root | wc -l"), "0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := mustRun(t, e, Spec{Argv: tc.argv})
			got := strings.TrimSpace(string(res.Stdout))
			if tc.name == "pid namespace" {
				// init, exec'd shell, ls and grep: never the host's hundreds.
				if n, _ := strconv.Atoi(got); n < 1 || n > 5 {
					t.Errorf("processes visible: got %q, want 1..5", got)
				}
				return
			}
			if got != tc.want {
				t.Errorf("got %q, want %q (stderr %q)", got, tc.want, res.Stderr)
			}
		})
	}
}

func TestWritesOutsideTmpfsAndWorkspaceFail(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	open := hostDir(t, 0o1777) // writable by anyone on the host: only ro stops it
	sub := filepath.Join(open, "sub")
	if err := os.Mkdir(sub, 0o1777); err != nil {
		t.Fatal(err)
	}
	// A submount: proves the read-only remount is recursive.
	if err := unix.Mount("airlock-test-sub", sub, "tmpfs", 0, "size=1m,mode=1777"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(sub, unix.MNT_DETACH) })
	ws := hostDir(t, 0o1777)
	script := `for p in ` + open + `/f ` + sub + `/f /etc/airlock-x /usr/airlock-x /dev/airlock-x /dev/shm/ok /tmp/ok $HOME/ok ` + ws + `/ok; do
	  if echo x > $p 2>/dev/null; then echo "$p W"; else echo "$p R"; fi; done`
	res := mustRun(t, e, Spec{Argv: sh(script), Workspace: ws})
	want := map[string]string{open + "/f": "R", sub + "/f": "R", "/etc/airlock-x": "R", "/usr/airlock-x": "R",
		"/dev/airlock-x": "R", "/dev/shm/ok": "W", "/tmp/ok": "W", DefaultHome + "/ok": "W", ws + "/ok": "W"}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
		if p, v, ok := strings.Cut(l, " "); ok {
			got[p] = v
		}
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: got %q, want %q", p, got[p], w)
		}
	}
	for _, p := range []string{filepath.Join(open, "f"), filepath.Join(sub, "f")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists on the host", p)
		}
	}
	if b, err := os.ReadFile(filepath.Join(ws, "ok")); err != nil || string(b) != "x\n" {
		t.Errorf("workspace write: got %q, %v", b, err)
	}
}

func TestHiddenPathsEnvAndCA(t *testing.T) {
	d := hostDir(t, 0o755)
	secret := filepath.Join(d, "ca.key")
	visible := filepath.Join(d, "visible")
	secretDir := filepath.Join(d, "secrets.d")
	link := filepath.Join(d, "link-to-key")
	for _, f := range []struct{ p, v string }{{secret, "TOPSECRET-KEY"}, {visible, "PLAIN-VISIBLE"}} {
		if err := os.WriteFile(f.p, []byte(f.v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(secretDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secretDir, "token"), []byte("TOPSECRET-TOKEN"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "bundle.pem")
	if err := os.WriteFile(ca, []byte("MERGED-CA-BUNDLE\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e, _ := newTestExecutor(t, func(c *Config) { c.HiddenPaths = []string{link} })
	t.Setenv("AIRLOCK_TEST_HOST_SECRET", "HOSTENV-SECRET")
	t.Setenv("TZ", "UTC")
	script := `cat ` + secret + ` ` + link + ` ` + visible + ` ` + secretDir + `/token 2>&1; echo; env; tr '\0' '\n' < /proc/1/environ; cat /proc/*/environ 2>/dev/null | tr '\0' '\n'; echo; cat $SSL_CERT_FILE /etc/ssl/certs/ca-certificates.crt`
	res := mustRun(t, e, Spec{Argv: sh(script), Hidden: []string{secretDir}, CABundle: ca,
		Proxy: "http://127.0.0.1:3128", Env: []string{"EXPLICIT=1"}})
	out := string(res.Stdout)
	for _, bad := range []string{"TOPSECRET", "HOSTENV-SECRET", "AIRLOCK_SANDBOXD_STAGE=exec"} {
		if strings.Contains(out, bad) {
			t.Errorf("sandbox saw %q:\n%s", bad, out)
		}
	}
	for _, good := range []string{"PLAIN-VISIBLE", "EXPLICIT=1", "TZ=UTC", "HTTPS_PROXY=http://127.0.0.1:3128",
		"https_proxy=http://127.0.0.1:3128", "NO_PROXY=localhost", "REQUESTS_CA_BUNDLE=" + SystemCABundle,
		"NODE_EXTRA_CA_CERTS=" + SystemCABundle, "PATH=" + SandboxPath, "MERGED-CA-BUNDLE\nMERGED-CA-BUNDLE"} {
		if !strings.Contains(out, good) {
			t.Errorf("sandbox output lacks %q:\n%s", good, out)
		}
	}
}

// TestSetuidBinaryDoesNotElevate: a setuid-root copy of id on the host root must
// run with the sandbox's uid (nosuid mounts and no_new_privs).
func TestSetuidBinaryDoesNotElevate(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	d := hostDir(t, 0o755)
	suid := filepath.Join(d, "id")
	b, err := os.ReadFile("/usr/bin/id")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(suid, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(suid, 0o4755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	res := mustRun(t, e, Spec{Argv: []string{suid, "-u"}})
	if got := strings.TrimSpace(string(res.Stdout)); got != strconv.Itoa(res.UID) {
		t.Errorf("euid: got %q, want %d", got, res.UID)
	}
	res = mustRun(t, e, Spec{Argv: []string{"/usr/bin/su", "-c", "id -u"}, Stdin: strings.NewReader("x\n")})
	if strings.TrimSpace(string(res.Stdout)) == "0" || res.ExitCode == 0 {
		t.Errorf("su elevated: exit %d stdout %q", res.ExitCode, res.Stdout)
	}
}

// TestKillHostProcessFails: a host process running as the sandbox's own uid
// cannot be signalled from inside (own PID namespace).
func TestKillHostProcessFails(t *testing.T) {
	e, _ := newTestExecutor(t, func(c *Config) { c.UIDCount = 1; c.PoolSize = -1 })
	uid := e.cfg.UIDBase
	helper := exec.Command("/bin/sleep", "60")
	helper.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = helper.Process.Kill(); _ = helper.Wait() })
	pid := helper.Process.Pid
	res := mustRun(t, e, Spec{Argv: sh("kill -9 " + strconv.Itoa(pid) + " 2>/dev/null && echo KILLED || echo DENIED")})
	if res.UID != uid {
		t.Fatalf("sandbox uid: got %d, want %d", res.UID, uid)
	}
	if got := strings.TrimSpace(string(res.Stdout)); got != "DENIED" {
		t.Errorf("kill: got %q, want DENIED", got)
	}
	if err := unix.Kill(pid, 0); err != nil {
		t.Errorf("host helper died: %v", err)
	}
}

// TestNetworkFreshAndJoined: an empty NetNS gives a lo-only namespace where curl
// and python's getaddrinfo work (netlink is denied); a given namespace is joined.
func TestNetworkFreshAndJoined(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	script := `cd /tmp && echo served > index.html && (python3 -m http.server 18080 --bind 127.0.0.1 >/dev/null 2>&1 &)
	for i in $(seq 50); do curl -s http://localhost:18080/index.html && break; sleep 0.1; done
	python3 -c "import socket; print(sorted({a[4][0] for a in socket.getaddrinfo('localhost', 80)}))"
	grep -c : /proc/net/dev`
	res := mustRun(t, e, Spec{Argv: sh(script)})
	out := string(res.Stdout)
	if !strings.Contains(out, "served") || !strings.Contains(out, "127.0.0.1") {
		t.Errorf("curl/getaddrinfo in fresh netns: got %q stderr %q", out, res.Stderr)
	}
	if !strings.HasSuffix(strings.TrimSpace(out), "\n1") { // lo only
		t.Errorf("interfaces: got %q, want only lo", out)
	}

	name := randName("airlock-t-")
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "add", "10.255.255.254/32", "dev", "lo"}} {
		if out, err := exec.Command("ip", append([]string{"-n", name}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	res = mustRun(t, e, Spec{Argv: sh("grep -c 10.255.255.254 /proc/net/fib_trie"), NetNS: "/run/netns/" + name})
	if got := strings.TrimSpace(string(res.Stdout)); got == "0" || got == "" {
		t.Errorf("joined netns: address not visible, got %q stderr %q", got, res.Stderr)
	}
}

func TestCommandNotFound(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	res, err := e.Run(context.Background(), Spec{Argv: []string{"airlock-no-such-command"}})
	var ee *ExecError
	if !errorsAs(err, &ee) || res == nil || res.ExitCode != 127 {
		t.Fatalf("got res=%+v err=%v, want exit 127 and *ExecError", res, err)
	}
}

// The command is forked by a thread of init that took the command's identity
// (the exec stage that used to be a separate re-executed process is gone): the
// command still gets only stdio, the rlimits, its own session, and an exec
// failure still maps to 126/127.
func TestCommandThreadIdentity(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	cases := []struct {
		name string
		argv []string
		want string
	}{
		{"only stdio fds", py("print(' '.join(sorted(f for f in os.listdir('/proc/self/fd') if int(f) > 2 and os.path.exists('/proc/self/fd/' + f))))"), ""},
		{"rlimits", sh("echo $(ulimit -c) $(ulimit -n) $(ulimit -Hn)"), "0 1024 1024"},
		{"session leader", py("print(os.getsid(0) == os.getpid())"), "True"},
		{"real, effective and saved ids", sh("grep -E '^(Uid|Gid|Groups):' /proc/self/status | tr -s '\\t ' ' ' | tr '\\n' ';'"), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := mustRun(t, e, Spec{Argv: tc.argv})
			got := strings.TrimSpace(string(res.Stdout))
			want := tc.want
			if tc.name == "real, effective and saved ids" {
				u := strconv.Itoa(res.UID)
				want = "Uid: " + u + " " + u + " " + u + " " + u + ";Gid: " + u + " " + u + " " + u + " " + u + ";Groups: ;"
			}
			if got != want {
				t.Errorf("got %q, want %q (stderr %q)", got, want, res.Stderr)
			}
		})
	}
	t.Run("not executable is 126", func(t *testing.T) {
		res, err := e.Run(context.Background(), Spec{Argv: []string{"/etc/passwd"}})
		var ee *ExecError
		if !errorsAs(err, &ee) || res == nil || res.ExitCode != 126 {
			t.Fatalf("got res=%+v err=%v, want exit 126 and *ExecError", res, err)
		}
	})
}
