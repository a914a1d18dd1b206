package daemon

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/sandboxd"
)

// frameWriteTimeout is how long one frame may wait for a client that does
// not read; past it the client is taken as gone and its exec is killed.
const frameWriteTimeout = time.Minute

// maxPending is how much output an exec may produce before its started frame
// is out (a few microseconds; the bound only keeps memory bounded).
const maxPending = 1 << 20

// errExecEnded closes a streamed stdin whose exec is over.
var errExecEnded = errors.New("the exec has ended")

// execEntry is one exec of a sandbox, running or finished.
type execEntry struct {
	id       string
	argv     []string
	started  time.Time
	streamed bool
	stdinR   *io.PipeReader
	stdinW   *io.PipeWriter

	mu         sync.Mutex
	proc       process
	pid        int
	running    bool
	result     *api.ExecResult
	stdinTaken bool
}

func newExecEntry(argv []string, streamed bool) *execEntry {
	x := &execEntry{argv: argv, started: time.Now(), streamed: streamed}
	if streamed {
		x.stdinR, x.stdinW = io.Pipe()
	}
	return x
}

func (x *execEntry) view() api.Exec {
	x.mu.Lock()
	defer x.mu.Unlock()
	return api.Exec{ExecID: x.id, Argv: x.argv, PID: x.pid, StartedAt: x.started, Running: x.running, Result: x.result}
}

func (x *execEntry) finish(r *api.ExecResult) {
	x.mu.Lock()
	x.running, x.result = false, r
	x.mu.Unlock()
	if x.stdinR != nil {
		x.stdinR.CloseWithError(errExecEnded)
	}
}

// apiExec is POST /v1/sandboxes/{id}/exec: the command's output as NDJSON
// frames while it runs, started first and exit last.
func (d *Daemon) apiExec(w http.ResponseWriter, r *http.Request) {
	sb, e := d.visible(r)
	if e != nil {
		writeError(w, e)
		return
	}
	var req api.ExecRequest
	if e := decodeBody(r, &req, false); e != nil {
		writeError(w, e)
		return
	}
	p, e := validateExec(&req)
	if e != nil {
		writeError(w, e)
		return
	}
	sb.touch()
	if e := sb.beginExec(); e != nil {
		writeError(w, e)
		return
	}
	defer sb.endExec()
	// The exec lives as long as its request: a client that goes away (or
	// stops reading for frameWriteTimeout) kills its process group.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	x := newExecEntry(p.argv, p.stream)
	fw := newFrameWriter(w, cancel)
	defer fw.abandon()
	proc, res, err := d.startExec(ctx, sb, x, p, fw)
	if err != nil {
		writeError(w, execStartError(sb.id, err))
		return
	}
	if proc == nil { // could not be started: the stream has its exit frame
		fw.start(api.Frame{Type: api.FrameStarted, ExecID: x.id})
		fw.last(api.Frame{Type: api.FrameExit, Result: res})
		return
	}
	fw.start(api.Frame{Type: api.FrameStarted, ExecID: x.id, PID: x.pid})
	d.awaitExec(ctx, sb, x, proc, fw)
}

// startExec starts p in sb. It returns the running process; or a nil process
// and the result of a command that could not be started (not found, not
// executable); or the error that kept it from being tried.
func (d *Daemon) startExec(ctx context.Context, sb *sandbox, x *execEntry, p *execParams, fw *frameWriter) (process, *api.ExecResult, error) {
	spec := execSpec{Argv: p.argv, Env: p.env, Dir: p.cwd, Timeout: p.timeout, OutputCap: 1,
		Stdout: fw.stream(api.FrameStdout), Stderr: fw.stream(api.FrameStderr)}
	switch {
	case p.stream:
		spec.Stdin = x.stdinR
	case p.stdin != nil:
		spec.Stdin = bytes.NewReader(p.stdin)
	}
	t0 := time.Now()
	proc, err := sb.box.Exec(ctx, spec)
	var ee *execError
	if errors.As(err, &ee) {
		sb.mu.Lock()
		x.id = "failed-" + strconv.FormatInt(sb.execsTotal, 10)
		sb.mu.Unlock()
		res := &api.ExecResult{ExecID: x.id, ExitStatus: ee.Code, ExitCode: ee.Code, Error: ee.Msg,
			WallMS: float64(time.Since(t0)) / 1e6}
		sb.addExec(x)
		sb.execDone(x, res)
		return nil, res, nil
	}
	if err != nil {
		if x.stdinR != nil {
			x.stdinR.CloseWithError(errExecEnded)
		}
		return nil, nil, err
	}
	d.metrics.execStart.Observe(time.Since(t0).Seconds())
	x.mu.Lock()
	x.id, x.proc, x.pid, x.running = proc.ID(), proc, proc.PID(), true
	x.mu.Unlock()
	sb.addExec(x)
	return proc, nil, nil
}

