package sandboxd

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/poll"
)

// tarOf builds a tar stream of hs; a regular file's content is body[name].
func tarOf(t *testing.T, hs []*tar.Header, body map[string]string) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hs {
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body[h.Name]))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		h.Format = tar.FormatPAX // nanosecond mtimes
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.WriteString(tw, body[h.Name]); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}

func file(name string) *tar.Header { return &tar.Header{Typeflag: tar.TypeReg, Name: name} }

// tarEntry is one entry read back from a tar stream.
type tarEntry struct {
	typ          byte
	mode         int64
	mtime        time.Time
	body, linkTo string
}

func readTar(t *testing.T, r io.Reader) map[string]tarEntry {
	t.Helper()
	out := map[string]tarEntry{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("read tar: %v", err)
		}
		b, _ := io.ReadAll(tr)
		out[h.Name] = tarEntry{typ: h.Typeflag, mode: h.Mode, mtime: h.ModTime, body: string(b), linkTo: h.Linkname}
	}
}

func sha(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

// TestFilesRoundTrip: a tree with directories, files, a symlink, modes
// (setuid and setgid cleared) and nanosecond mtimes goes in and comes back
// the same, owned by the sandbox uid inside.
func TestFilesRoundTrip(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{})
	old := time.Date(2001, 2, 3, 4, 5, 6, 789000000, time.UTC)
	hs := []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "src/", Mode: 0o750, ModTime: old},
		{Typeflag: tar.TypeReg, Name: "src/main.go", Mode: 0o640, ModTime: old.Add(time.Second)},
		{Typeflag: tar.TypeReg, Name: "src/run.sh", Mode: 0o4755, ModTime: old.Add(2 * time.Second)},
		{Typeflag: tar.TypeDir, Name: "src/deep/er/", Mode: 0o2700, ModTime: old.Add(3 * time.Second)},
		{Typeflag: tar.TypeReg, Name: "src/deep/er/empty", Mode: 0o600, ModTime: old.Add(4 * time.Second)},
		{Typeflag: tar.TypeSymlink, Name: "src/link", Linkname: "../../etc/passwd", ModTime: old.Add(5 * time.Second)},
		{Typeflag: tar.TypeReg, Name: "implicit/parent/f", Mode: 0o644, ModTime: old},
	}
	body := map[string]string{"src/main.go": "package main\n", "src/run.sh": "#!/bin/sh\necho hi\n"}
	res, err := s.PutFiles(t.Context(), "/workspace/in", tarOf(t, hs, body))
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != 7 || res.Bytes != int64(len(body["src/main.go"])+len(body["src/run.sh"])) {
		t.Errorf("result: got %+v", res)
	}
	var out bytes.Buffer
	if err := s.GetFiles(t.Context(), "/workspace/in/src", &out); err != nil {
		t.Fatal(err)
	}
	got := readTar(t, &out)
	want := map[string]tarEntry{
		"src/":              {typ: tar.TypeDir, mode: 0o750, mtime: old},
		"src/main.go":       {typ: tar.TypeReg, mode: 0o640, mtime: old.Add(time.Second), body: body["src/main.go"]},
		"src/run.sh":        {typ: tar.TypeReg, mode: 0o755, mtime: old.Add(2 * time.Second), body: body["src/run.sh"]},
		"src/deep/":         {typ: tar.TypeDir, mode: 0o755},
		"src/deep/er/":      {typ: tar.TypeDir, mode: 0o700, mtime: old.Add(3 * time.Second)},
		"src/deep/er/empty": {typ: tar.TypeReg, mode: 0o600, mtime: old.Add(4 * time.Second)},
		"src/link":          {typ: tar.TypeSymlink, mode: 0o777, mtime: old.Add(5 * time.Second), linkTo: "../../etc/passwd"},
	}
	var names []string
	for n := range got {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(got) != len(want) {
		t.Errorf("entries: got %q, want %d", names, len(want))
	}
	for n, w := range want {
		g, ok := got[n]
		if n == "src/deep/" { // made implicitly: its time is now
			w.mtime = g.mtime
		}
		if !ok || g.typ != w.typ || g.mode != w.mode || !g.mtime.Equal(w.mtime) || g.body != w.body || g.linkTo != w.linkTo {
			t.Errorf("%s: got %+v, want %+v", n, g, w)
		}
	}
	// Inside, everything belongs to the sandbox uid.
	owners := mustExec(t, s, ExecSpec{Argv: sh("find /workspace/in -printf '%U\\n' | sort -u")}).Stdout
	if string(owners) != strconv.Itoa(s.UID())+"\n" {
		t.Errorf("owners: got %q, want only %d", owners, s.UID())
	}
	// A single file comes back as one entry named after it.
	out.Reset()
	if err := s.GetFiles(t.Context(), "/workspace/in/src/main.go", &out); err != nil {
		t.Fatal(err)
	}
	if g := readTar(t, &out); len(g) != 1 || g["main.go"].body != body["src/main.go"] {
		t.Errorf("one file: got %+v", g)
	}
	// $HOME works too, and a put replaces what is there.
	if _, err := s.PutFiles(t.Context(), DefaultHome, tarOf(t, []*tar.Header{file("f")}, map[string]string{"f": "one"})); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutFiles(t.Context(), DefaultHome, tarOf(t, []*tar.Header{file("f")}, map[string]string{"f": "two"})); err != nil {
		t.Fatal(err)
	}
	if got := mustExec(t, s, ExecSpec{Argv: []string{"cat", DefaultHome + "/f"}}).Stdout; string(got) != "two" {
		t.Errorf("home file: got %q, want two", got)
	}
}

