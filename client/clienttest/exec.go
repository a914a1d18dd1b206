package clienttest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// execState is one exec of a fake sandbox.
type execState struct {
	api.Exec
	cmd    *exec.Cmd
	stdin  io.WriteCloser // with StdinStream, until a PUT takes it
	exited chan struct{}  // closed once the process is waited for
}

func (x *execState) running() bool {
	select {
	case <-x.exited:
		return false
	default:
		return true
	}
}

// kill kills the exec's process group.
func (x *execState) kill() {
	if x.cmd != nil && x.cmd.Process != nil && x.running() {
		_ = syscall.Kill(-x.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// execPlan is a validated exec request.
type execPlan struct {
	argv, env []string
	dir       string
	stdin     io.Reader
	stream    bool
	timeout   time.Duration
}

func (s *Server) plan(sb *sandbox, req api.ExecRequest) (execPlan, *api.Error) {
	p := execPlan{argv: req.Argv, stream: req.StdinStream, timeout: time.Duration(req.Timeout)}
	switch {
	case len(req.Argv) == 0 || req.Argv[0] == "":
		return p, invalid("argv", "missing command")
	case p.timeout < 0:
		return p, invalid("timeout", "negative")
	case req.Stdin != "" && req.StdinStream:
		return p, invalid("stdin", "both stdin and stdin_stream")
	}
	if p.timeout == 0 {
		p.timeout = time.Duration(sb.Limits.ExecTimeoutMS) * time.Millisecond
	}
	if req.Stdin != "" {
		b, err := base64.StdEncoding.DecodeString(req.Stdin)
		if err != nil {
			return p, invalid("stdin", "not base64: %v", err)
		}
		p.stdin = bytes.NewReader(b)
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = sb.WorkDir
	}
	dir, e := resolve(sb, cwd, "cwd")
	if e != nil {
		return p, e
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return p, invalid("cwd", "%s: not a directory", cwd)
	}
	p.dir = dir
	p.env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + filepath.Join(sb.root, "home")}, sb.env...)
	p.env = append(p.env, req.Env...)
	return p, nil
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	var req api.ExecRequest
	if e := decode(r, &req); e != nil {
		writeErr(w, e)
		return
	}
	p, e := s.plan(sb, req)
	if e != nil {
		writeErr(w, e)
		return
	}
	x, e := s.register(sb, p.argv)
	if e != nil {
		writeErr(w, e)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(200)
	fw := &frameWriter{w: w, fl: w.(http.Flusher)}
	res := s.runExec(r, x, p, fw)
	fw.write(api.Frame{Type: api.FrameExit, Result: res})
}

// register adds an exec to sb, refusing when sb is being deleted.
func (s *Server) register(sb *sandbox, argv []string) (*execState, *api.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb.State != api.StateRunning {
		return nil, &api.Error{Code: api.CodeConflict, Message: "sandbox " + sb.ID + " is " + sb.State}
	}
	x := &execState{exited: make(chan struct{})}
	x.Exec = api.Exec{ExecID: "x" + strconv.Itoa(len(sb.execs)+1), Argv: argv, StartedAt: time.Now().UTC(), Running: true}
	sb.execs = append(sb.execs, x)
	s.wg.Add(1)
	return x, nil
}

// frameWriter writes frames as lines, flushing each.
type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
	fl http.Flusher
}

func (f *frameWriter) write(fr api.Frame) {
	b, _ := json.Marshal(fr)
	f.mu.Lock()
	defer f.mu.Unlock()
	_, _ = f.w.Write(append(b, '\n'))
	f.fl.Flush()
}

// runExec starts the process, streams its output as frames, and returns how
// it ended. It kills the process group when the client goes away or the
// timeout passes.
func (s *Server) runExec(r *http.Request, x *execState, p execPlan, fw *frameWriter) *api.ExecResult {
	defer s.wg.Done()
	defer close(x.exited)
	start := time.Now()
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Dir, cmd.Env, cmd.Stdin = p.dir, p.env, p.stdin
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	cmd.Stdout, cmd.Stderr = outW, errW
	var stdinW io.WriteCloser
	if p.stream {
		pr, pw, _ := os.Pipe()
		cmd.Stdin, stdinW = pr, pw
		defer pr.Close()
	}
	s.mu.Lock()
	x.cmd = cmd
	err := cmd.Start()
	if err == nil {
		x.PID = cmd.Process.Pid
		x.stdin = stdinW
	}
	s.mu.Unlock()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		if stdinW != nil {
			stdinW.Close()
		}
		// As the daemon: started, then its init says why on the command's
		// stderr, as a shell would, then the exit.
		fw.write(api.Frame{Type: api.FrameStarted, ExecID: x.ExecID})
		fw.write(api.Frame{Type: api.FrameStderr, Data: base64.StdEncoding.EncodeToString([]byte("airlock: " + err.Error() + "\n"))})
		return s.finish(x, notStarted(x.ExecID, err, start))
	}
	fw.write(api.Frame{Type: api.FrameStarted, ExecID: x.ExecID, PID: x.PID})
	var outBytes, errBytes int64
	var copies sync.WaitGroup
	copies.Add(2)
	go func() { defer copies.Done(); outBytes = pump(outR, api.FrameStdout, fw) }()
	go func() { defer copies.Done(); errBytes = pump(errR, api.FrameStderr, fw) }()
	copied := make(chan struct{})
	go func() { copies.Wait(); close(copied) }()
	timedOut := false
	timer := time.NewTimer(p.timeout)
	defer timer.Stop()
	ctxDone := r.Context().Done()
wait:
	for {
		select {
		case <-copied:
			break wait
		case <-ctxDone:
			ctxDone = nil
			_ = syscall.Kill(-x.PID, syscall.SIGKILL)
		case <-timer.C:
			timedOut = true
			_ = syscall.Kill(-x.PID, syscall.SIGKILL)
		}
	}
	_ = cmd.Wait()
	s.mu.Lock()
	if x.stdin != nil {
		x.stdin.Close()
		x.stdin = nil
	}
	s.mu.Unlock()
	res := resultOf(x.ExecID, cmd.ProcessState, start, timedOut)
	res.StdoutBytes, res.StderrBytes = outBytes, errBytes
	return s.finish(x, res)
}