// awaitExec waits for a started exec, ends it (execDone) and writes its last
// frame: exit, or error when the sandbox ended under it; nothing when its
// client is gone.
func (d *Daemon) awaitExec(ctx context.Context, sb *sandbox, x *execEntry, proc process, fw *frameWriter) {
	res, err := proc.Wait()
	var ar *api.ExecResult
	if res != nil {
		ar = apiResult(res)
	} else {
		ar = &api.ExecResult{ExecID: x.id, ExitStatus: 128 + int(unix.SIGKILL), Signal: int(unix.SIGKILL), SignalName: "SIGKILL"}
	}
	sb.execDone(x, ar)
	d.metrics.execDone(ar)
	switch {
	case err == nil:
		fw.last(api.Frame{Type: api.FrameExit, Result: ar})
	case errors.Is(err, sandboxd.ErrSandboxGone):
		fw.last(api.Frame{Type: api.FrameError, Error: apiErr(api.CodeConflict, "", "sandbox %s ended while the exec ran", sb.id)})
	case ctx.Err() != nil:
		// The client is gone (or stopped reading): nobody to tell.
	default:
		fw.last(api.Frame{Type: api.FrameError, Error: apiErr(api.CodeInternal, "", "exec %s: %v", x.id, err)})
	}
}

// execStartError maps why an exec could not be tried.
func execStartError(id string, err error) *api.Error {
	switch {
	case errors.Is(err, sandboxd.ErrSandboxGone):
		return apiErr(api.CodeConflict, "", "sandbox %s has ended", id)
	case errors.Is(err, sandboxd.ErrPidsLimit):
		return apiErr(api.CodeLimit, "", "%v", err)
	case errors.Is(err, context.Canceled):
		return apiErr(api.CodeUnavailable, "", "exec: %v", err)
	}
	return apiErr(api.CodeInternal, "", "exec: %v", err)
}

func apiResult(r *execResult) *api.ExecResult {
	out := &api.ExecResult{ExecID: r.ID, ExitStatus: r.ExitStatus(), ExitCode: r.ExitCode, Signal: r.Signal,
		TimedOut: r.TimedOut, OOMKilled: r.OOMKilled, WallMS: float64(r.Wall) / 1e6, CPUMS: float64(r.CPU) / 1e6,
		PeakMemory: r.PeakMemory, StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes}
	if r.Signal != 0 {
		out.SignalName = unix.SignalName(syscall.Signal(r.Signal))
	}
	return out
}

// frameWriter writes an exec's NDJSON frames, each flushed at once. Output
// the command writes before the started frame is out is held (up to
// maxPending, then the writer waits) so started is always first.
type frameWriter struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	onFail func()

	mu      sync.Mutex
	open    bool
	gate    chan struct{}
	pending []api.Frame
	held    int
	failed  error
}

func newFrameWriter(w http.ResponseWriter, onFail func()) *frameWriter {
	return &frameWriter{w: w, rc: http.NewResponseController(w), onFail: onFail, gate: make(chan struct{})}
}

// start writes the response header, the started frame and what was held.
func (f *frameWriter) start(started api.Frame) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	f.w.WriteHeader(http.StatusOK)
	f.writeLocked(started)
	for _, fr := range f.pending {
		f.writeLocked(fr)
	}
	f.pending, f.open = nil, true
	close(f.gate)
}

// last writes the stream's last frame (exit or error) without flushing it:
// the handler returns right after, and the server sends it with the end of
// the response in one write.
func (f *frameWriter) last(fr api.Frame) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.put(fr)
}

func (f *frameWriter) writeLocked(fr api.Frame) {
	if !f.put(fr) {
		return
	}
	if err := f.rc.Flush(); err != nil {
		f.fail(err)
	}
}

// put writes fr into the response's buffer; false when it could not.
func (f *frameWriter) put(fr api.Frame) bool {
	if f.failed != nil {
		return false
	}
	b, err := json.Marshal(fr)
	if err != nil {
		f.fail(err)
		return false
	}
	_ = f.rc.SetWriteDeadline(time.Now().Add(frameWriteTimeout))
	if _, err := f.w.Write(append(b, '\n')); err != nil {
		f.fail(err)
		return false
	}
	return true
}

// abandon ends the writer when the handler returns: a stream never started
// writes nothing more and lets no writer wait for it.
func (f *frameWriter) abandon() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.open {
		f.failed, f.open = errExecEnded, true
		close(f.gate)
	}
}

func (f *frameWriter) fail(err error) {
	f.failed = err
	if f.onFail != nil {
		f.onFail()
	}
}

// stream is the io.Writer of one output stream; each Write is one frame.
func (f *frameWriter) stream(typ string) io.Writer { return streamWriter{f, typ} }

