package daemon

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/sandboxd"
	"github.com/airlock-dev/airlock/test/poll"
)

// apiRoot is a real daemon (real executor, real namespaces, a fake internet
// with pypi.org and evil.example) serving its API on a unix socket of mode
// 0660 root:group, with the Go client as its caller.
type apiRoot struct {
	d     *Daemon
	n     *testNet
	cfg   config.Config
	sock  string
	group string
	gid   int
	c     *client.Client
}

// newAPIRoot starts the daemon (edit changes its config) and its API server;
// both stop at the end of the test. The socket's group is a system group
// made for the test (alk-g<pid>).
func newAPIRoot(t *testing.T, edit ...func(*config.Config)) *apiRoot {
	t.Helper()
	d, n, cfg, _ := newTestDaemonPool(t, true, edit...)
	a := &apiRoot{d: d, n: n, cfg: cfg}
	a.group, a.gid = systemGroup(t, "alk-g"+strconv.Itoa(os.Getpid()))
	a.sock = filepath.Join(searchableTempDir(t), "api.sock")
	ln, err := ListenAPI(a.sock, a.group)
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	srv := d.APIServer(context.Background())
	go func() { _ = srv.Serve(ln) }()
	a.c = client.New(a.sock)
	t.Cleanup(func() {
		a.c.Close()
		_ = srv.Close()
		if err := d.Close(); err != nil {
			t.Errorf("close the daemon: %v", err)
		}
	})
	return a
}

// systemGroup creates a system group for the test, removed after it.
func systemGroup(t *testing.T, name string) (string, int) {
	t.Helper()
	_ = exec.Command("groupdel", name).Run() // a crashed run's
	if out, err := exec.Command("groupadd", "--system", name).CombinedOutput(); err != nil {
		t.Fatalf("groupadd: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("groupdel", name).Run() })
	gid, err := lookupGroup(name)
	if err != nil {
		t.Fatal(err)
	}
	return name, gid
}

func (a *apiRoot) create(t *testing.T, req api.CreateSandboxRequest) *api.Sandbox {
	t.Helper()
	sb, err := a.c.CreateSandbox(context.Background(), req)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _, _ = a.c.DeleteSandbox(context.Background(), sb.ID) })
	return sb
}

// run runs argv in sandbox id and returns its stdout, stderr and result.
func (a *apiRoot) run(t *testing.T, id string, argv ...string) (string, string, *api.ExecResult) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := a.c.Exec(ctx, id, api.ExecRequest{Argv: argv}, client.ExecIO{Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("exec %v: %v", argv, err)
	}
	return out.String(), errb.String(), res
}

// mustRun is run, failing the test unless the command exits 0.
func (a *apiRoot) mustRun(t *testing.T, id string, argv ...string) string {
	t.Helper()
	out, errs, res := a.run(t, id, argv...)
	if res.ExitStatus != 0 {
		t.Fatalf("exec %v: exit %d (%s), stdout %q, stderr %q", argv, res.ExitStatus, res.Error, out, errs)
	}
	return out
}

// metric reads one sample of the daemon's metrics ("name" or
// `name{label="v"}`), -1 when it is not there.
func (a *apiRoot) metric(t *testing.T, sample string) float64 {
	t.Helper()
	return scrape(t, a.d.MetricsHandler(), sample)
}

func scrape(t testing.TB, h http.Handler, sample string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if ok && name == sample {
			f, err := strconv.ParseFloat(val, 64)
			if err != nil {
				t.Fatalf("metric %s: %v", sample, err)
			}
			return f
		}
	}
	return -1
}

// hostProcs lists host pids whose command line is exactly argv.
func hostProcs(argv string) []int {
	want := strings.Join(strings.Fields(argv), "\x00") + "\x00"
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && string(b) == want {
			out = append(out, pid)
		}
	}
	return out
}

