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
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/audit"
)

// Executor runs commands in sandboxes. It is safe for concurrent use.
type Executor struct {
	cfg  Config
	cgm  *cgroupManager
	pool *pool
	log  audit.Logger
	lg   *slog.Logger
}

// ExecError reports a command that could not be started (not found, not
// executable); Run returns it together with a Result whose ExitCode is 127 or 126.
type ExecError struct{ Msg string }

func (e *ExecError) Error() string { return "sandboxd: " + e.Msg }

// New validates cfg, prepares the cgroup parent, removes stale sandboxes left by
// dead executors and starts the slot pool. log receives the exec audit records.
func New(cfg Config, log audit.Logger, logger *slog.Logger) (*Executor, error) {
	cfg.applyDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		return nil, errors.New("sandboxd: an audit logger is required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	lg := logger.With("component", "sandboxd")
	cgm, err := newCgroupManager(cfg.CgroupRoot, cfg.CgroupMode, cfg.CgroupParent, cfg.AllowMissingControllers)
	if err != nil {
		return nil, err
	}
	if miss := cgm.missing(); len(miss) > 0 {
		lg.Warn("cgroup controllers missing: their limits are not enforced", "controllers", miss,
			"cgroup_root", cfg.CgroupRoot, "v2", cgm.v2)
	}
	p, err := newPool(&cfg, cgm)
	if err != nil {
		return nil, err
	}
	return &Executor{cfg: cfg, cgm: cgm, pool: p, log: log, lg: lg}, nil
}

// Close destroys the idle pool slots.
func (e *Executor) Close() error { return e.pool.close() }

// CgroupV2 reports whether the executor uses the unified hierarchy.
func (e *Executor) CgroupV2() bool { return e.cgm.v2 }

// Run runs spec to completion. The returned error is non-nil when the sandbox could
// not be built or the audit start record could not be written (nothing ran), when
// ctx ended (the tree was killed; the Result is still returned), or with an
// *ExecError when the command could not be executed.
func (e *Executor) Run(ctx context.Context, spec Spec) (*Result, error) {
	t0 := time.Now()
	if err := spec.validate(); err != nil {
		return nil, err
	}
	lim := spec.Limits.withDefaults(e.cfg.Limits)
	if err := lim.validate(); err != nil {
		return nil, err
	}
	s, err := e.pool.get()
	if err != nil {
		return nil, err
	}
	id := spec.ID
	if id == "" {
		id = s.id
	}
	res := &Result{ID: id, UID: s.uid}
	lg := e.lg.With("sandbox", id, "uid", s.uid)
	defer func() {
		if err := s.destroy(); err != nil {
			lg.Error("sandbox cleanup failed", "err", err)
		}
	}()
	warns, err := s.cg.apply(lim)
	for _, w := range warns {
		lg.Warn("cgroup limit weakened", "reason", w)
	}
	if err != nil {
		return nil, err
	}
	icfg, err := e.initConfig(&spec, lim, s)
	if err != nil {
		return nil, err
	}
	if err := e.log.Log(&audit.Record{ID: id + "/start", Sandbox: id, Kind: "exec", Decision: "allow",
		Exec: &audit.Exec{Phase: "start", Argv: spec.Argv}}); err != nil {
		return nil, fmt.Errorf("sandboxd: audit start record refused, not running: %w", err)
	}
	runErr := e.run(ctx, t0, &spec, lim, s, icfg, res, lg)
	res.Wall = time.Since(t0)
	st := s.cg.stats()
	if st.readError != nil {
		lg.Error("cgroup counters unreadable", "err", st.readError)
	}
	res.OOMKilled = st.OOMKills > 0
	res.PidsLimitHit = st.PidsMax > 0
	res.PeakMemory = st.Peak
	res.CPU = st.CPU
	e.auditEnd(id, res, runErr)
	lvl := slog.LevelInfo
	if runErr != nil {
		lvl = slog.LevelError
	}
	lg.Log(ctx, lvl, "sandbox finished", "exit", res.ExitStatus(), "timed_out", res.TimedOut,
		"oom", res.OOMKilled, "wall", res.Wall, "err", runErr)
	var ee *ExecError
	if runErr != nil && !errors.As(runErr, &ee) && !errors.Is(runErr, context.Canceled) && !errors.Is(runErr, context.DeadlineExceeded) {
		return nil, runErr
	}
	return res, runErr
}

func (e *Executor) auditEnd(id string, r *Result, runErr error) {
	x := &audit.Exec{Phase: "end", TimedOut: r.TimedOut, OOMKilled: r.OOMKilled, PidsLimit: r.PidsLimitHit,
		WallMS: float64(r.Wall) / 1e6, CPUMS: float64(r.CPU) / 1e6, PeakMemory: r.PeakMemory,
		StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes, Truncated: r.Truncated}
	if r.Signal != 0 {
		x.Signal = unix.SignalName(syscall.Signal(r.Signal))
	} else {
		code := r.ExitCode
		x.ExitCode = &code
	}
	rec := &audit.Record{ID: id + "/end", Sandbox: id, Kind: "exec", Decision: "allow", Exec: x}
	if runErr != nil {
		rec.Decision = "error"
		rec.Error = runErr.Error()
	}
	if err := e.log.Log(rec); err != nil {
		e.lg.Error("audit end record refused", "sandbox", id, "err", err)
	}
}

// initConfig builds the configuration init receives.
func (e *Executor) initConfig(spec *Spec, lim Limits, s *slot) (*initConfig, error) {
	env := []string{"PATH=" + SandboxPath, "HOME=" + e.cfg.Home, "USER=sandbox", "LOGNAME=sandbox"}
	for _, k := range e.cfg.EnvAllow {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	if spec.Proxy != "" {
		np := spec.NoProxy
		if np == "" {
			np = "localhost,127.0.0.1,::1"
		}
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"} {
			env = append(env, k+"="+spec.Proxy, strings.ToLower(k)+"="+spec.Proxy)
		}
		env = append(env, "NO_PROXY="+np, "no_proxy="+np)
	}
	if spec.CABundle != "" {
		for _, k := range CAEnvVars {
			env = append(env, k+"="+SystemCABundle)
		}
	}
	env = dedupeEnv(append(env, spec.Env...))
	hidden := append(append([]string{}, e.cfg.HiddenPaths...), spec.Hidden...)
	// Host paths of the hidden paths, and what they point at.
	hostHidden := append([]string{}, hidden...)
	for _, h := range hidden {
		if r, err := filepath.EvalSymlinks(h); err == nil && r != h {
			hostHidden = append(hostHidden, r)
		}
	}
	if spec.RootFS == "" {
		// Hide what a path points at too, so a symlink cannot be a way around.
		hidden = hostHidden
	}
	ws := spec.WorkspaceTarget
	if ws == "" {
		ws = spec.Workspace
	}
	wsHost := spec.Workspace
	if wsHost != "" {
		// The workspace is a second view of host files: it must not be or lie inside
		// a hidden path, and a hidden path inside it is hidden at its place under the
		// target too. The resolved path is what init mounts.
		var err error
		if wsHost, err = filepath.EvalSymlinks(spec.Workspace); err != nil {
			return nil, fmt.Errorf("sandboxd: spec.workspace %s: %w", spec.Workspace, err)
		}
		for _, h := range hostHidden {
			if within(wsHost, h) {
				return nil, fmt.Errorf("sandboxd: spec.workspace %s is inside hidden path %s", spec.Workspace, h)
			}
			if within(h, wsHost) {
				rel, _ := filepath.Rel(wsHost, h)
				hidden = append(hidden, filepath.Join(ws, rel))
			}
		}
	}
	dir := spec.Dir
	if dir == "" {
		dir = e.cfg.Home
		if spec.Workspace != "" {
			dir = ws
		}
	}
	nproc := 2*(lim.Pids+initPidsOverhead) + 64 // backstop behind pids.max
	var mnt unix.Stat_t
	if err := unix.Stat("/proc/self/ns/mnt", &mnt); err != nil {
		return nil, fmt.Errorf("sandboxd: read own mount namespace: %w", err)
	}
	return &initConfig{
		HostMountNS: [2]uint64{uint64(mnt.Dev), mnt.Ino},
		Hostname:    e.cfg.Hostname, RootFS: spec.RootFS, Workspace: wsHost, WorkspaceTarget: ws,
		CABundle: spec.CABundle, Hidden: hidden, Home: e.cfg.Home, TmpSize: lim.TmpSize, TmpInodes: lim.TmpInodes,
		FreshNet: spec.NetNS == "",
		Exec: execConfig{Argv: spec.Argv, Env: env, Dir: dir, UID: s.uid, GID: s.uid,
			NoFile: lim.NoFile, FSize: lim.FSize, NProc: nproc},
	}, nil
}

// within reports whether path p is base or lies below it.
func within(p, base string) bool {
	p, base = filepath.Clean(p), filepath.Clean(base)
	return p == base || base == "/" || strings.HasPrefix(p, base+"/")
}

func dedupeEnv(env []string) []string {
	idx := map[string]int{}
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// emptyWait bounds how long a killed sandbox's processes may take to leave its
// cgroup before the run is reported as failed.
const emptyWait = 5 * time.Second

type spawned struct {
	pid int
	err error
}

// run spawns init and supervises it until every process of the sandbox is gone.
func (e *Executor) run(ctx context.Context, t0 time.Time, spec *Spec, lim Limits, s *slot, icfg *initConfig, res *Result, lg *slog.Logger) error {
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer cfgW.Close()
	statR, statW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		return err
	}
	defer statR.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return err
	}
	var stdin *os.File
	var stdinW *os.File
	if spec.Stdin != nil {
		if stdin, stdinW, err = os.Pipe(); err != nil {
			return err
		}
	} else if stdin, err = os.Open(os.DevNull); err != nil {
		return err
	}
	childFiles := []*os.File{cfgR, statW, outW, errW, stdin}
	closeChild := func() {
		for _, f := range childFiles {
			f.Close()
		}
	}

	var cgFD *os.File
	if s.cg.v2 {
		if cgFD, err = s.cg.openFD(); err != nil {
			closeChild()
			return err
		}
		defer cgFD.Close()
	}
	var netnsFD *os.File
	if spec.NetNS != "" {
		if netnsFD, err = os.Open(spec.NetNS); err != nil {
			closeChild()
			return fmt.Errorf("sandboxd: netns %s: %w", spec.NetNS, err)
		}
		defer netnsFD.Close()
	}

	started := make(chan spawned, 1)
	exited := make(chan error, 1)
	go func() {
		// This thread forks init: Pdeathsig fires when it exits, so it stays locked
		// and alive until init is reaped, and is discarded afterwards (never
		// unlocked), which also throws away the network namespace it joined.
		runtime.LockOSThread()
		flags := uintptr(unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWCGROUP)
		if netnsFD != nil {
			if err := unix.Setns(int(netnsFD.Fd()), unix.CLONE_NEWNET); err != nil {
				started <- spawned{err: fmt.Errorf("sandboxd: join netns %s: %w", spec.NetNS, err)}
				return
			}
		} else {
			flags |= unix.CLONE_NEWNET
		}
		cmd := &exec.Cmd{
			Path:       e.cfg.Exe,
			Args:       append([]string{e.cfg.Exe}, e.cfg.InitArgs...),
			Env:        []string{envStage + "=" + stageInit},
			Stdin:      stdin,
			Stdout:     outW,
			Stderr:     errW,
			ExtraFiles: []*os.File{cfgR, statW},
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
		exited <- cmd.Wait()
	}()
	sp := <-started
	closeChild()
	if sp.err != nil {
		outR.Close()
		errR.Close()
		if stdinW != nil {
			stdinW.Close()
		}
		return sp.err
	}
	pid := sp.pid
	// killTree kills through the cgroup (every process at once, forks included) and
	// through PID 1, whose death takes its PID namespace with it: either alone ends
	// the tree.
	killTree := func() {
		if err := s.cg.kill(); err != nil {
			lg.Error("cgroup kill failed", "err", err)
		}
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	// emptied makes sure nothing of the sandbox survives init: a process left
	// in the cgroup is an error, never a successful result.
	emptied := func() error {
		if err := s.cg.kill(); err != nil {
			lg.Error("cgroup kill failed", "err", err)
		}
		return s.cg.waitEmpty(emptyWait)
	}

	// Output drains start before init can write anything.
	var wg sync.WaitGroup
	outC := newCapture(spec.Stdout, lim.OutputCap)
	errC := newCapture(spec.Stderr, lim.OutputCap)
	wg.Add(2)
	go func() { defer wg.Done(); outC.drain(outR) }()
	go func() { defer wg.Done(); errC.drain(errR) }()
	if stdinW != nil {
		go func() {
			_, _ = io.Copy(stdinW, spec.Stdin)
			stdinW.Close()
		}()
	}

	// Init builds the filesystem view while a v1 cgroup move runs (the kernel
	// makes the first cgroup migration after a quiet spell wait for an RCU grace
	// period, 5-15 ms here); the command starts only after the go message, which
	// is sent once init is in the cgroup and its OOM score is reset.
	setupErr := func() error {
		if err := json.NewEncoder(cfgW).Encode(icfg); err != nil {
			return fmt.Errorf("sandboxd: send init config: %w", err)
		}
		if !s.cg.v2 {
			if err := s.cg.addProc(pid); err != nil {
				return err
			}
		}
		// Born in (v2) or moved into (v1) the cgroup: check before the command
		// may start.
		if err := s.cg.holds(pid); err != nil {
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
	}()
	if setupErr != nil {
		killTree()
		<-exited
		// Init may have failed first (its setup error is why the pipe broke).
		if ev := readFailure(statR); ev != nil {
			setupErr = fmt.Errorf("sandboxd: sandbox setup: %s (then: %w)", ev.Error, setupErr)
		}
		if err := emptied(); err != nil {
			setupErr = errors.Join(setupErr, err)
		}
		wg.Wait()
		return setupErr
	}

	events := make(chan event, 4)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(statR)
		for sc.Scan() {
			var ev event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				events <- ev
			}
		}
	}()

	timer := time.NewTimer(lim.Timeout)
	defer timer.Stop()
	var final, failure *event
	var ctxErr error
	var initErr error
	initDone := false
	for !initDone || events != nil {
		select {
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			switch ev.Event {
			case "started":
				res.StartLatency = time.Since(t0)
				lg.Info("sandbox started", "create_to_exec", res.StartLatency)
			case "exit":
				evc := ev
				final = &evc
			default:
				evc := ev
				failure = &evc
			}
		case initErr = <-exited:
			initDone = true
			exited = nil
		case <-timer.C:
			res.TimedOut = true
			killTree()
		case <-ctx.Done():
			ctxErr = ctx.Err()
			killTree()
		}
		if ctxErr != nil {
			ctx = context.Background() // stop selecting on it
		}
	}
	// Init is gone, so the namespace is empty; make sure of it, then close output.
	treeErr := emptied()
	wg.Wait()
	res.Stdout, res.StdoutBytes = outC.buf, outC.total
	res.Stderr, res.StderrBytes = errC.buf, errC.total
	res.Truncated = outC.truncated || errC.truncated

	switch {
	case final != nil:
		res.ExitCode, res.Signal = final.Code, final.Signal
	default:
		res.Signal = int(unix.SIGKILL)
		if ws, ok := exitStatus(initErr); ok && !ws.Signaled() && failure == nil {
			res.Signal, res.ExitCode = 0, ws.ExitStatus()
		}
	}
	if treeErr != nil {
		return treeErr
	}
	if ctxErr != nil {
		return ctxErr
	}
	if failure != nil {
		if failure.Event == "exec_error" {
			res.Signal, res.ExitCode = 0, failure.Code
			return &ExecError{Msg: failure.Error}
		}
		if !res.TimedOut {
			return fmt.Errorf("sandboxd: sandbox setup: %s", failure.Error)
		}
	}
	if final == nil && !res.TimedOut {
		return fmt.Errorf("sandboxd: init ended without a status: %v", initErr)
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
