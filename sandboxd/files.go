package sandboxd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/oplog"
)

// Files in and out of a sandbox as tar streams. Each operation runs in the
// files stage, a child of init that dropped to the sandbox uid exactly as an
// exec does (files_stage_linux.go), inside the sandbox's own mount namespace.
// It resolves every path with openat2 beneath the workspace or $HOME root it
// is handed as an fd (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
// RESOLVE_NO_MAGICLINKS), so `..`, absolute names and symlinks, in the
// request or in tar entries or planted by the sandbox's own code, can never
// reach outside that root, and nothing it does is done as root.

// FilesResult is what PutFiles wrote.
type FilesResult struct {
	Files int64 // regular files, directories and symlinks written
	Bytes int64 // bytes of file content written
}

// Reasons a files operation is refused (a *FilesError wraps one).
var (
	// ErrInvalidPath: the path or a tar entry is outside the workspace and
	// $HOME, has a `..` component, goes through a symlink, or is of a type
	// that is never written (hard links, devices, fifos).
	ErrInvalidPath = errors.New("path refused")
	// ErrTooLarge: the content is over Config.MaxUpload, the filesystem is
	// full, or a file is over the sandbox's fsize limit.
	ErrTooLarge = errors.New("too large")
	// ErrNotFound: the path does not exist.
	ErrNotFound = errors.New("no such file or directory")
	// ErrBadArchive: the tar stream cannot be read.
	ErrBadArchive = errors.New("bad tar stream")
)

// FilesError is a files operation that was refused or failed.
type FilesError struct {
	Op    string // "put" or "get"
	Path  string // the request's path
	Entry string // the tar entry or file at fault, if any
	Err   error  // one of the Err* reasons above, or another error
}

func (e *FilesError) Error() string {
	s := "sandboxd: " + e.Op + " " + e.Path
	if e.Entry != "" {
		s += ": entry " + e.Entry
	}
	return s + ": " + e.Err.Error()
}

func (e *FilesError) Unwrap() error { return e.Err }

// filesFailure is what the files stage writes on its stderr when it fails.
type filesFailure struct {
	Kind  string `json:"kind"` // filesKind*
	Entry string `json:"entry,omitempty"`
	Error string `json:"error"`
}

const (
	filesKindInvalid  = "invalid_path"
	filesKindTooLarge = "too_large"
	filesKindNotFound = "not_found"
	filesKindArchive  = "bad_archive"
	filesKindFailed   = "failed"
)

// kindErr maps a failure kind to its reason.
var kindErr = map[string]error{filesKindInvalid: ErrInvalidPath, filesKindTooLarge: ErrTooLarge,
	filesKindNotFound: ErrNotFound, filesKindArchive: ErrBadArchive}

// PutFiles extracts the tar stream r into directory dir (created if missing)
// of the workspace or $HOME. Regular files, directories and symlinks (as
// links, never followed) are written, owned by the sandbox uid, with their
// modes (setuid, setgid cleared) and modification times; any other entry is
// refused, as is anything that would land outside the root. An entry that
// exists is replaced (a directory is kept). On an error, what was written
// before it stays. It returns once the files stage has ended; a Read of r
// that blocks is not waited for.
func (s *Sandbox) PutFiles(ctx context.Context, dir string, r io.Reader) (FilesResult, error) {
	job, err := s.filesJob(filesPut, dir)
	if err != nil {
		return FilesResult{}, err
	}
	job.MaxBytes = s.e.cfg.MaxUpload
	var out bytes.Buffer
	if err := s.runFiles(ctx, job, dir, r, &limitedWriter{w: &out, n: 4096}); err != nil {
		return FilesResult{}, err
	}
	var res FilesResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return FilesResult{}, &FilesError{Op: filesPut, Path: dir, Err: fmt.Errorf("the files stage's result %q: %w", out.Bytes(), err)}
	}
	return res, nil
}

// GetFiles writes a tar stream of path (a file, a symlink, or a directory
// and everything below it) in the workspace or $HOME to w; entries are named
// from path's last component. Symlinks are stored as links, never followed;
// fifos, sockets and devices are left out.
func (s *Sandbox) GetFiles(ctx context.Context, path string, w io.Writer) error {
	job, err := s.filesJob(filesGet, path)
	if err != nil {
		return err
	}
	return s.runFiles(ctx, job, path, nil, w)
}

// filesJob maps an absolute path inside the sandbox to a root (the workspace
// or $HOME) and a path below it.
func (s *Sandbox) filesJob(op, p string) (filesJob, error) {
	refuse := func(why string) (filesJob, error) {
		return filesJob{}, &FilesError{Op: op, Path: p, Err: fmt.Errorf("%w: %s", ErrInvalidPath, why)}
	}
	if !filepath.IsAbs(p) {
		return refuse("want an absolute path")
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return refuse("a `..` component")
		}
	}
	if strings.IndexByte(p, 0) >= 0 {
		return refuse("a NUL byte")
	}
	clean := filepath.Clean(p)
	ws, home := s.workspaceRoot(), s.e.cfg.Home
	job := filesJob{Op: op}
	var rel string
	switch {
	case ws != "" && within(clean, ws):
		job.Root, rel = filesRootWorkspace, strings.TrimPrefix(strings.TrimPrefix(clean, ws), "/")
	case within(clean, home):
		job.Root, rel = filesRootHome, strings.TrimPrefix(strings.TrimPrefix(clean, home), "/")
	default:
		where := home
		if ws != "" {
			where = ws + " or " + home
		}
		return refuse("outside " + where)
	}
	job.Path = rel
	if op == filesGet {
		job.Name = filepath.Base(clean)
	}
	if err := job.check(); err != nil {
		return refuse(err.Error())
	}
	return job, nil
}