// hostCgroup is the cgroup directory of host pid: its pids controller's
// on cgroup v1, its unified one on v2. Never the root.
func hostCgroup(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	dir := ""
	for _, l := range lines {
		parts := strings.SplitN(l, ":", 3)
		switch {
		case len(parts) != 3:
		case len(lines) == 1 && parts[0] == "0":
			dir = filepath.Join("/sys/fs/cgroup", parts[2])
		case parts[1] == "pids":
			dir = filepath.Join("/sys/fs/cgroup/pids", parts[2])
		}
	}
	if dir == "" || dir == "/sys/fs/cgroup" || dir == "/sys/fs/cgroup/pids" {
		t.Fatalf("no sandbox cgroup for pid %d in %q", pid, b)
	}
	return dir
}

var errNoFrame = errors.New("no such frame")

// nextOf reads frames of s until one of typ.
func nextOf(s *client.ExecStream, typ string) (api.Frame, error) {
	for {
		f, err := s.Next()
		if err != nil {
			return f, err
		}
		if f.Type == typ {
			return f, nil
		}
		if f.Type == api.FrameExit || f.Type == api.FrameError {
			return f, errNoFrame
		}
	}
}

// tarOf builds a tar stream of entries: a name ending in "/" is a
// directory, "name -> target" a symlink, else a file with that content.
func tarStream(t *testing.T, entries ...[2]string) *bytes.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		name, body := e[0], e[1]
		var h *tar.Header
		switch {
		case strings.HasSuffix(name, "/"):
			h = &tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755}
		case strings.Contains(name, " -> "):
			n, target, _ := strings.Cut(name, " -> ")
			h = &tar.Header{Typeflag: tar.TypeSymlink, Name: n, Linkname: target, Mode: 0o777}
		default:
			h = &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body))}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(buf.Bytes())
}

// untar reads a tar stream into name -> content (directories "", symlinks
// "-> target").
func untar(t *testing.T, r io.Reader) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out[h.Name] = string(b)
		case tar.TypeSymlink:
			out[h.Name] = "-> " + h.Linkname
		default:
			out[h.Name] = ""
		}
	}
}