func (s *Server) finish(x *execState, res *api.ExecResult) *api.ExecResult {
	s.mu.Lock()
	x.Running, x.Result = false, res
	s.mu.Unlock()
	return res
}

// pump sends what r gives as frames of type typ until EOF.
func pump(r *os.File, typ string, fw *frameWriter) int64 {
	defer r.Close()
	var n int64
	buf := make([]byte, 32<<10)
	for {
		k, err := r.Read(buf)
		if k > 0 {
			n += int64(k)
			fw.write(api.Frame{Type: typ, Data: base64.StdEncoding.EncodeToString(buf[:k])})
		}
		if err != nil {
			return n
		}
	}
}

func notStarted(id string, err error, start time.Time) *api.ExecResult {
	status := 126
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		status = 127
	}
	return &api.ExecResult{ExecID: id, ExitStatus: status, ExitCode: status, Error: err.Error(),
		WallMS: float64(time.Since(start)) / 1e6}
}

func resultOf(id string, ps *os.ProcessState, start time.Time, timedOut bool) *api.ExecResult {
	res := &api.ExecResult{ExecID: id, ExitCode: ps.ExitCode(), TimedOut: timedOut,
		WallMS: float64(time.Since(start)) / 1e6, CPUMS: float64(ps.UserTime()+ps.SystemTime()) / 1e6}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		res.PeakMemory = ru.Maxrss * 1024
	}
	res.ExitStatus = res.ExitCode
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.Signal = int(ws.Signal())
		res.SignalName = "SIG" + strings.ToUpper(strings.TrimPrefix(unixSignalName(ws.Signal()), "SIG"))
		res.ExitStatus = 128 + res.Signal
	}
	if timedOut {
		res.ExitStatus = 124
	}
	return res
}

// signals are the names the fake accepts.
var signals = map[string]syscall.Signal{"TERM": syscall.SIGTERM, "KILL": syscall.SIGKILL, "INT": syscall.SIGINT,
	"HUP": syscall.SIGHUP, "QUIT": syscall.SIGQUIT, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2}

func unixSignalName(sig syscall.Signal) string {
	for n, s := range signals {
		if s == sig {
			return n
		}
	}
	return strconv.Itoa(int(sig))
}

