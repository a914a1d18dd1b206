package sandboxd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/oplog"
)

// outputGrace is how long an exec's output is still read after its command
// exited: what the command wrote is already in the pipes; this is for
// processes it left behind that hold them open. Their later output is dropped
// (they keep running until they end or the sandbox is destroyed).
const outputGrace = 100 * time.Millisecond

// ExecSpec is one command to run in a started sandbox.
type ExecSpec struct {
	// Argv is the command; Argv[0] is looked up in the PATH of its
	// environment.
	Argv []string
	// Env is "K=V" entries after the sandbox's (later entries win).
	Env []string
	// Dir is the working directory. Default: the sandbox's WorkDir.
	Dir string
	// Stdin feeds the command; nil means /dev/null. It is copied until it
	// ends or the command exits; a Read that blocks keeps its copier
	// goroutine until it returns.
	Stdin io.Reader
	// Stdout and Stderr receive the output as it is produced, in addition to
	// what Wait keeps (OutputCap bytes of each). A writer that fails is
	// dropped; the command is never blocked by one.
	Stdout, Stderr io.Writer
	// Timeout kills the command and every process it started when it
	// passes. Default: the sandbox's Limits.Timeout.
	Timeout time.Duration
	// OutputCap is how many bytes of stdout and of stderr Wait keeps.
	// Default: the sandbox's Limits.OutputCap.
	OutputCap int64
}

// ExecResult is how an exec ended.
type ExecResult struct {
	ID        string
	ExitCode  int  // valid when Signal is 0
	Signal    int  // the signal that ended the command, 0 if it exited
	TimedOut  bool // Timeout passed and the command's processes were killed
	OOMKilled bool // the cgroup's OOM kill counter moved while it ran and it died of SIGKILL
	Wall      time.Duration
	// CPU and PeakMemory are the command's and the descendants it waited
	// for (wait4's rusage): user+system time, and the largest resident set.
	CPU         time.Duration
	PeakMemory  int64
	StdoutBytes int64 // bytes the command wrote, including any not kept
	StderrBytes int64
	Truncated   bool // either stream exceeded OutputCap
	Stdout      []byte
	Stderr      []byte
}

// ExitStatus maps a result to a shell-style status: 124 on timeout, 137 on OOM
// kill, 128+n on signal n, else the command's exit code.
func (r *ExecResult) ExitStatus() int {
	switch {
	case r.TimedOut:
		return 124
	case r.OOMKilled:
		return 137
	case r.Signal != 0:
		return 128 + r.Signal
	}
	return r.ExitCode
}

// ExecError reports a command that could not be started (not found, not
// executable): Code is 127 or 126, as a shell's.
type ExecError struct {
	Msg  string
	Code int
}

func (e *ExecError) Error() string { return "sandboxd: " + e.Msg }

// A Process is a command running in a sandbox.
type Process struct {
	s         *Sandbox
	j         *job
	argv      []string
	sandboxID string
	opts      execOptions
	t0        time.Time
	started   time.Time
	pid       int
	session   uint32
	timeout   time.Duration
	oomBefore int64

	pipes  *execPipes
	outC   *capture
	errC   *capture
	drains sync.WaitGroup

	exited chan struct{} // closed when init reported the exit (or the sandbox is gone)
	done   chan struct{} // closed when res and err are final
	res    *ExecResult
	err    error
}

// execOptions are Run's differences from Exec.
type execOptions struct {
	// audit: write the exec's start and end records (Run writes its own).
	audit bool
	// onExit runs when the command has exited, before its output is
	// collected (Run kills the rest of the sandbox there).
	onExit func()
}

// ID is the exec's id in its sandbox (audit records are named
// <sandbox>/<id>/start and /end).
func (p *Process) ID() string { return p.j.id }

// PID is the command's pid inside the sandbox.
func (p *Process) PID() int { return p.pid }