// TestRootSandboxAPI drives a real daemon through the Go client, as an agent
// platform would: create, streamed exec, stdin, concurrent execs, files and
// their escapes, inspect with egress counters, events, delete, a client
// that goes away mid-exec.
func TestRootSandboxAPI(t *testing.T) {
	a := newAPIRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	t.Run("streamed output arrives before the command ends, stdin", func(t *testing.T) {
		sb := a.create(t, api.CreateSandboxRequest{Labels: map[string]string{"t": "stream"}})
		if sb.State != api.StateRunning || sb.WorkDir != api.WorkspaceDir {
			t.Fatalf("created %+v", sb)
		}
		// The command cannot end before the test has seen its first frame:
		// it waits for a line on stdin, which the test sends only then.
		s, err := a.c.StartExec(ctx, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo first; read line; echo \"got $line\"; echo oops >&2"}, StdinStream: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		f, err := nextOf(s, api.FrameStdout)
		if err != nil || string(client.Data(f)) != "first\n" {
			t.Fatalf("first frame %+v (%q), %v; want stdout \"first\\n\"", f, client.Data(f), err)
		}
		if err := s.Stdin(ctx, strings.NewReader("go\n")); err != nil {
			t.Fatal(err)
		}
		var out, errs bytes.Buffer
		for f, err := range s.Frames() {
			if err != nil {
				t.Fatal(err)
			}
			switch f.Type {
			case api.FrameStdout:
				out.Write(client.Data(f))
			case api.FrameStderr:
				errs.Write(client.Data(f))
			}
		}
		if r := s.Result(); r == nil || r.ExitStatus != 0 || out.String() != "got go\n" || errs.String() != "oops\n" {
			t.Fatalf("result %+v, stdout %q, stderr %q", s.Result(), out.String(), errs.String())
		}
		// A larger stdin, streamed whole.
		in := bytes.Repeat([]byte("0123456789abcdef"), 64<<10)
		var wc bytes.Buffer
		res, err := a.c.Exec(ctx, sb.ID, api.ExecRequest{Argv: []string{"wc", "-c"}}, client.ExecIO{Stdin: bytes.NewReader(in), Stdout: &wc})
		if err != nil || res.ExitStatus != 0 || strings.TrimSpace(wc.String()) != strconv.Itoa(len(in)) {
			t.Fatalf("wc -c of %d bytes: %q, %+v, %v", len(in), wc.String(), res, err)
		}
	})

	t.Run("concurrent execs in one sandbox", func(t *testing.T) {
		sb := a.create(t, api.CreateSandboxRequest{})
		const n = 3
		var streams []*client.ExecStream
		for i := range n {
			s, err := a.c.StartExec(ctx, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo ready " + strconv.Itoa(i) + "; read x; echo done $x"}, StdinStream: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if f, err := nextOf(s, api.FrameStdout); err != nil || !strings.HasPrefix(string(client.Data(f)), "ready") {
				t.Fatalf("exec %d: %+v %v", i, f, err)
			}
			streams = append(streams, s)
		}
		// All n are running at once: each waits for its stdin.
		xs, err := a.c.Execs(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		running := 0
		for _, x := range xs {
			if x.Running {
				running++
			}
		}
		if running != n {
			t.Fatalf("%d execs running, want %d: %+v", running, n, xs)
		}
		for i, s := range streams {
			if err := s.Stdin(ctx, strings.NewReader(strconv.Itoa(i)+"\n")); err != nil {
				t.Fatal(err)
			}
			f, err := nextOf(s, api.FrameStdout)
			if err != nil || string(client.Data(f)) != "done "+strconv.Itoa(i)+"\n" {
				t.Fatalf("exec %d: %q %v", i, client.Data(f), err)
			}
			if f, err := nextOf(s, api.FrameExit); err != nil || f.Result.ExitStatus != 0 {
				t.Fatalf("exec %d end: %+v %v", i, f, err)
			}
		}
	})

	t.Run("files up and down", func(t *testing.T) {
		sb := a.create(t, api.CreateSandboxRequest{})
		res, err := a.c.PutFiles(ctx, sb.ID, "/workspace", tarStream(t, [2]string{"src/", ""}, [2]string{"src/main.py", "print('hi')\n"}, [2]string{"src/link -> main.py", ""}))
		if err != nil || res.Files != 3 || res.Bytes != 12 {
			t.Fatalf("put: %+v, %v", res, err)
		}
		if out := a.mustRun(t, sb.ID, "cat", "/workspace/src/link"); out != "print('hi')\n" {
			t.Fatalf("the uploaded file reads %q", out)
		}
		if _, err := a.c.PutFiles(ctx, sb.ID, sandboxd.DefaultHome, tarStream(t, [2]string{".rc", "x=1\n"})); err != nil {
			t.Fatal(err)
		}
		a.mustRun(t, sb.ID, "sh", "-c", "echo built > /workspace/src/out.txt")
		body, err := a.c.GetFiles(ctx, sb.ID, "/workspace/src")
		if err != nil {
			t.Fatal(err)
		}
		got := untar(t, body)
		body.Close()
		if got["src/main.py"] != "print('hi')\n" || got["src/out.txt"] != "built\n" || got["src/link"] != "-> main.py" {
			t.Fatalf("download: %v", got)
		}
		body, err = a.c.GetFiles(ctx, sb.ID, sandboxd.DefaultHome+"/.rc")
		if err != nil {
			t.Fatal(err)
		}
		got = untar(t, body)
		body.Close()
		if got[".rc"] != "x=1\n" {
			t.Fatalf("download of $HOME/.rc: %v", got)
		}
	})

	t.Run("file escapes refused", func(t *testing.T) { testRootFileEscapes(t, a) })
	t.Run("inspect, egress and events", func(t *testing.T) { testRootEgressEvents(t, a) })
	t.Run("delete leaves nothing", func(t *testing.T) { testRootDelete(t, a) })
	t.Run("nothing sends once delete answered", func(t *testing.T) { testRootDeleteSilences(t, a) })
	t.Run("client gone mid-exec", func(t *testing.T) { testRootDisconnect(t, a) })
}

// testRootFileEscapes: `..`, absolute paths and symlinks to the host (one
// planted in the host workspace, one made by the sandbox, one in the tar
// stream) never reach outside the workspace: every attempt is refused, the
// host directory the links point to is unchanged, nothing is written in
// /etc or the sandbox's /tmp, and no secret comes back.
func testRootFileEscapes(t *testing.T, a *apiRoot) {
	ctx := context.Background()
	ws, outside := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host-secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "out")); err != nil {
		t.Fatal(err)
	}
	sb := a.create(t, api.CreateSandboxRequest{Workspace: ws})
	if sb.WorkDir != ws {
		t.Fatalf("workdir %q, want the workspace %q", sb.WorkDir, ws)
	}
	a.mustRun(t, sb.ID, "ln", "-s", "/etc", ws+"/etc-link")
	a.mustRun(t, sb.ID, "ln", "-s", "/tmp", ws+"/tmp-link")
	pwned := "alk-pwned-" + strconv.Itoa(os.Getpid())
	up := []struct {
		name, dir string
		tar       [][2]string
	}{
		{"dotdot dir", ws + "/../" + filepath.Base(outside), [][2]string{{pwned, "x"}}},
		{"absolute dir outside", "/etc", [][2]string{{pwned, "x"}}},
		{"tmp dir", "/tmp", [][2]string{{pwned, "x"}}},
		{"host-planted symlink dir", ws + "/out", [][2]string{{pwned, "x"}}},
		{"sandbox-planted symlink to /etc", ws + "/etc-link", [][2]string{{pwned, "x"}}},
		{"sandbox-planted symlink to /tmp", ws + "/tmp-link", [][2]string{{pwned, "x"}}},
		{"entry through the host symlink", ws, [][2]string{{"out/" + pwned, "x"}}},
		{"entry through the sandbox symlink", ws, [][2]string{{"tmp-link/" + pwned, "x"}}},
		{"dotdot entry", ws, [][2]string{{"../" + pwned, "x"}}},
		{"absolute entry", ws, [][2]string{{"/tmp/" + pwned, "x"}}},
		{"tar symlink to the host dir", ws, [][2]string{{"l1 -> " + outside, ""}, {"l1/" + pwned, "x"}}},
		{"tar symlink to /etc", ws, [][2]string{{"l2 -> /etc", ""}, {"l2/" + pwned, "x"}}},
		{"tar symlink dotdot", ws, [][2]string{{"l3 -> ../../../../tmp", ""}, {"l3/" + pwned, "x"}}},
	}
	for _, tt := range up {
		t.Run("put "+tt.name, func(t *testing.T) {
			res, err := a.c.PutFiles(ctx, sb.ID, tt.dir, tarStream(t, tt.tar...))
			if code := client.Code(err); code != api.CodeInvalidPath {
				t.Fatalf("got %+v, %v (code %q), want %s", res, err, code, api.CodeInvalidPath)
			}
		})
	}
	down := []struct{ name, path string }{
		{"dotdot", ws + "/../" + filepath.Base(outside) + "/secret"},
		{"absolute outside", "/etc/hostname"},
		{"host-planted symlink", ws + "/out/secret"},
		{"the host-planted symlink itself", ws + "/out"},
		{"sandbox-planted symlink", ws + "/etc-link/hostname"},
	}
	for _, tt := range down {
		t.Run("get "+tt.name, func(t *testing.T) {
			body, err := a.c.GetFiles(ctx, sb.ID, tt.path)
			if err == nil {
				b, _ := io.ReadAll(body)
				body.Close()
				if bytes.Contains(b, []byte("host-secret")) {
					t.Fatalf("the host's secret came back through %s", tt.path)
				}
				if tt.name != "the host-planted symlink itself" {
					t.Fatalf("got %d bytes, want a refusal", len(b))
				}
				// The link itself is inside: it comes back as a link, never
				// followed.
				if got := untar(t, bytes.NewReader(b)); got["out"] != "-> "+outside || len(got) != 1 {
					t.Fatalf("the link came back as %v", got)
				}
				return
			}
			if code := client.Code(err); code != api.CodeInvalidPath && code != api.CodeNotFound {
				t.Fatalf("got %v (code %q), want %s", err, code, api.CodeInvalidPath)
			}
		})
	}
	ents, err := os.ReadDir(outside)
	if err != nil || len(ents) != 1 || ents[0].Name() != "secret" {
		t.Fatalf("the host directory behind the links now holds %v (%v), want only secret", ents, err)
	}
	for _, p := range []string{"/etc/" + pwned, "/tmp/" + pwned, filepath.Dir(ws) + "/" + pwned} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Fatalf("%s exists on the host (%v)", p, err)
		}
	}
	if out := a.mustRun(t, sb.ID, "ls", "-A", "/tmp"); strings.Contains(out, pwned) {
		t.Fatalf("the sandbox's /tmp holds %q", out)
	}
}

