package sandboxd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// init keeps the sandbox init's main goroutine on the main thread (package
// init functions run there, locked): job goroutines drop privileges on the
// threads they lock, and must never do it on the main thread, whose
// credentials are what kill(2) and /proc see as init's. Regression: a job
// that ran on the main thread left init's leader with the sandbox uid and the
// job's audit session, and the timeout that killed the session killed init.
func init() {
	if os.Getenv(envStage) == stageInit {
		runtime.LockOSThread()
	}
}

// IsStage reports whether this process was started as one of the sandbox's
// stages (init, or the files stage init starts). A TestMain or main that can
// be re-executed calls InitMain when it is true.
func IsStage() bool {
	s := os.Getenv(envStage)
	return s == stageInit || s == stageFiles
}

// InitMain runs the sandbox stage the environment marker names and exits. The
// hidden `airlock __sandbox-init` subcommand and the package's TestMain call
// it. It never returns.
func InitMain() { InitMainWith(InitHooks{}) }

// InitHooks are what the binary that runs init gives it beyond sandboxd.
type InitHooks struct {
	// Island makes a rootless init's own network namespace the sandbox's
	// island from inside and returns the islandFDs listeners' files
	// (netns.BuildIsland; PrepareSpec.Island is its spec). nil: this init
	// cannot start a rootless sandbox with an island.
	Island func(spec []byte) ([]*os.File, error)
}

// InitMainWith is InitMain with hooks.
func InitMainWith(h InitHooks) {
	if IsStage() {
		// Started from an open file (/proc/self/fd/N, initexe.go), the
		// process would be named "N" in ps and top.
		_ = os.WriteFile("/proc/self/comm", []byte(InitBinary), 0)
	}
	switch os.Getenv(envStage) {
	case stageInit:
		os.Exit(runInit(h))
	case stageFiles:
		os.Exit(runFilesStage())
	}
	fmt.Fprintln(os.Stderr, "airlock: __sandbox-init is started by the executor only")
	os.Exit(2)
}

// initServer is PID 1 of the sandbox: it builds the filesystem view (config),
// hands the sandbox to its user (start), then starts jobs (exec, files),
// signals them, reaps every process that ends in the sandbox and reports how
// each job ended. Its state moves one way: configured -> ready -> started.
type initServer struct {
	hooks InitHooks
	ch    *channel
	cfg   *initConfig
	fs    *fsState

	// mu is held from a job's setrlimit (process-wide) through its fork, its
	// registration and its started reply, and by the reaper between seeing an
	// exit and unregistering it, and by signal: so a job is registered before
	// its exit can be seen, its started reply goes out before its exit event,
	// and a signal never reaches a pid that was reaped and reused.
	mu      sync.Mutex
	started bool
	failed  error // start failed: nothing more runs
	start   *startRequest
	// execFilter and filesFilter are the seccomp filters of execs and of
	// the files stage, assembled once.
	execFilter, filesFilter seccompFilter
	// jobsTasks is the v1 pids jobs cgroup's tasks file (-1: none).
	jobsTasks int
	// lastCap is the kernel's highest capability (every job drops 0..lastCap
	// from its bounding set).
	lastCap int
	// spare is the next job's thread, made ahead (init_jobs_linux.go).
	spare *jobThread

	jobs   map[int]*initJob    // by pid
	byID   map[string]*initJob // by id, while registered or starting
	forked chan struct{}       // wakes the reaper after a fork
}

type initJob struct {
	id  string
	pid int
}

// fatalSignals are the signals 1-31 Go ends a program on when they are not
// caught: all but SIGKILL and SIGSTOP (not catchable; the kernel drops them
// when they come from inside init's namespace) and the ones Go itself
// ignores or uses (SIGCHLD, SIGURG, SIGWINCH, SIGPROF) or leaves at a
// harmless default (SIGCONT, SIGTSTP, SIGTTIN, SIGTTOU). Catching SIGCHLD
// would wake init once per process that ends.
func fatalSignals() []os.Signal {
	var out []os.Signal
	for sig := unix.Signal(1); sig <= 31; sig++ {
		switch sig {
		case unix.SIGKILL, unix.SIGSTOP, unix.SIGCHLD, unix.SIGURG, unix.SIGWINCH, unix.SIGPROF,
			unix.SIGCONT, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU:
			continue
		}
		out = append(out, sig)
	}
	return out
}