type streamWriter struct {
	f   *frameWriter
	typ string
}

func (s streamWriter) Write(b []byte) (int, error) {
	f := s.f
	fr := api.Frame{Type: s.typ, Data: base64.StdEncoding.EncodeToString(b)}
	f.mu.Lock()
	if !f.open && f.held+len(b) <= maxPending {
		f.pending = append(f.pending, fr)
		f.held += len(b)
		f.mu.Unlock()
		return len(b), nil
	}
	for !f.open {
		f.mu.Unlock()
		<-f.gate
		f.mu.Lock()
	}
	defer f.mu.Unlock()
	f.writeLocked(fr)
	if f.failed != nil {
		return 0, f.failed
	}
	return len(b), nil
}

// apiExecs is GET /v1/sandboxes/{id}/execs.
func (d *Daemon) apiExecs(w http.ResponseWriter, r *http.Request) {
	sb, e := d.visible(r)
	if e != nil {
		writeError(w, e)
		return
	}
	sb.touch()
	writeJSON(w, http.StatusOK, sb.execList())
}

// visibleExec finds the request's sandbox and exec.
func (d *Daemon) visibleExec(r *http.Request) (*sandbox, *execEntry, *api.Error) {
	sb, e := d.visible(r)
	if e != nil {
		return nil, nil, e
	}
	id := r.PathValue("exec_id")
	x, ok := sb.exec(id)
	if !ok {
		return nil, nil, apiErr(api.CodeNotFound, "exec_id", "sandbox %s has no exec %q", sb.id, id)
	}
	sb.touch()
	return sb, x, nil
}

// apiStdin is PUT .../execs/{exec_id}/stdin: the body is copied to the
// exec's standard input as it arrives; its end closes it.
func (d *Daemon) apiStdin(w http.ResponseWriter, r *http.Request) {
	_, x, e := d.visibleExec(r)
	if e != nil {
		writeError(w, e)
		return
	}
	x.mu.Lock()
	taken, running := x.stdinTaken, x.running
	x.stdinTaken = true
	x.mu.Unlock()
	switch {
	case !x.streamed:
		writeError(w, apiErr(api.CodeConflict, "", "exec %s was not started with stdin_stream", x.id))
		return
	case taken:
		writeError(w, apiErr(api.CodeConflict, "", "exec %s: its stdin was already sent", x.id))
		return
	case !running:
		writeError(w, apiErr(api.CodeConflict, "", "exec %s has ended", x.id))
		return
	}
	if e := copyStdin(x.stdinW, r.Body); e != nil {
		writeError(w, e)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// copyStdin copies body to the exec's stdin and closes it: at the body's
// end with EOF, on a broken body with its error (the command sees EOF).
func copyStdin(pw *io.PipeWriter, body io.Reader) *api.Error {
	buf := make([]byte, 32<<10)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, err := pw.Write(buf[:n]); err != nil {
				return apiErr(api.CodeConflict, "", "stdin: %v", errExecEnded)
			}
		}
		if errors.Is(rerr, io.EOF) {
			pw.Close()
			return nil
		}
		if rerr != nil {
			pw.CloseWithError(rerr)
			return apiErr(api.CodeBadRequest, "", "stdin: reading the request body: %v", rerr)
		}
	}
}

// apiSignal is POST .../execs/{exec_id}/signal.
func (d *Daemon) apiSignal(w http.ResponseWriter, r *http.Request) {
	_, x, e := d.visibleExec(r)
	if e != nil {
		writeError(w, e)
		return
	}
	var req api.SignalRequest
	if e := decodeBody(r, &req, false); e != nil {
		writeError(w, e)
		return
	}
	sig, e := parseSignal(req.Signal)
	if e != nil {
		writeError(w, e)
		return
	}
	x.mu.Lock()
	proc, running := x.proc, x.running
	x.mu.Unlock()
	if !running || proc == nil {
		writeError(w, apiErr(api.CodeConflict, "", "exec %s has ended", x.id))
		return
	}
	if err := proc.Signal(sig); err != nil {
		writeError(w, apiErr(api.CodeConflict, "", "exec %s: %v", x.id, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// parseSignal takes "TERM", "SIGTERM", "term" or a number 1-64.
func parseSignal(s string) (syscall.Signal, *api.Error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n >= 1 && n <= 64 {
			return syscall.Signal(n), nil
		}
	} else if name := strings.ToUpper(s); name != "" {
		if !strings.HasPrefix(name, "SIG") {
			name = "SIG" + name
		}
		if sig := unix.SignalNum(name); sig != 0 {
			return sig, nil
		}
	}
	return 0, apiErr(api.CodeInvalidField, "signal", "signal: %.20q is not a signal name (TERM, KILL, INT, HUP, ...) or number", s)
}