// testRootEgressEvents: inspect shows the sandbox's usage and its egress
// counters after a real allowed request and a real denied one through the
// gateway to the fake internet, and the events stream shows the denial as
// it is audited. A sandbox's own allow entry lets that sandbox alone reach
// the host.
func testRootEgressEvents(t *testing.T, a *apiRoot) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pypi, evil := a.n.pypi, a.n.evil
	p0, e0 := pypi.Requests(), evil.Conns()
	sb := a.create(t, api.CreateSandboxRequest{})
	ev, err := a.c.Events(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	if first, err := ev.Next(); err != nil || first.Type != "sandbox" || first.Sandbox == nil || first.Sandbox.ID != sb.ID {
		t.Fatalf("first event %+v, %v; want the sandbox", first, err)
	}
	// An evaluation over policy's 100 ms deadline (a loaded machine, -race)
	// is a fail-closed deny that never reaches pypi.org: up to three tries.
	out := a.mustRun(t, sb.ID, "sh", "-c",
		"for i in 1 2 3; do c=$(curl -sS --max-time 20 -o /dev/null -w '%{http_code}' https://pypi.org/simple/); [ \"$c\" = 200 ] && break; done; echo -n \"$c \"; curl -sS --max-time 20 -o /dev/null -w '%{http_code}' https://evil.example/; exit 0")
	if !strings.HasPrefix(out, "200 ") || strings.HasSuffix(out, "200") {
		t.Fatalf("curl codes %q, want pypi.org 200 and evil.example refused", out)
	}
	if got := pypi.Requests() - p0; got != 1 {
		t.Fatalf("pypi.org saw %d requests, want 1", got)
	}
	if got := evil.Conns() - e0; got != 0 {
		t.Fatalf("evil.example saw %d connections, want 0", got)
	}
	for {
		e, err := ev.Next()
		if err != nil {
			t.Fatalf("events ended before the denial: %v", err)
		}
		if e.Type == "decision" && e.Record["host"] == "evil.example" && e.Record["decision"] == "deny" {
			if e.Record["owner"] != "0" {
				t.Fatalf("the denial's record has owner %v, want 0 (root)", e.Record["owner"])
			}
			break
		}
	}
	got, err := a.c.GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Egress.Allowed < 1 || got.Egress.Denied < 1 || got.Egress.DeniedByKind["connect"] < 1 {
		t.Fatalf("egress %+v, want the allowed request and the denied connect counted", got.Egress)
	}
	if got.Usage.CPUMS <= 0 || got.Usage.MemoryPeakBytes <= 0 || got.ExecsTotal != 1 {
		t.Fatalf("usage %+v, execs %d", got.Usage, got.ExecsTotal)
	}
	// Another sandbox allowed evil.example gets there; this one still not.
	other := a.create(t, api.CreateSandboxRequest{Allow: []string{"evil.example"}})
	if out := a.mustRun(t, other.ID, "sh", "-c", "for i in 1 2 3; do curl -fsS --max-time 20 https://evil.example/x && break; done; exit 0"); !strings.Contains(out, "hello from evil.example") {
		t.Fatalf("the sandbox allowed evil.example got %q", out)
	}
	if got := evil.Requests(); got != 1 {
		t.Fatalf("evil.example saw %d requests, want 1 (the allowed sandbox's)", got)
	}
	out, _, _ = a.run(t, sb.ID, "curl", "-sS", "--max-time", "20", "-o", "/dev/null", "-w", "%{http_code}", "https://evil.example/")
	if out == "200" || evil.Requests() != 1 {
		t.Fatalf("the sandbox without the allow entry reached evil.example (%q, %d requests)", out, evil.Requests())
	}
}