// TestFilesEscapesRefused: every way out of the root is refused with an
// error naming the problem, and nothing outside the root is written or read.
// The canaries: /tmp in the sandbox (writable by the sandbox uid, so only the
// files stage's own checks stop a write there) and a host file readable
// through the sandbox's view of the host.
func TestFilesEscapesRefused(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{})
	hostSecret := filepath.Join(hostDir(t, 0o755), "canary")
	if err := os.WriteFile(hostSecret, []byte("HOST-CANARY-CONTENT"), 0o644); err != nil {
		t.Fatal(err)
	}
	shadow := sha(t, "/etc/shadow")
	// The sandbox's own code plants links to the outside in its workspace.
	mustExec(t, s, ExecSpec{Argv: sh("ln -s /tmp /workspace/to-tmp; ln -s /etc /workspace/etc; ln -s " + filepath.Dir(hostSecret) + " /workspace/host; mkdir /workspace/d")})
	puts := []struct {
		name string
		dir  string
		tar  *bytes.Buffer
		want string
	}{
		{"dotdot in the request path", "/workspace/../tmp", tarOf(t, []*tar.Header{file("x")}, nil), "`..` component"},
		{"absolute request path outside", "/tmp", tarOf(t, []*tar.Header{file("x")}, nil), "outside /workspace or /home/sandbox"},
		{"relative request path", "tmp", tarOf(t, []*tar.Header{file("x")}, nil), "want an absolute path"},
		{"symlink in the request path", "/workspace/to-tmp", tarOf(t, []*tar.Header{file("x")}, nil), "symlink in the path"},
		{"symlink deeper in the request path", "/workspace/to-tmp/sub", tarOf(t, []*tar.Header{file("x")}, nil), "symlink in the path"},
		{"dotdot entry", "/workspace/d", tarOf(t, []*tar.Header{file("../../tmp/x")}, nil), "entry ../../tmp/x: path refused: a `..` component"},
		{"absolute entry", "/workspace/d", tarOf(t, []*tar.Header{file("/tmp/x")}, nil), "entry /tmp/x: path refused: an absolute name"},
		{"absolute /etc entry", "/workspace/d", tarOf(t, []*tar.Header{file("/etc/x")}, nil), "entry /etc/x: path refused: an absolute name"},
		{"symlink entry then a file through it", "/workspace/d",
			tarOf(t, []*tar.Header{{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "/tmp"}, file("l/x")}, nil), "entry l/x: path refused"},
		{"file through a planted symlink", "/workspace", tarOf(t, []*tar.Header{file("to-tmp/x")}, nil), "entry to-tmp/x: path refused"},
		{"directory through a planted symlink", "/workspace",
			tarOf(t, []*tar.Header{{Typeflag: tar.TypeDir, Name: "to-tmp/newdir/"}}, nil), "entry to-tmp/newdir/: path refused"},
		{"hard link to /etc/shadow", "/workspace/d", tarOf(t, []*tar.Header{{Typeflag: tar.TypeLink, Name: "h", Linkname: "/etc/shadow"}}, nil), `entry h: path refused: type '1'`},
		{"device", "/workspace/d", tarOf(t, []*tar.Header{{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3}}, nil), "type '3'"},
		{"fifo", "/workspace/d", tarOf(t, []*tar.Header{{Typeflag: tar.TypeFifo, Name: "p"}}, nil), "type '6'"},
	}
	for _, tc := range puts {
		t.Run("put "+tc.name, func(t *testing.T) {
			_, err := s.PutFiles(t.Context(), tc.dir, tc.tar)
			if !errors.Is(err, ErrInvalidPath) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrInvalidPath containing %q", err, tc.want)
			}
		})
	}
	gets := []struct{ name, path, want string }{
		{"dotdot", "/workspace/../" + strings.TrimPrefix(hostSecret, "/"), "`..` component"},
		{"outside", hostSecret, "outside"},
		{"symlink to /etc in the path", "/workspace/etc/passwd", "symlink in the path"},
		{"symlink to the host in the path", "/workspace/host/canary", "symlink in the path"},
	}
	for _, tc := range gets {
		t.Run("get "+tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := s.GetFiles(t.Context(), tc.path, &out)
			if !errors.Is(err, ErrInvalidPath) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrInvalidPath containing %q", err, tc.want)
			}
			if strings.Contains(out.String(), "HOST-CANARY") || strings.Contains(out.String(), "root:") {
				t.Errorf("outside content read: %q", out.String())
			}
		})
	}
	// A symlink asked for by name comes back as a link, never followed.
	var out bytes.Buffer
	if err := s.GetFiles(t.Context(), "/workspace/host", &out); err != nil {
		t.Fatal(err)
	}
	if g := readTar(t, &out); len(g) != 1 || g["host"].typ != tar.TypeSymlink || strings.Contains(out.String(), "HOST-CANARY") {
		t.Errorf("get of a symlink: got %+v", g)
	}
	// A directory holding links: the links come back as links.
	out.Reset()
	if err := s.GetFiles(t.Context(), "/workspace", &out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "HOST-CANARY") || strings.Contains(out.String(), "root:x:0") {
		t.Errorf("get of the workspace followed a link")
	}
	// /workspace/d holds the link entry l (links are entries), nothing else.
	if left := mustExec(t, s, ExecSpec{Argv: sh("ls -A /tmp /workspace/d")}).Stdout; string(left) != "/tmp:\n\n/workspace/d:\nl\n" {
		t.Errorf("written outside the root or through a link: %q", left)
	}
	if sha(t, "/etc/shadow") != shadow {
		t.Errorf("/etc/shadow changed")
	}
}

