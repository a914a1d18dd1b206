package sandboxd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// One run, in named steps: open the pipes, spawn init, start draining its
// output, set it up (config, cgroup, go), supervise it until every process of
// the sandbox is gone, and read how it ended. Each step closes what it opened
// on its own error path; once init is spawned, the executor's ends have one
// owner each: the output drains close the stdout and stderr ends, the stdin
// copier the stdin end, and run the config and status ends.

// emptyWait bounds how long a killed sandbox's processes may take to leave its
// cgroup before the run is reported as failed.
const emptyWait = 5 * time.Second

// runPipes are the pipes between the executor and init. The child's ends are
// passed to init and closed in the executor once it is spawned.
type runPipes struct {
	cfgR, cfgW   *os.File // fd 3: the initConfig, then the go message
	statR, statW *os.File // fd 4: init's events
	outR, outW   *os.File // stdout
	errR, errW   *os.File // stderr
	stdin        *os.File // the child's stdin: a pipe's read end, or /dev/null
	stdinW       *os.File // the executor's end of the stdin pipe; nil without Spec.Stdin
}

// openPipes opens every pipe init needs, or nothing.
func openPipes(withStdin bool) (*runPipes, error) {
	p := &runPipes{}
	var err error
	for _, pp := range []struct{ r, w **os.File }{{&p.cfgR, &p.cfgW}, {&p.statR, &p.statW}, {&p.outR, &p.outW}, {&p.errR, &p.errW}} {
		if *pp.r, *pp.w, err = os.Pipe(); err != nil {
			break
		}
	}
	if err == nil {
		if withStdin {
			p.stdin, p.stdinW, err = os.Pipe()
		} else {
			p.stdin, err = os.Open(os.DevNull)
		}
	}
	if err != nil {
		p.closeChild()
		p.closeOwn()
		return nil, fmt.Errorf("sandboxd: pipes for init: %w", err)
	}
	return p, nil
}

// closeChild closes the ends init got.
func (p *runPipes) closeChild() { closeFiles(p.cfgR, p.statW, p.outW, p.errW, p.stdin) }

// closeOwn closes the executor's ends (before the drains and the stdin copier
// own some of them).
func (p *runPipes) closeOwn() { closeFiles(p.cfgW, p.statR, p.outR, p.errR, p.stdinW) }

func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// runner holds one run's state between its steps.
type runner struct {
	e    *Executor
	spec *Spec
	lim  Limits
	s    *slot
	icfg *initConfig
	res  *Result
	lg   *slog.Logger
	t0   time.Time

	p      *runPipes
	pid    int
	exited chan error // init's wait result, once
	drains sync.WaitGroup
	outC   *capture
	errC   *capture
}

// run spawns init and supervises it until every process of the sandbox is gone.
func (e *Executor) run(ctx context.Context, t0 time.Time, spec *Spec, lim Limits, s *slot, icfg *initConfig, res *Result, lg *slog.Logger) error {
	r := &runner{e: e, spec: spec, lim: lim, s: s, icfg: icfg, res: res, lg: lg, t0: t0}
	p, err := openPipes(spec.Stdin != nil)
	if err != nil {
		return err
	}
	r.p = p
	if err := r.spawn(); err != nil {
		return err
	}
	defer p.cfgW.Close()
	defer p.statR.Close()
	r.startIO()
	if err := r.setup(); err != nil {
		return r.abort(err)
	}
	return r.supervise(ctx)
}

type spawned struct {
	pid int
	err error
}

// spawn starts init in its new namespaces (and cgroup, on v2). The child's ends
// of the pipes are closed whatever happens; on an error the executor's are too.
func (r *runner) spawn() error {
	defer r.p.closeChild()
	err := func() error {
		var cgFD, netnsFD *os.File
		if r.s.cg.v2 {
			var err error
			if cgFD, err = r.s.cg.openFD(); err != nil {
				return err
			}
			defer cgFD.Close()
		}
		if r.spec.NetNS != "" {
			var err error
			if netnsFD, err = os.Open(r.spec.NetNS); err != nil {
				return fmt.Errorf("sandboxd: netns %s: %w", r.spec.NetNS, err)
			}
			defer netnsFD.Close()
		}
		started := make(chan spawned, 1)
		r.exited = make(chan error, 1)
		go r.forkInit(cgFD, netnsFD, started)
		sp := <-started
		r.pid = sp.pid
		return sp.err
	}()
	if err != nil {
		r.p.closeOwn()
	}
	return err
}