// testRootDelete: delete kills a running exec, returns the final usage, and
// leaves no process, namespace or cgroup.
func testRootDelete(t *testing.T, a *apiRoot) {
	ctx := context.Background()
	sb := a.create(t, api.CreateSandboxRequest{})
	marker := "sleep 98765" + strconv.Itoa(os.Getpid()%10)
	s, err := a.c.StartExec(ctx, sb.ID, api.ExecRequest{Argv: strings.Fields(marker)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var pids []int
	poll.Until(t, 10*time.Second, "the exec to run", func() bool { pids = hostProcs(marker); return len(pids) == 1 })
	cg := hostCgroup(t, pids[0])
	ns, ok := a.d.netns.Get(sb.ID)
	if !ok {
		t.Fatalf("no namespace for %s", sb.ID)
	}
	for _, p := range []string{cg, ns.Path} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("before delete: %v", err)
		}
	}
	end, err := a.c.DeleteSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if end.State != api.StateStopped || end.EndReason != ReasonDeleted || end.Usage.MemoryPeakBytes <= 0 {
		t.Fatalf("delete returned %+v", end)
	}
	// Delete answers once nothing of the sandbox runs; the processes'
	// exit, cgroup and namespace go in the background teardown.
	a.d.reg.waitTeardowns()
	if got := hostProcs(marker); len(got) != 0 {
		t.Fatalf("processes %v left after delete", got)
	}
	for _, p := range []string{cg, ns.Path} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s left after delete (%v)", p, err)
		}
	}
	if _, ok := a.d.netns.Get(sb.ID); ok {
		t.Fatalf("the manager still holds %s", sb.ID)
	}
	if _, err := a.c.GetSandbox(ctx, sb.ID); client.Code(err) != api.CodeNotFound {
		t.Fatalf("inspect after delete: %v, want not_found", err)
	}
	// The stream ends (error frame or closed), never hangs.
	for _, err := range s.Frames() {
		if err != nil {
			break
		}
	}
}

// testRootDisconnect: a client that goes away mid-exec leaves no process,
// and the sandbox goes on working.
func testRootDisconnect(t *testing.T, a *apiRoot) {
	ctx := context.Background()
	sb := a.create(t, api.CreateSandboxRequest{})
	marker := "sleep 98764" + strconv.Itoa(os.Getpid()%10)
	s, err := a.c.StartExec(ctx, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo up; " + marker}})
	if err != nil {
		t.Fatal(err)
	}
	if f, err := nextOf(s, api.FrameStdout); err != nil || string(client.Data(f)) != "up\n" {
		t.Fatalf("first output %+v %v", f, err)
	}
	poll.Until(t, 10*time.Second, "the exec's sleep", func() bool { return len(hostProcs(marker)) == 1 })
	s.Close()
	poll.Until(t, 20*time.Second, "the abandoned exec's processes to end", func() bool { return len(hostProcs(marker)) == 0 })
	if out := a.mustRun(t, sb.ID, "echo", "still here"); out != "still here\n" {
		t.Fatalf("after the disconnect: %q", out)
	}
	xs, err := a.c.Execs(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range xs {
		if x.Running {
			t.Fatalf("exec %+v still running", x)
		}
	}
}
