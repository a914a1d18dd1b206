package sandboxd

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// socketProbe is run inside a sandbox (and, as the control, on the host as
// an unprivileged uid). Each stdin line is "probe<TAB>path" or
// "bait<TAB>path"; a path starting with @ is an abstract name. For each it
// tries connect() as a stream, datagram and seqpacket socket and, for baits
// only, a sendto() (a real host socket is never sent a byte, even when the
// sandbox is broken), printing path<TAB>results. With an argument it then
// prints READY, waits up to 20 s for that path to appear and probes it as a
// bait.
const socketProbe = `
import errno, os, socket, sys, time
def attempt(kind, path):
    addr = '\0' + path[1:] if path.startswith('@') else path
    out = []
    types = [('stream', socket.SOCK_STREAM), ('dgram', socket.SOCK_DGRAM), ('seqpacket', socket.SOCK_SEQPACKET)]
    for name, typ in types:
        s = socket.socket(socket.AF_UNIX, typ)
        s.settimeout(2)
        try:
            s.connect(addr)
            out.append(name + '=CONNECTED')
        except OSError as e:
            out.append(name + '=' + errno.errorcode.get(e.errno, str(e.errno)))
        finally:
            s.close()
    if kind == 'bait':
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            s.sendto(b'x', addr)
            out.append('sendto=SENT')
        except OSError as e:
            out.append('sendto=' + errno.errorcode.get(e.errno, str(e.errno)))
        finally:
            s.close()
    print(path + '\t' + ' '.join(out), flush=True)
for line in sys.stdin:
    kind, _, path = line.rstrip('\n').partition('\t')
    if path:
        attempt(kind, path)
if len(sys.argv) > 1:
    late = sys.argv[1]
    print('READY', flush=True)
    deadline = time.time() + 20
    while not os.path.lexists(late) and time.time() < deadline:
        time.sleep(0.01)
    if os.path.lexists(late):
        attempt('bait', late)
    else:
        print(late + '\tMISSING', flush=True)
print('DONE', flush=True)
`

// bait is a socket the test listens on, counting what reaches it.
type bait struct {
	path string // "@name" for an abstract socket
	net  string // unix, unixgram or unixpacket
	got  atomic.Int64
	stop func()
}