// runInit is PID 1 of the sandbox.
func runInit(h InitHooks) int {
	if os.Getpid() != 1 {
		// Not started by the executor: touch nothing, not even its fds.
		fmt.Fprintf(os.Stderr, "airlock: sandbox init: not PID 1 of a new PID namespace (pid %d): refusing to touch mounts\n", os.Getpid())
		return 2
	}
	if unix.Gettid() != 1 {
		fmt.Fprintln(os.Stderr, "airlock: sandbox init: not on the main thread (InitMain must be called from main)")
		return 2
	}
	if err := awaitMaps(); err != nil {
		fmt.Fprintf(os.Stderr, "airlock: sandbox init: %v\n", err)
		return 1
	}
	// Not dumpable: while a job's thread has dropped to the sandbox uid, code
	// already running in the sandbox as that uid could otherwise open
	// /proc/1/task/TID/mem and write init's (shared, root) memory; ptrace
	// access to a non-dumpable process needs CAP_SYS_PTRACE. execve resets it
	// for the jobs.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "airlock: sandbox init: prctl dumpable: %v\n", err)
		return 1
	}
	// Every signal Go would end init on is caught and dropped: while a job's thread runs
	// as the sandbox uid, the sandbox's code may signal it (tgkill), and Go
	// ends a program on SIGTERM, SIGABRT, SIGILL, SIGTRAP, SIGSYS... A host
	// process that wants init gone sends SIGKILL. Caught, not ignored:
	// ignored dispositions would pass to the jobs through execve. (A fault
	// the kernel raises still crashes init, as it must.)
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, fatalSignals()...)
	go func() {
		for range sigs {
		}
	}()
	ch, err := newChannel(os.NewFile(fdControl, "control"), maxToInit, maxFromInit, "the executor")
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock: sandbox init: %v\n", err)
		return 1
	}
	s := &initServer{hooks: h, ch: ch, jobs: map[int]*initJob{}, byID: map[string]*initJob{}, forked: make(chan struct{}, 1), jobsTasks: -1}
	if err := s.configure(); err != nil {
		fmt.Fprintf(os.Stderr, "airlock: sandbox init: %v\n", err)
		return 1
	}
	go s.reap()
	return s.serve()
}

// configure reads the config (it must be the first message), builds the
// filesystem view and reports ready, or the setup error.
func (s *initServer) configure() error {
	m, fds, err := s.ch.recv()
	if err != nil {
		if !errors.Is(err, io.EOF) {
			s.send(&message{Type: msgSetupError, Seq: 1, Error: err.Error()})
		}
		return err
	}
	err = checkToInit(m, len(fds))
	if err == nil && m.Type != msgConfig {
		err = fmt.Errorf("unexpected %s message before config", m.Type)
	}
	if err == nil && m.Config.JobsCgroup {
		// Kept (close-on-exec) for every job's thread.
		s.jobsTasks, fds[0] = fds[0], -1
	}
	closeFDs(fds)
	var island []int // the rootless island's files, sent with ready
	defer func() { closeFDs(island) }()
	if err == nil {
		s.cfg = m.Config
		if err = checkIsolated(s.cfg.HostMountNS); err == nil {
			island, err = s.buildIsland()
		}
		if err == nil {
			s.fs, err = setupSandbox(s.cfg)
		}
	}
	if err == nil {
		if s.execFilter, err = newSeccompFilter(false); err == nil {
			s.filesFilter, err = newSeccompFilter(true)
		}
	}
	if err == nil {
		s.lastCap, err = capLastCap()
	}
	seq := m.Seq
	if seq == 0 {
		seq = 1
	}
	if err != nil {
		s.send(&message{Type: msgSetupError, Seq: seq, Error: err.Error()})
		return err
	}
	// Every fd init holds is close-on-exec from here on: a job's process gets
	// only the fds its request brought.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		err = fmt.Errorf("close_range: %w", err)
		s.send(&message{Type: msgSetupError, Seq: seq, Error: err.Error()})
		return err
	}
	// The first job's thread, made and moved into the jobs cgroup while the
	// sandbox waits to be started.
	s.mu.Lock()
	s.spareLocked()
	s.mu.Unlock()
	if err := s.ch.send(&message{Type: msgReady, Seq: seq}, island...); err != nil {
		fmt.Fprintf(os.Stderr, "airlock: sandbox init: %v\n", err)
		return err
	}
	return nil
}