// Signal sends sig to the command's process group.
func (p *Process) Signal(sig syscall.Signal) error {
	select {
	case <-p.exited:
		return fmt.Errorf("sandboxd: exec %s: %w", p.j.id, os.ErrProcessDone)
	default:
	}
	err := p.s.signalJob(p.j.id, int(sig))
	select {
	case <-p.exited:
		if err != nil {
			return fmt.Errorf("sandboxd: exec %s: %w", p.j.id, os.ErrProcessDone)
		}
	default:
	}
	return err
}

// Wait waits for the command to end and its output to be collected. The
// result is returned with a nil error, or with an error wrapping
// ErrSandboxGone when the sandbox was destroyed or died first, or ctx's error
// when Exec's ctx ended first (the command's processes were killed).
func (p *Process) Wait() (*ExecResult, error) {
	<-p.done
	return p.res, p.err
}

// Exec starts a command in the sandbox and returns once it runs, or with an
// *ExecError when it cannot be started (not found: 127, not executable: 126),
// or another error. The command runs in its own session and process group as
// the sandbox uid, from a fresh thread of init that dropped every privilege
// (see init_jobs_linux.go), with the sandbox's environment plus x.Env. ctx
// bounds the whole exec: when it ends first, the command and every process it
// started are killed.
func (s *Sandbox) Exec(ctx context.Context, x ExecSpec) (*Process, error) {
	p, err := s.exec(ctx, x, execOptions{audit: true})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// exec is Exec; on an *ExecError it also returns the (finished) Process,
// whose result holds the exit code and output.
func (s *Sandbox) exec(ctx context.Context, x ExecSpec, o execOptions) (*Process, error) {
	if err := x.validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.pidsRoom(); err != nil {
		return nil, err
	}
	sid, lim, env, workDir, err := s.settings() // counts the exec in s.procs
	if err != nil {
		return nil, err
	}
	supervised := false
	defer func() {
		if !supervised {
			s.procs.Done()
		}
	}()
	p := &Process{s: s, j: s.newJob("x"), argv: x.Argv, sandboxID: sid, opts: o, t0: time.Now(),
		timeout: x.Timeout, exited: make(chan struct{}), done: make(chan struct{})}
	if p.timeout == 0 {
		p.timeout = lim.Timeout
	}
	outCap := x.OutputCap
	if outCap == 0 {
		outCap = lim.OutputCap
	}
	req := &execRequest{ID: p.j.id, Argv: x.Argv, Env: dedupeEnv(append(append([]string{}, env...), x.Env...)), Dir: x.Dir}
	if req.Dir == "" {
		req.Dir = workDir
	}
	if p.pipes, err = openExecPipes(x.Stdin != nil); err != nil {
		close(p.done)
		return nil, err
	}
	p.oomBefore = s.slot.cg.oomKills()
	if o.audit {
		if err := s.e.log.Log(&audit.Record{ID: p.recordID("start"), Sandbox: sid, Kind: audit.KindExec, Decision: audit.DecisionAllow,
			Exec: &audit.Exec{Phase: "start", Argv: x.Argv}}); err != nil {
			p.pipes.closeChild()
			p.pipes.closeOwn()
			close(p.done)
			return nil, fmt.Errorf("sandboxd: audit start record refused, not running: %w", err)
		}
	}
	r, err := s.sendJob(&message{Type: msgExec, Exec: req}, p.j, p.pipes.child()...)
	p.pipes.closeChild()
	var m *message
	if err == nil {
		// Init answers at once; no ctx here, so a command that started is
		// never left without a supervisor.
		m, err = s.await(context.Background(), r)
	}
	p.outC, p.errC = newCapture(x.Stdout, outCap), newCapture(x.Stderr, outCap)
	if err != nil {
		p.pipes.closeOwn()
		p.conclude(err)
		return nil, err
	}
	switch m.Type {
	case msgStarted:
		p.pid, p.session, p.started = m.Started.PID, m.Started.Session, time.Now()
	case msgExecError:
		// Init wrote why on the command's stderr, as a shell would.
		p.startIO(nil)
		close(p.exited)
		p.finish(&exitEvent{Code: m.Code}, nil, nil)
		p.conclude(&ExecError{Msg: m.Error, Code: m.Code})
		return p, p.err
	default:
		p.pipes.closeOwn()
		err := fmt.Errorf("sandboxd: exec: %s", m.Error)
		p.conclude(err)
		return nil, err
	}
	p.startIO(x.Stdin)
	supervised = true
	go p.supervise(ctx)
	return p, nil
}

func (p *Process) recordID(phase string) string { return p.sandboxID + "/" + p.j.id + "/" + phase }

// startIO starts the output drains and the stdin copier; they own and close
// the executor's ends of the pipes.
func (p *Process) startIO(stdin io.Reader) {
	p.drains.Add(2)
	go func() { defer p.drains.Done(); p.outC.drain(p.pipes.outR) }()
	go func() { defer p.drains.Done(); p.errC.drain(p.pipes.errR) }()
	if w := p.pipes.inW; w != nil {
		if stdin == nil {
			w.Close()
			return
		}
		go func() {
			_, _ = io.Copy(w, stdin)
			w.Close()
		}()
	}
}

// supervise waits for the command's exit, enforcing the timeout and ctx, and
// then collects its result.
func (p *Process) supervise(ctx context.Context) {
	defer p.s.procs.Done()
	var timer <-chan time.Time
	if p.timeout > 0 {
		t := time.NewTimer(p.timeout)
		defer t.Stop()
		timer = t.C
	}
	timedOut := false
	var ev *exitEvent
	var goneErr, ctxErr error
	ctxDone := ctx.Done()
	for ev == nil && goneErr == nil {
		select {
		case ev = <-p.j.exit:
		case <-p.s.dead:
			select {
			case ev = <-p.j.exit:
			default:
				goneErr = p.s.deadError()
			}
		case <-timer:
			timer, timedOut = nil, true
			p.kill()
		case <-ctxDone:
			ctxDone, ctxErr = nil, ctx.Err()
			p.kill()
		}
	}
	close(p.exited)
	if p.opts.onExit != nil {
		p.opts.onExit()
	}
	p.finish(ev, goneErr, ctxErr)
	p.res.TimedOut = timedOut
	if p.opts.audit {
		p.auditEnd()
	}
	close(p.done)
}

// kill ends the command and every process it started: all the processes of
// its audit session (which none of them can leave), or, where the kernel gave
// it none, its process group.
func (p *Process) kill() {
	var err error
	if p.session != 0 {
		err = p.s.killSession(p.session)
	} else {
		err = p.s.signalJob(p.j.id, int(unix.SIGKILL))
	}
	if err != nil {
		p.s.lg.Error("kill exec", jobKey, p.j.id, oplog.ErrorKey, err)
	}
}

// finish closes stdin, collects the output and fills the result. The
// drains end at EOF; when something the command left behind still holds a
// pipe, at the first outputGrace without data (or emptyWait after the exit):
// what the command itself wrote is in the pipe already.
func (p *Process) finish(ev *exitEvent, goneErr, ctxErr error) {
	wall := time.Since(p.t0)
	p.collect(outputGrace)
	res := &ExecResult{ID: p.j.id, Wall: wall,
		StdoutBytes: p.outC.total, StderrBytes: p.errC.total, Stdout: p.outC.buf, Stderr: p.errC.buf,
		Truncated: p.outC.truncated || p.errC.truncated}
	switch {
	case ev == nil:
		res.Signal = int(unix.SIGKILL)
	case ev.Signal != 0:
		res.Signal = ev.Signal
	default:
		res.ExitCode = ev.Code
	}
	if ev != nil {
		res.CPU = time.Duration(ev.UserUS+ev.SystemUS) * time.Microsecond
		res.PeakMemory = ev.MaxRSSKB << 10
		res.OOMKilled = ev.Signal == int(unix.SIGKILL) && p.s.slot.cg.oomKills() > p.oomBefore
	}
	p.res = res
	switch {
	case goneErr != nil:
		p.err = goneErr
	case ctxErr != nil:
		p.err = ctxErr
	}
}

// collect closes stdin (unblocking its copier) and waits for the output
// drains. With grace > 0 each drain stops once no data came for grace, or
// emptyWait after now; with 0 it waits for EOF.
func (p *Process) collect(grace time.Duration) {
	if w := p.pipes.inW; w != nil {
		w.Close()
	}
	if grace > 0 {
		p.outC.exited(p.pipes.outR, grace)
		p.errC.exited(p.pipes.errR, grace)
	}
	p.drains.Wait()
}

// conclude ends an exec that never ran (its result, if finish made none,
// says SIGKILL) with err, and writes its end record, which says why.
func (p *Process) conclude(err error) {
	if p.res == nil {
		p.res = &ExecResult{ID: p.j.id, Signal: int(unix.SIGKILL)}
	}
	p.err = err
	if p.opts.audit {
		p.auditEnd()
	}
	close(p.done)
}

// auditEnd writes the exec's end record.
func (p *Process) auditEnd() {
	if err := p.s.e.log.Log(endRecord(p.recordID("end"), p.sandboxID, p.res, false, p.err)); err != nil {
		p.s.lg.Error("audit end record refused", jobKey, p.j.id, oplog.ErrorKey, err)
	}
}

// endRecord is the end record of an exec or a run (id, of sandbox) that
// ended with r, or failed with err.
func endRecord(id, sandbox string, r *ExecResult, pidsHit bool, err error) *audit.Record {
	x := &audit.Exec{Phase: "end", TimedOut: r.TimedOut, OOMKilled: r.OOMKilled, PidsLimit: pidsHit,
		WallMS: float64(r.Wall) / 1e6, CPUMS: float64(r.CPU) / 1e6, PeakMemory: r.PeakMemory,
		StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes, Truncated: r.Truncated}
	if r.Signal != 0 {
		x.Signal = unix.SignalName(syscall.Signal(r.Signal))
	} else {
		code := r.ExitCode
		x.ExitCode = &code
	}
	rec := &audit.Record{ID: id, Sandbox: sandbox, Kind: audit.KindExec, Decision: audit.DecisionAllow, Exec: x}
	if err != nil {
		rec.Decision = audit.DecisionError
		rec.Error = err.Error()
	}
	return rec
}

// signalJob asks init to send sig to a job's process group.
func (s *Sandbox) signalJob(id string, sig int) error {
	r, err := s.send(&message{Type: msgSignal, Signal: &signalRequest{ID: id, Signal: sig}})
	if err != nil {
		return err
	}
	m, err := s.await(context.Background(), r)
	if err != nil {
		return err
	}
	if m.Type != msgOK {
		return fmt.Errorf("sandboxd: signal %d to %s: %s", sig, id, m.Error)
	}
	return nil
}

// killSession kills every process of the sandbox whose audit session is
// session, with the cgroup frozen so none can fork meanwhile.
func (s *Sandbox) killSession(session uint32) error {
	s.killMu.Lock()
	defer s.killMu.Unlock()
	cg := s.slot.cg
	return cg.whileFrozen(func() error {
		ps, err := cg.pids()
		for _, pid := range ps {
			if n, ok := auditSession(pid); ok && n == session {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
		return err
	})
}

// auditSession reads a host process's audit session id.
func auditSession(pid int) (uint32, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/sessionid")
	if err != nil {
		return 0, false
	}
	var n uint32
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &n); err != nil {
		return 0, false
	}
	return n, true
}

func (x *ExecSpec) validate() error {
	if len(x.Argv) == 0 || x.Argv[0] == "" {
		return errors.New("sandboxd: exec.argv: want a command")
	}
	if x.Dir != "" && !filepath.IsAbs(x.Dir) {
		return fmt.Errorf("sandboxd: exec.dir %q: want an absolute path", x.Dir)
	}
	for _, e := range x.Env {
		if i := indexByte(e, '='); i <= 0 {
			return fmt.Errorf("sandboxd: exec.env %q: want KEY=VALUE", e)
		}
	}
	for _, s := range append(append([]string{x.Dir}, x.Argv...), x.Env...) {
		if strings.IndexByte(s, 0) >= 0 {
			return errors.New("sandboxd: exec: a NUL byte in argv, env or dir")
		}
	}
	if x.Timeout < 0 || x.OutputCap < 0 {
		return fmt.Errorf("sandboxd: exec.timeout %s output_cap %d: want >= 0", x.Timeout, x.OutputCap)
	}
	return nil
}

// execPipes are an exec's stdio pipes. The child's ends travel to init; the
// executor keeps the others.
type execPipes struct {
	inR, outW, errW *os.File // the child's: stdin (a pipe's read end, or /dev/null), stdout, stderr
	inW, outR, errR *os.File // the executor's; inW is nil with /dev/null
}

// openExecPipes opens them all, or nothing.
func openExecPipes(withStdin bool) (*execPipes, error) {
	p := &execPipes{}
	var err error
	if p.outR, p.outW, err = os.Pipe(); err == nil {
		if p.errR, p.errW, err = os.Pipe(); err == nil {
			if withStdin {
				p.inR, p.inW, err = os.Pipe()
			} else {
				p.inR, err = os.Open(os.DevNull)
			}
		}
	}
	if err != nil {
		p.closeChild()
		p.closeOwn()
		return nil, fmt.Errorf("sandboxd: pipes for exec: %w", err)
	}
	return p, nil
}

func (p *execPipes) child() []int {
	return []int{int(p.inR.Fd()), int(p.outW.Fd()), int(p.errW.Fd())}
}

func (p *execPipes) closeChild() { closeFiles(p.inR, p.outW, p.errW) }
func (p *execPipes) closeOwn()   { closeFiles(p.inW, p.outR, p.errR) }

func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// capture tees a stream to a live writer and keeps the first cap bytes; the rest is
// read and dropped so the writer never blocks.
type capture struct {
	live      io.Writer
	liveErr   error // why live was dropped
	cap       int64
	buf       []byte
	total     int64
	truncated bool

	mu     sync.Mutex
	grace  time.Duration // set once the command exited: how long to wait for more
	endAt  time.Time     // and when to stop regardless
	closed bool
}

func newCapture(live io.Writer, cap int64) *capture { return &capture{live: live, cap: cap} }

// exited tells the drain of r that the command is gone: from now on a read
// that waits longer than grace, or any read emptyWait from now, ends it.
func (c *capture) exited(r *os.File, grace time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.grace, c.endAt = grace, time.Now().Add(emptyWait)
	_ = r.SetReadDeadline(time.Now().Add(grace))
}

// rearm gives the next read its grace, or says to stop.
func (c *capture) rearm(r *os.File) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.grace == 0 {
		return true
	}
	now := time.Now()
	if now.After(c.endAt) {
		return false
	}
	_ = r.SetReadDeadline(now.Add(c.grace))
	return true
}

func (c *capture) drain(r *os.File) {
	defer func() {
		c.mu.Lock()
		c.closed = true
		r.Close()
		c.mu.Unlock()
	}()
	b := make([]byte, 32<<10)
	for {
		n, err := r.Read(b)
		if n > 0 {
			c.total += int64(n)
			keep := int64(n)
			if room := c.cap - int64(len(c.buf)); keep > room {
				keep = room
				c.truncated = true
			}
			c.buf = append(c.buf, b[:keep]...)
			if c.live != nil {
				if _, werr := c.live.Write(b[:n]); werr != nil {
					c.live, c.liveErr = nil, werr // a broken live writer must not stall the sandbox
				}
			}
		}
		if err != nil || !c.rearm(r) {
			return
		}
	}
}