// listenBait listens on path (mode 0777, owned by root) and counts accepted
// connections or received datagrams until the test ends.
func listenBait(t *testing.T, path, network string) *bait {
	t.Helper()
	b := &bait{path: path, net: network}
	var wg sync.WaitGroup
	addr := &net.UnixAddr{Name: path, Net: network}
	if network == "unixgram" {
		c, err := net.ListenUnixgram(network, addr)
		if err != nil {
			t.Fatalf("bait %s: %v", path, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64)
			for {
				if _, _, err := c.ReadFrom(buf); err != nil {
					return
				}
				b.got.Add(1)
			}
		}()
		b.stop = func() { c.Close(); wg.Wait() }
	} else {
		l, err := net.ListenUnix(network, addr)
		if err != nil {
			t.Fatalf("bait %s: %v", path, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				b.got.Add(1)
				c.Close()
			}
		}()
		b.stop = func() { l.Close(); wg.Wait() }
	}
	t.Cleanup(func() {
		b.stop()
		if !strings.HasPrefix(path, "@") {
			_ = os.Remove(path)
		}
	})
	if !strings.HasPrefix(path, "@") {
		if err := os.Chmod(path, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// baitDir makes a directory (and its missing parents are an error) removed at
// the end.
func baitDir(t *testing.T, d string) string {
	t.Helper()
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// baitMount mounts a filesystem of type fstype on a fresh directory d.
func baitMount(t *testing.T, d, fstype string) string {
	t.Helper()
	baitDir(t, d)
	if err := unix.Mount("airlock-test-bait", d, fstype, 0, "mode=755"); err != nil {
		t.Fatalf("mount %s on %s: %v", fstype, d, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(d, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", d, err)
		}
	})
	return d
}

// hostSocketFiles lists the socket files on the host's mounts, outside /proc
// and /sys, walking at most maxEntries entries.
func hostSocketFiles(t *testing.T, maxEntries int) []string {
	t.Helper()
	var socks []string
	n := 0
	errStop := errors.New("stop")
	err := filepath.WalkDir("/", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable: skip it
		}
		if n++; n > maxEntries {
			return errStop
		}
		if d.IsDir() && (p == "/proc" || p == "/sys") {
			return filepath.SkipDir
		}
		if d.Type()&fs.ModeSocket != 0 && !strings.ContainsAny(p, "\t\n") {
			socks = append(socks, p)
		}
		return nil
	})
	if errors.Is(err, errStop) {
		t.Logf("host walk stopped after %d entries: the enumeration is partial", maxEntries)
	}
	return socks
}

// probeResults parses socketProbe's output: path -> results.
func probeResults(out string) map[string]string {
	got := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if p, r, ok := strings.Cut(l, "\t"); ok {
			got[p] = r
		}
	}
	return got
}

// refused reports whether every attempt in a probe result failed at the
// path lookup or the permission check (ENOENT, EACCES): the kernel never got
// as far as the socket, so nothing listening there could be reached. ECONN-
// REFUSED or EPROTOTYPE would mean the permission check passed.
func refused(r string, allowed ...string) bool {
	fields := strings.Fields(r)
	if len(fields) < 3 {
		return false
	}
	for _, f := range fields {
		_, v, _ := strings.Cut(f, "=")
		ok := false
		for _, a := range allowed {
			ok = ok || v == a
		}
		if !ok {
			return false
		}
	}
	return true
}

// TestHostUnixSocketsUnreachable: no socket file of the host is connectable
// from a sandbox. The sandbox tries connect() (stream, datagram, seqpacket) on
// every socket file found on the host (outside /proc and /sys), and connect()
// plus sendto() on root-owned 0777 bait sockets listening in /run, /var/run,
// /var/tmp, /var/lib/airlock-test-*, /srv and /opt, on a separate tmpfs and
// on a ramfs mount (a filesystem that cannot be idmapped), made after the
// executor started, and on one made while the sandbox runs. Every attempt
// must fail at the lookup or the permission check, and no bait may accept a
// connection or receive a datagram. As a control, the same probe run on the
// host by an unprivileged uid reaches every bait.
func TestHostUnixSocketsUnreachable(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	r := randName("")
	srv := baitDir(t, "/srv/alk-bait-"+r)
	baits := []*bait{
		listenBait(t, "/run/alk-bait-"+r+".sock", "unix"),
		listenBait(t, "/run/alk-bait-"+r+"-dgram.sock", "unixgram"),
		listenBait(t, filepath.Join(baitDir(t, "/var/run/alk-bait-d-"+r), "bait.sock"), "unix"),
		listenBait(t, "/var/tmp/alk-bait-"+r+".sock", "unix"),
		listenBait(t, filepath.Join(baitDir(t, "/var/lib/airlock-test-"+r), "bait.sock"), "unix"),
		listenBait(t, filepath.Join(baitDir(t, "/var/lib/airlock-test-"+r+"-dg"), "bait.sock"), "unixgram"),
		listenBait(t, filepath.Join(srv, "bait.sock"), "unix"),
		listenBait(t, filepath.Join(srv, "bait-seqpacket.sock"), "unixpacket"),
		listenBait(t, filepath.Join(baitDir(t, "/opt/alk-bait-"+r), "bait.sock"), "unix"),
		listenBait(t, filepath.Join(baitMount(t, "/srv/alk-bait-tmpfs-"+r, "tmpfs"), "bait.sock"), "unix"),
		listenBait(t, filepath.Join(baitMount(t, "/srv/alk-bait-ramfs-"+r, "ramfs"), "bait.sock"), "unix"),
	}
	baitPaths := map[string]bool{}
	var input strings.Builder
	for _, b := range baits {
		baitPaths[b.path] = true
		input.WriteString("bait\t" + b.path + "\n")
	}

	// Control: an unprivileged host process reaches every bait, so the probe
	// and the counters can see a reachable socket.
	ctl := exec.Command("/usr/bin/python3", "-c", socketProbe)
	ctl.Stdin = strings.NewReader(input.String())
	ctl.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65533, Gid: 65533}}
	out, err := ctl.Output()
	if err != nil {
		t.Fatalf("control probe on the host: %v", err)
	}
	ctlRes := probeResults(string(out))
	for _, b := range baits {
		want := map[string]string{"unix": "stream=CONNECTED", "unixgram": "sendto=SENT", "unixpacket": "seqpacket=CONNECTED"}[b.net]
		if !strings.Contains(ctlRes[b.path], want) {
			t.Errorf("control: %s: got %q, want %s (the bait must be reachable from the host)", b.path, ctlRes[b.path], want)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, b := range baits {
		for b.got.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if b.got.Load() == 0 {
			t.Errorf("control: bait %s counted nothing", b.path)
		}
		b.got.Store(0)
	}

	host := hostSocketFiles(t, 3_000_000)
	for _, p := range host {
		if !baitPaths[p] {
			input.WriteString("probe\t" + p + "\n")
		}
	}
	late := filepath.Join(srv, "late.sock")
	w := &lineWatch{want: "READY", seen: make(chan struct{})}
	type outcome struct {
		res *Result
		err error
	}
	done, finished := make(chan outcome, 1), make(chan struct{})
	t.Cleanup(func() { <-finished })
	go func() {
		defer close(finished)
		res, err := e.Run(context.Background(), Spec{Argv: []string{"/usr/bin/python3", "-c", socketProbe, late},
			Stdin: strings.NewReader(input.String()), Stdout: w})
		done <- outcome{res, err}
	}()
	select {
	case <-w.seen:
	case o := <-done:
		t.Fatalf("probe ended before READY: %v %+v", o.err, o.res)
	}
	lateBait := listenBait(t, late, "unix") // made while the sandbox runs
	baits = append(baits, lateBait)
	o := <-done
	if o.err != nil {
		t.Fatalf("sandbox probe: %v", o.err)
	}
	stdout := string(o.res.Stdout)
	if !strings.Contains(stdout, "\nDONE\n") {
		t.Fatalf("probe did not finish: stdout %q stderr %q", stdout, o.res.Stderr)
	}
	got := probeResults(stdout)
	time.Sleep(100 * time.Millisecond) // let a connection that got through reach a counter
	for _, b := range baits {
		if !refused(got[b.path], "ENOENT", "EACCES") {
			t.Errorf("bait %s: got %q, want every attempt refused with ENOENT or EACCES", b.path, got[b.path])
		}
		if n := b.got.Load(); n != 0 {
			t.Errorf("bait %s: got %d connections or datagrams from the sandbox, want 0", b.path, n)
		}
	}
	var paths []string
	for _, p := range host {
		paths = append(paths, p)
		if !refused(got[p], "ENOENT", "EACCES") {
			t.Errorf("host socket %s: got %q, want every attempt refused with ENOENT or EACCES", p, got[p])
		}
	}
	sort.Strings(paths)
	t.Logf("%d host socket files probed (baits included): %s", len(paths), strings.Join(paths, " "))
}

// TestHostAbstractSocketUnreachable: abstract unix sockets belong to a network
// namespace. One the host listens on (in the test's own namespace) is not
// reachable from a sandbox in a fresh namespace or in a joined one, while the
// host reaches it.
func TestHostAbstractSocketUnreachable(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	b := listenBait(t, "@airlock-test-bait-"+randName(""), "unix")
	input := "bait\t" + b.path + "\n"
	ctl := exec.Command("/usr/bin/python3", "-c", socketProbe)
	ctl.Stdin = strings.NewReader(input)
	ctl.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65533, Gid: 65533}}
	out, err := ctl.Output()
	if err != nil {
		t.Fatalf("control probe on the host: %v", err)
	}
	if r := probeResults(string(out))[b.path]; !strings.Contains(r, "stream=CONNECTED") {
		t.Fatalf("control: got %q, want the host to reach the abstract bait", r)
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.got.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if b.got.Load() == 0 {
		t.Fatal("control: the bait counted nothing")
	}
	b.got.Store(0)

	name := randName("airlock-t-")
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	for _, tc := range []struct {
		name  string
		netns string
	}{{"fresh netns", ""}, {"joined netns", "/run/netns/" + name}} {
		t.Run(tc.name, func(t *testing.T) {
			res := mustRun(t, e, Spec{Argv: []string{"/usr/bin/python3", "-c", socketProbe},
				Stdin: strings.NewReader(input), NetNS: tc.netns})
			if r := probeResults(string(res.Stdout))[b.path]; !refused(r, "ECONNREFUSED") {
				t.Errorf("got %q, want every attempt refused with ECONNREFUSED (stderr %q)", r, res.Stderr)
			}
			time.Sleep(100 * time.Millisecond)
			if n := b.got.Load(); n != 0 {
				t.Errorf("bait: got %d connections or datagrams from the sandbox, want 0", n)
			}
		})
	}
}