// findExec returns exec {exec} of sandbox {id} or writes 404.
func (s *Server) findExec(w http.ResponseWriter, r *http.Request) *execState {
	sb := s.lookup(w, r)
	if sb == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range sb.execs {
		if x.ExecID == r.PathValue("exec") {
			return x
		}
	}
	writeErr(w, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no exec %q", r.PathValue("exec"))})
	return nil
}

func (s *Server) stdin(w http.ResponseWriter, r *http.Request) {
	x := s.findExec(w, r)
	if x == nil {
		return
	}
	s.mu.Lock()
	in := x.stdin
	x.stdin = nil
	s.mu.Unlock()
	if in == nil {
		writeErr(w, &api.Error{Code: api.CodeConflict, Message: "exec " + x.ExecID + " takes no streamed stdin (ended, not stdin_stream, or taken)"})
		return
	}
	// The call is answered when the body ends or the exec does, whichever
	// comes first (a client's stdin may never end).
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(in, r.Body)
		in.Close()
		copied <- err
	}()
	select {
	case err := <-copied:
		if err != nil && x.running() {
			writeErr(w, &api.Error{Code: api.CodeBadRequest, Message: "stdin: " + err.Error()})
			return
		}
	case <-x.exited:
		in.Close()
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) signal(w http.ResponseWriter, r *http.Request) {
	x := s.findExec(w, r)
	if x == nil {
		return
	}
	var req api.SignalRequest
	if e := decode(r, &req); e != nil {
		writeErr(w, e)
		return
	}
	sig, ok := signals[strings.TrimPrefix(strings.ToUpper(req.Signal), "SIG")]
	if !ok {
		writeErr(w, invalid("signal", "%q: unknown", req.Signal))
		return
	}
	if !x.running() {
		writeErr(w, &api.Error{Code: api.CodeConflict, Message: "exec " + x.ExecID + " has ended"})
		return
	}
	_ = syscall.Kill(-x.PID, sig)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) execs(w http.ResponseWriter, r *http.Request) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	s.mu.Lock()
	out := make([]api.Exec, 0, len(sb.execs))
	for _, x := range sb.execs {
		out = append(out, x.Exec)
	}
	s.mu.Unlock()
	writeJSON(w, 200, out)
}

func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	var req api.RunRequest
	if e := decode(r, &req); e != nil {
		writeErr(w, e)
		return
	}
	sb, e := s.newSandbox(api.CreateSandboxRequest{Labels: req.Labels, Limits: req.Limits, Workspace: req.Workspace,
		Env: req.Env, Mode: req.Mode, Allow: req.Allow, SecretBindings: req.SecretBindings})
	if e != nil {
		writeErr(w, e)
		return
	}
	defer s.remove(sb)
	stdin := base64.StdEncoding.EncodeToString([]byte(req.Stdin))
	p, e := s.plan(sb, api.ExecRequest{Argv: req.Argv, Stdin: stdin, Timeout: req.Limits.ExecTimeout})
	if e != nil {
		writeErr(w, e)
		return
	}
	x, e := s.register(sb, p.argv)
	if e != nil {
		writeErr(w, e)
		return
	}
	var out, errb bytes.Buffer
	res := s.runExec(r, x, p, &frameWriter{w: &capture{out: &out, err: &errb}, fl: nopFlusher{}})
	writeJSON(w, 200, api.RunResponse{ID: sb.ID, ExecResult: *res, Stdout: out.String(), Stderr: errb.String(), Egress: sb.view().Egress,
		SecretBindings: sb.SecretBindings})
}

// remove deletes sb without a request.
func (s *Server) remove(sb *sandbox) {
	s.mu.Lock()
	delete(s.sandboxes, sb.ID)
	sb.State = api.StateStopped
	close(sb.done)
	s.mu.Unlock()
	_ = os.RemoveAll(sb.root)
}

type nopFlusher struct{}

func (nopFlusher) Flush() {}

// capture collects the output of frames written as lines.
type capture struct{ out, err *bytes.Buffer }

func (c *capture) Write(line []byte) (int, error) {
	var f api.Frame
	if json.Unmarshal(line, &f) == nil {
		b, _ := base64.StdEncoding.DecodeString(f.Data)
		switch f.Type {
		case api.FrameStdout:
			c.out.Write(b)
		case api.FrameStderr:
			c.err.Write(b)
		}
	}
	return len(line), nil
}