// forkInit runs on its own goroutine. This thread forks init: Pdeathsig fires
// when it exits, so it stays locked and alive until init is reaped, and is
// discarded afterwards (never unlocked), which also throws away the network
// namespace it joined.
func (r *runner) forkInit(cgFD, netnsFD *os.File, started chan<- spawned) {
	runtime.LockOSThread()
	flags := uintptr(unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWCGROUP)
	if netnsFD != nil {
		if err := unix.Setns(int(netnsFD.Fd()), unix.CLONE_NEWNET); err != nil {
			started <- spawned{err: fmt.Errorf("sandboxd: join netns %s: %w", r.spec.NetNS, err)}
			return
		}
	} else {
		flags |= unix.CLONE_NEWNET
	}
	exe := r.e.cfg.Exe
	cmd := &exec.Cmd{
		Path:       exe,
		Args:       append([]string{exe}, r.e.cfg.InitArgs...),
		Env:        []string{envStage + "=" + stageInit},
		Stdin:      r.p.stdin,
		Stdout:     r.p.outW,
		Stderr:     r.p.errW,
		ExtraFiles: []*os.File{r.p.cfgR, r.p.statW, r.e.rootNS.f}, // fds 3, 4, 5 (Run checked rootNS)
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: flags,
			Pdeathsig:  unix.SIGKILL,
		},
	}
	if cgFD != nil {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(cgFD.Fd())
	}
	if err := cmd.Start(); err != nil {
		started <- spawned{err: fmt.Errorf("sandboxd: start init: %w", err)}
		return
	}
	started <- spawned{pid: cmd.Process.Pid}
	r.exited <- cmd.Wait()
}

// startIO starts the output drains (before init can write anything) and the
// stdin copier; they own and close the stdout, stderr and stdin ends.
func (r *runner) startIO() {
	r.outC = newCapture(r.spec.Stdout, r.lim.OutputCap)
	r.errC = newCapture(r.spec.Stderr, r.lim.OutputCap)
	r.drains.Add(2)
	go func() { defer r.drains.Done(); r.outC.drain(r.p.outR) }()
	go func() { defer r.drains.Done(); r.errC.drain(r.p.errR) }()
	if w := r.p.stdinW; w != nil {
		go func() {
			_, _ = io.Copy(w, r.spec.Stdin)
			w.Close()
		}()
	}
}

// setup sends init its config, makes sure it is in the sandbox's cgroup with a
// neutral OOM score, and lets the command start. Init builds the filesystem
// view while a v1 cgroup move runs (the kernel makes the first cgroup
// migration after a quiet spell wait for an RCU grace period, 5-15 ms); the
// command starts only after the go message.
func (r *runner) setup() error {
	cfgW, pid := r.p.cfgW, r.pid
	if err := json.NewEncoder(cfgW).Encode(r.icfg); err != nil {
		return fmt.Errorf("sandboxd: send init config: %w", err)
	}
	if !r.s.cg.v2 {
		if err := r.s.cg.addProc(pid); err != nil {
			return err
		}
	}
	// Born in (v2) or moved into (v1) the cgroup: check before the command
	// may start.
	if err := r.s.cg.holds(pid); err != nil {
		return err
	}
	// Never let the sandbox inherit an OOM-immune score.
	if err := writeFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", "0"); err != nil {
		return fmt.Errorf("sandboxd: reset oom_score_adj: %w", err)
	}
	if _, err := io.WriteString(cfgW, goMessage); err != nil {
		return fmt.Errorf("sandboxd: send go: %w", err)
	}
	return cfgW.Close()
}

// abort ends a run whose setup failed: the tree is killed and gone, the output
// drained, and init's own failure (often why the pipe broke) is reported.
func (r *runner) abort(setupErr error) error {
	r.killTree()
	<-r.exited
	if ev := readFailure(r.p.statR); ev != nil {
		setupErr = fmt.Errorf("sandboxd: sandbox setup: %s (then: %w)", ev.Error, setupErr)
	}
	if err := r.emptied(); err != nil {
		setupErr = errors.Join(setupErr, err)
	}
	r.drains.Wait()
	return setupErr
}

// killTree kills through the cgroup (every process at once, forks included) and
// through PID 1, whose death takes its PID namespace with it: either alone ends
// the tree.
func (r *runner) killTree() {
	if err := r.s.cg.kill(); err != nil {
		r.lg.Error("cgroup kill failed", "err", err)
	}
	_ = unix.Kill(r.pid, unix.SIGKILL)
}