// TestFilesSymlinkSwapRace: the sandbox's own code swaps a directory of its
// workspace with a symlink to /tmp as fast as it can while files are put
// into it and got from it: nothing ever lands in /tmp, nothing of a host file
// is ever read.
func TestFilesSymlinkSwapRace(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{})
	hostSecret := filepath.Join(hostDir(t, 0o755), "canary")
	if err := os.WriteFile(hostSecret, []byte("HOST-CANARY-CONTENT"), 0o644); err != nil {
		t.Fatal(err)
	}
	// renameat2(RENAME_EXCHANGE) swaps each pair atomically: d is always
	// there, a directory or a link to /tmp; f a file or a link to the host file.
	swapper := `import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
def xchg(a, b):
    if libc.syscall(316, -100, a, -100, b, 2) != 0:
        raise OSError(ctypes.get_errno(), 'renameat2')
os.chdir('/workspace')
os.mkdir('d'); os.symlink('/tmp', 'evil')
open('f', 'w').write('sandbox content'); os.symlink('` + hostSecret + `', 'evilfile')
end, n = time.time() + 20, 0
while time.time() < end and not os.path.exists('/workspace/stop'):
    xchg(b'd', b'evil'); xchg(b'f', b'evilfile')
    n += 1
print(n)
`
	p, err := s.Exec(t.Context(), ExecSpec{Argv: []string{"python3", "-c", swapper}})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the swapper to start", func() bool {
		return mustExec(t, s, ExecSpec{Argv: sh("test -e /workspace/evilfile && echo ok")}).Stdout != nil
	})
	var landed, refusedN, got, gotRefused int
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; i < 40; i++ {
			_, err := s.PutFiles(t.Context(), "/workspace", tarOf(t, []*tar.Header{file("d/x" + strconv.Itoa(i)), file("d/sub/y" + strconv.Itoa(i))}, nil))
			if err == nil {
				landed++
			} else if errors.Is(err, ErrInvalidPath) || errors.Is(err, ErrNotFound) {
				refusedN++
			} else {
				t.Errorf("put: %v", err)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 40; i++ {
			var out bytes.Buffer
			err := s.GetFiles(t.Context(), "/workspace/f", &out)
			if strings.Contains(out.String(), "HOST-CANARY") {
				t.Errorf("get read the host file through a swapped link")
			}
			if err == nil {
				got++
			} else {
				gotRefused++
			}
		}
	}()
	wg.Wait()
	mustExec(t, s, ExecSpec{Argv: []string{"touch", "/workspace/stop"}})
	res, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if left := mustExec(t, s, ExecSpec{Argv: sh("ls -A /tmp")}).Stdout; len(left) != 0 {
		t.Errorf("files landed in /tmp through the swapped link: %q", left)
	}
	if n, _ := strconv.Atoi(strings.TrimSpace(string(res.Stdout))); n < 100 || landed == 0 || refusedN == 0 {
		t.Errorf("swaps %q (stderr %q), puts landed %d refused %d: the race was not run", res.Stdout, res.Stderr, landed, refusedN)
	}
	t.Logf("swaps %s puts landed %d refused %d, gets %d refused %d", strings.TrimSpace(string(res.Stdout)), landed, refusedN, got, gotRefused)
}