// TestSandboxOwnUnixSockets: sockets the sandbox binds on its own tmpfs
// mounts still work, and /run, /var/run and /var/tmp are the sandbox's own.
func TestSandboxOwnUnixSockets(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	script := `
import os, socket
for d in ['/tmp', os.environ['HOME'], '/var/tmp', '/dev/shm']:
    p = os.path.join(d, 'own.sock')
    srv = socket.socket(socket.AF_UNIX); srv.bind(p); srv.listen(1)
    c = socket.socket(socket.AF_UNIX); c.connect(p); a, _ = srv.accept()
    c.sendall(b'ping'); print(d, a.recv(4).decode())
print('run', sorted(os.listdir('/run')), os.access('/run', os.W_OK))
print('var/tmp', sorted(os.listdir('/var/tmp')))
`
	res := mustRun(t, e, Spec{Argv: []string{"/usr/bin/python3", "-c", script}})
	want := "/tmp ping\n" + DefaultHome + " ping\n/var/tmp ping\n/dev/shm ping\nrun [] False\nvar/tmp ['own.sock']\n"
	if got := string(res.Stdout); got != want {
		t.Errorf("got %q, want %q (stderr %q)", got, want, res.Stderr)
	}
}

// TestResolvConfAndCAThroughRunSymlinks: on a root whose /etc/resolv.conf
// (and CA bundle) are symlinks into /run, as on hosts with systemd-resolved,
// the sandbox's own resolv.conf and CA bundle are mounted at the link targets
// inside its empty /run, and the root's own file under /run is not shown.
func TestResolvConfAndCAThroughRunSymlinks(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	root := minimalRoot(t, map[string]string{
		"etc/resolv.conf":  "../run/systemd/resolve/stub-resolv.conf",
		SystemCABundle[1:]: "/run/airlock-test-ca/bundle.pem"})
	if err := os.WriteFile(filepath.Join(root, "run/systemd/resolve/stub-resolv.conf"), []byte("nameserver 192.0.2.53\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "bundle.pem")
	if err := os.WriteFile(ca, []byte("MERGED-CA-BUNDLE\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := mustRun(t, e, Spec{Argv: sh("cat /etc/resolv.conf $SSL_CERT_FILE; ls -A /run/systemd/resolve"), RootFS: root, CABundle: ca})
	want := resolvConf + "MERGED-CA-BUNDLE\nstub-resolv.conf\n"
	if got := string(res.Stdout); got != want {
		t.Errorf("got %q, want %q (stderr %q)", got, want, res.Stderr)
	}
}

// minimalRoot makes a sandbox root from the host's /usr (bind-mounted) with
// the directories a sandbox needs, the usual /bin -> usr/bin links and the
// extra symlinks given (path in the root -> target).
func minimalRoot(t *testing.T, links map[string]string) string {
	t.Helper()
	root := hostDir(t, 0o755)
	for _, d := range []string{"usr", "etc/ssl/certs", "run/systemd/resolve", "tmp", "home", "proc", "sys", "dev", "var/tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("/usr", filepath.Join(root, "usr"), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(filepath.Join(root, "usr"), unix.MNT_DETACH) })
	all := map[string]string{"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin"}
	maps.Copy(all, links)
	for l, target := range all {
		if err := os.Symlink(target, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}