// emptied makes sure nothing of the sandbox survives init: a process left in
// the cgroup is an error, never a successful result.
func (r *runner) emptied() error {
	if err := r.s.cg.kill(); err != nil {
		r.lg.Error("cgroup kill failed", "err", err)
	}
	return r.s.cg.waitEmpty(emptyWait)
}

// outcome is what supervise saw of a run.
type outcome struct {
	final, failure *event // init's exit event; its last failure event
	initErr        error  // init's wait result
	ctxErr         error  // ctx ended first
}

// supervise follows init's events until init is gone, enforcing the timeout
// and ctx, then collects the output and maps how the run ended.
func (r *runner) supervise(ctx context.Context) error {
	events := make(chan event, 4)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(r.p.statR)
		for sc.Scan() {
			var ev event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				events <- ev
			}
		}
	}()
	timer := time.NewTimer(r.lim.Timeout)
	defer timer.Stop()
	var o outcome
	exited := r.exited
	for exited != nil || events != nil {
		select {
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			r.onEvent(ev, &o)
		case o.initErr = <-exited:
			exited = nil
		case <-timer.C:
			r.res.TimedOut = true
			r.killTree()
		case <-ctx.Done():
			o.ctxErr = ctx.Err()
			r.killTree()
		}
		if o.ctxErr != nil {
			ctx = context.Background() // stop selecting on it
		}
	}
	// Init is gone, so the namespace is empty; make sure of it, then close output.
	treeErr := r.emptied()
	r.drains.Wait()
	r.res.Stdout, r.res.StdoutBytes = r.outC.buf, r.outC.total
	r.res.Stderr, r.res.StderrBytes = r.errC.buf, r.errC.total
	r.res.Truncated = r.outC.truncated || r.errC.truncated
	return r.conclude(o, treeErr)
}

func (r *runner) onEvent(ev event, o *outcome) {
	switch ev.Event {
	case "started":
		r.res.StartLatency = time.Since(r.t0)
		r.lg.Info("sandbox started", "create_to_exec", r.res.StartLatency)
	case "exit":
		o.final = &ev
	default:
		o.failure = &ev
	}
}

// conclude sets the exit status and returns the run's error.
func (r *runner) conclude(o outcome, treeErr error) error {
	res := r.res
	switch {
	case o.final != nil:
		res.ExitCode, res.Signal = o.final.Code, o.final.Signal
	default:
		res.Signal = int(unix.SIGKILL)
		if ws, ok := exitStatus(o.initErr); ok && !ws.Signaled() && o.failure == nil {
			res.Signal, res.ExitCode = 0, ws.ExitStatus()
		}
	}
	if treeErr != nil {
		return treeErr
	}
	if o.ctxErr != nil {
		return o.ctxErr
	}
	if o.failure != nil {
		if o.failure.Event == "exec_error" {
			res.Signal, res.ExitCode = 0, o.failure.Code
			return &ExecError{Msg: o.failure.Error}
		}
		if !res.TimedOut {
			return fmt.Errorf("sandboxd: sandbox setup: %s", o.failure.Error)
		}
	}
	if o.final == nil && !res.TimedOut {
		return fmt.Errorf("sandboxd: init ended without a status: %v", o.initErr)
	}
	return nil
}

// readFailure returns the last failure event init wrote before it ended (its
// end of the status pipe is closed), or nil.
func readFailure(statR *os.File) *event {
	var last *event
	sc := bufio.NewScanner(io.LimitReader(statR, 1<<20))
	for sc.Scan() {
		var ev event
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Event != "started" && ev.Event != "exit" {
			last = &ev
		}
	}
	return last
}

func exitStatus(err error) (syscall.WaitStatus, bool) {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		ws, ok := ee.Sys().(syscall.WaitStatus)
		return ws, ok
	}
	return 0, false
}

// capture tees a stream to a live writer and keeps the first cap bytes; the rest is
// read and dropped so the writer never blocks.
type capture struct {
	live      io.Writer
	cap       int64
	buf       []byte
	total     int64
	truncated bool
}

func newCapture(live io.Writer, cap int64) *capture { return &capture{live: live, cap: cap} }

func (c *capture) drain(r *os.File) {
	defer r.Close()
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
					c.live = nil // a broken live writer must not stall the sandbox
				}
			}
		}
		if err != nil {
			return
		}
	}
}