// serve handles requests until the executor closes its end, and then returns:
// init exiting ends every process of the sandbox.
func (s *initServer) serve() int {
	for {
		m, fds, err := s.ch.recv()
		if errors.Is(err, io.EOF) {
			return 0
		}
		var bad *badMessage
		if errors.As(err, &bad) {
			// Refused and named; nothing runs.
			if s.send(&message{Type: msgError, Error: err.Error()}) != nil {
				return 1
			}
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "airlock: sandbox init: %v\n", err)
			return 1
		}
		if err := checkToInit(m, len(fds)); err != nil {
			closeFDs(fds)
			if s.send(&message{Type: msgError, Seq: m.Seq, Error: err.Error()}) != nil {
				return 1
			}
			continue
		}
		s.handle(m, fds)
	}
}

// handle dispatches one checked request. It owns fds.
func (s *initServer) handle(m *message, fds []int) {
	refuse := func(err error) {
		closeFDs(fds)
		s.send(&message{Type: msgError, Seq: m.Seq, Error: err.Error()})
	}
	s.mu.Lock()
	started, failed := s.started, s.failed
	s.mu.Unlock()
	switch {
	case m.Type == msgConfig:
		refuse(errors.New("unexpected config message: the sandbox is configured"))
	case failed != nil:
		refuse(fmt.Errorf("unexpected %s message: start failed (%v)", m.Type, failed))
	case m.Type == msgStart && started:
		refuse(errors.New("unexpected start message: the sandbox is started"))
	case m.Type == msgStart:
		err := s.startSandbox(m.Start, fds)
		s.mu.Lock()
		if err != nil {
			s.failed = err
		} else {
			s.started, s.start = true, m.Start
		}
		s.mu.Unlock()
		if err != nil {
			s.send(&message{Type: msgError, Seq: m.Seq, Error: err.Error()})
			return
		}
		s.send(&message{Type: msgOK, Seq: m.Seq})
	case !started:
		refuse(fmt.Errorf("unexpected %s message before start", m.Type))
	case m.Type == msgSignal:
		if err := s.signal(m.Signal); err != nil {
			refuse(err)
			return
		}
		s.send(&message{Type: msgOK, Seq: m.Seq})
	case m.Type == msgExec:
		s.startJob(m.Seq, m.Exec.ID, fds, func(j *jobSpec) { j.exec = m.Exec })
	case m.Type == msgFiles:
		s.startJob(m.Seq, m.Files.ID, fds, func(j *jobSpec) { j.files = &m.Files.filesJob })
	default:
		refuse(fmt.Errorf("unexpected %s message", m.Type))
	}
}

// startSandbox applies a start request: tmpfs sizes, the workspace tree (the
// one fd, closed here), the masks below it.
func (s *initServer) startSandbox(req *startRequest, fds []int) error {
	defer closeFDs(fds)
	if req.TmpSize != s.cfg.TmpSize || req.TmpInodes != s.cfg.TmpInodes {
		if err := s.fs.resizeTmpfs(req.TmpSize, req.TmpInodes); err != nil {
			return err
		}
	}
	wsFD := -1
	switch {
	case req.Workspace && req.Cloned:
		var err error
		if wsFD, err = s.fs.rootlessWorkspaceFD(); err != nil {
			return err
		}
		defer unix.Close(wsFD)
	case req.Workspace:
		wsFD = fds[0]
	}
	if err := s.fs.attachWorkspace(wsFD, req.WorkspaceTarget, req.Hidden); err != nil {
		return err
	}
	workspace := s.cfg.WorkspaceDir
	if req.Workspace {
		workspace = req.WorkspaceTarget
	}
	return writeHomeFiles(s.cfg.Home, workspace, s.cfg.UID, s.cfg.GID, req.HomeFiles)
}

// signal sends a signal to a job's process group.
func (s *initServer) signal(req *signalRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.byID[req.ID]
	if j == nil || j.pid == 0 {
		return fmt.Errorf("job %s is not running", req.ID)
	}
	if err := unix.Kill(-j.pid, unix.Signal(req.Signal)); err != nil {
		return fmt.Errorf("signal %d to job %s: %w", req.Signal, req.ID, err)
	}
	return nil
}

// send writes a message to the executor and logs a failure on stderr: a
// broken channel means the executor is gone, and serve ends at its next read.
func (s *initServer) send(m *message) error {
	err := s.ch.send(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock: sandbox init: %v\n", err)
	}
	return err
}