// workspaceRoot is where the workspace is: the bound one, the empty one, or
// none ("").
func (s *Sandbox) workspaceRoot() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.workDir != s.e.cfg.Home {
		return s.workDir
	}
	return s.workspace
}

// runFiles runs one files job: in feeds its stdin (put), its stdout goes to
// out, its stderr says why it failed.
func (s *Sandbox) runFiles(ctx context.Context, job filesJob, path string, in io.Reader, out io.Writer) error {
	if err := s.pidsRoom(); err != nil {
		return err
	}
	if _, _, _, _, err := s.settings(); err != nil { // counts the job in s.procs
		return err
	}
	defer s.procs.Done()
	j := s.newJob("f")
	pipes, err := openExecPipes(in != nil)
	if err != nil {
		return err
	}
	r, err := s.sendJob(&message{Type: msgFiles, Files: &filesRequest{ID: j.id, filesJob: job}}, j, pipes.child()...)
	pipes.closeChild()
	var m *message
	if err == nil {
		m, err = s.await(context.Background(), r)
	}
	if err == nil && m.Type != msgStarted {
		err = fmt.Errorf("sandboxd: files stage: %s", m.Error)
	}
	if err != nil {
		pipes.closeOwn()
		return err
	}
	outC := newCapture(out, 0)
	errC := newCapture(nil, 64<<10)
	p := &Process{s: s, j: j, pipes: pipes, outC: outC, errC: errC}
	var src *readErr
	if in != nil {
		src = &readErr{r: in}
		in = src
	}
	p.startIO(in)
	ev, err := s.waitFiles(ctx, j)
	// The files stage leaves nothing behind that could hold its pipes: its
	// output ends at EOF.
	p.collect(0)
	switch {
	case err != nil:
		return err
	case src.failed() != nil:
		// The stage saw the stream end early; the reason is the reader's.
		return &FilesError{Op: job.Op, Path: path, Err: fmt.Errorf("read the tar stream: %w", src.failed())}
	case outC.liveErr != nil:
		return &FilesError{Op: job.Op, Path: path, Err: fmt.Errorf("write the tar stream: %w", outC.liveErr)}
	}
	return filesOutcome(job.Op, path, ev, errC.buf)
}

// readErr remembers the first error of its reader other than EOF.
type readErr struct {
	r   io.Reader
	mu  sync.Mutex
	err error
}

func (r *readErr) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	if err != nil && err != io.EOF {
		r.mu.Lock()
		if r.err == nil {
			r.err = err
		}
		r.mu.Unlock()
	}
	return n, err
}

func (r *readErr) failed() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// waitFiles waits for a files job's exit; when ctx ends first the job is
// killed (it is a process group of its own) and ctx's error returned.
func (s *Sandbox) waitFiles(ctx context.Context, j *job) (*exitEvent, error) {
	select {
	case ev := <-j.exit:
		return ev, nil
	case <-s.dead:
		return nil, s.deadError()
	case <-ctx.Done():
	}
	if err := s.signalJob(j.id, int(unix.SIGKILL)); err != nil {
		s.lg.Error("kill files job", jobKey, j.id, oplog.ErrorKey, err)
	}
	select {
	case ev := <-j.exit:
		return ev, ctx.Err()
	case <-s.dead:
		return nil, ctx.Err()
	case <-time.After(emptyWait):
		return nil, ctx.Err()
	}
}

// filesOutcome maps how the files stage ended to an error.
func filesOutcome(op, path string, ev *exitEvent, stderr []byte) error {
	if ev.Signal == 0 && ev.Code == 0 {
		return nil
	}
	var f filesFailure
	dec := json.NewDecoder(bytes.NewReader(stderr))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil || f.Error == "" {
		status := fmt.Sprintf("exit %d", ev.Code)
		if ev.Signal != 0 {
			status = unix.SignalName(unix.Signal(ev.Signal))
		}
		return &FilesError{Op: op, Path: path, Err: fmt.Errorf("the files stage failed (%s): %q", status, bytes.TrimSpace(stderr))}
	}
	err := errors.New(f.Error)
	if reason, ok := kindErr[f.Kind]; ok {
		err = fmt.Errorf("%w: %s", reason, f.Error)
	}
	return &FilesError{Op: op, Path: path, Entry: f.Entry, Err: err}
}

// limitedWriter keeps at most n bytes and drops the rest.
type limitedWriter struct {
	w io.Writer
	n int64
}

func (l *limitedWriter) Write(b []byte) (int, error) {
	if l.n <= 0 {
		return len(b), nil
	}
	k := int64(len(b))
	if k > l.n {
		k = l.n
	}
	l.n -= k
	if _, err := l.w.Write(b[:k]); err != nil {
		return 0, err
	}
	return len(b), nil
}