// TestFilesBounded: content past Config.MaxUpload, or past what the tmpfs
// holds, is refused as too large, naming the entry.
func TestFilesBounded(t *testing.T) {
	e, _ := newTestExecutor(t, func(c *Config) { c.MaxUpload = 1 << 20 })
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{Limits: Limits{TmpSize: 512 << 10}})
	big := strings.Repeat("x", 2<<20)
	_, err := s.PutFiles(t.Context(), "/workspace", tarOf(t, []*tar.Header{file("small"), file("big")}, map[string]string{"small": "s", "big": big}))
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "entry big") {
		t.Errorf("over max_upload: got %v, want ErrTooLarge naming big", err)
	}
	if out := mustExec(t, s, ExecSpec{Argv: sh("ls /workspace")}).Stdout; string(out) != "small\n" {
		t.Errorf("after refusal: got %q, want only small", out)
	}
	_, err = s.PutFiles(t.Context(), DefaultHome, tarOf(t, []*tar.Header{file("fill")}, map[string]string{"fill": strings.Repeat("y", 900<<10)}))
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "entry fill") {
		t.Errorf("past the tmpfs: got %v, want ErrTooLarge naming fill", err)
	}
	if _, err := s.PutFiles(t.Context(), "/workspace", strings.NewReader("this is not a tar stream, just bytes that go on for a while........................................................................................................................................................................................................................................................................................................................................................................................................................................................................................................................")); !errors.Is(err, ErrBadArchive) {
		t.Errorf("garbage: got %v, want ErrBadArchive", err)
	}
	var out bytes.Buffer
	if err := s.GetFiles(t.Context(), "/workspace/nope", &out); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing: got %v, want ErrNotFound", err)
	}
}

// TestFilesStageIsTheSandboxUID: the files stage runs as the sandbox uid, not
// root: a host file in the bound workspace that only root may read is not
// read, and what it writes on the host belongs to the workspace's owner.
func TestFilesStageIsTheSandboxUID(t *testing.T) {
	ws := hostDir(t, 0o755)
	rootOnly := filepath.Join(ws, "root-only")
	if err := os.WriteFile(rootOnly, []byte("ROOT-ONLY-CONTENT"), 0o600); err != nil {
		t.Fatal(err)
	}
	const owner = 4243
	if err := os.Chown(ws, owner, owner); err != nil {
		t.Fatal(err)
	}
	e, _ := newTestExecutor(t, nil)
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{Workspace: ws})
	var out bytes.Buffer
	err := s.GetFiles(t.Context(), rootOnly, &out)
	if err == nil || !strings.Contains(err.Error(), "permission denied") || strings.Contains(out.String(), "ROOT-ONLY") {
		t.Errorf("get of a root-only file: got %v and %d bytes, want permission denied and nothing", err, out.Len())
	}
	if _, err := s.PutFiles(t.Context(), ws+"/new", tarOf(t, []*tar.Header{file("f")}, map[string]string{"f": "x"})); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{ws + "/new", ws + "/new/f"} {
		if u, g, _ := ownerOf(t, p); u != owner || g != owner {
			t.Errorf("host owner of %s: got %d:%d, want %d:%d", p, u, g, owner, owner)
		}
	}
}

// TestFilesStageNotHijackable: code in the sandbox, running as the sandbox
// uid, cannot open the files stage's memory (it could otherwise make it call
// openat2, which the sandbox's filter refuses, to create a setuid file): its
// real uid differs, which makes it non-dumpable. A process of the sandbox's
// own started the same way is open to it, so the probe works.
func TestFilesStageNotHijackable(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{})
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := s.PutFiles(t.Context(), "/workspace", pr)
		done <- err
	}()
	probe := `import os, time, subprocess
mine = subprocess.Popen(['sleep', '30'])
def tryopen(pid):
    try:
        os.close(os.open('/proc/%d/mem' % pid, os.O_RDWR)); return 'OPENED'
    except OSError as e:
        return 'refused'
stage = None
for _ in range(200):
    for p in os.listdir('/proc'):
        if p.isdigit():
            try:
                if open('/proc/%s/cmdline' % p).read().startswith('airlock-files'):
                    stage = int(p)
            except OSError:
                continue
    if stage:
        break
    time.sleep(0.05)
print('stage', stage is not None, tryopen(stage) if stage else '-', 'own', tryopen(mine.pid))
mine.kill()
`
	res := mustExec(t, s, ExecSpec{Argv: []string{"python3", "-c", probe}})
	pw.Close()
	if err := <-done; !errors.Is(err, ErrBadArchive) && err != nil {
		t.Logf("put after the probe: %v", err)
	}
	if got := strings.TrimSpace(string(res.Stdout)); got != "stage True refused own OPENED" {
		t.Errorf("got %q (stderr %q), want the stage found and refused, the sandbox's own process opened", got, res.Stderr)
	}
}

// TestFilesStreamErrorsReported: a tar stream whose reader fails, or a
// writer that fails, is reported as such, not as a bad archive or success.
func TestFilesStreamErrorsReported(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	s := newSandbox(t, e, PrepareSpec{}, StartSpec{})
	full := tarOf(t, []*tar.Header{file("a")}, map[string]string{"a": strings.Repeat("z", 100<<10)}).Bytes()
	broken := io.MultiReader(bytes.NewReader(full[:4096]), errReader{errors.New("airlock test: client went away")})
	_, err := s.PutFiles(t.Context(), "/workspace", broken)
	if err == nil || !strings.Contains(err.Error(), "client went away") {
		t.Errorf("put from a failing reader: got %v, want the reader's error", err)
	}
	if _, err := s.PutFiles(t.Context(), "/workspace", bytes.NewReader(full)); err != nil {
		t.Fatal(err)
	}
	err = s.GetFiles(t.Context(), "/workspace/a", failingWriter{})
	if err == nil || !strings.Contains(err.Error(), "write the tar stream") {
		t.Errorf("get to a failing writer: got %v, want the write error", err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("airlock test: writer closed") }
