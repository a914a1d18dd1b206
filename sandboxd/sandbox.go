package sandboxd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/oplog"
)

// A Sandbox is one long-lived sandbox: init as PID 1 of its namespaces, in
// its cgroup, with its filesystem view, running jobs for its user from Start
// until Destroy. Its methods are safe for concurrent use.
//
// Lifecycle: Prepare (everything that does not depend on the user; the
// daemon's warm pool holds prepared sandboxes) -> Start (id, limits,
// workspace, base environment; once) -> Exec, PutFiles, GetFiles, Usage, any
// number of times and at once -> Destroy (idempotent). When init dies, Done
// closes and every method returns an error wrapping ErrSandboxGone.
type Sandbox struct {
	e    *Executor
	slot *slot
	lg   *slog.Logger
	spec PrepareSpec // defaults applied
	// hostHidden are the hidden host paths and what they resolve to: a
	// workspace must not lie inside one.
	hostHidden []string
	workspace  string // the empty workspace's path, or ""
	// applied are the limits in the cgroup (Start skips rewriting them).
	applied Limits
	// early is Create's workspace tree, made while init starts (nil: none).
	early     chan earlyWorkspace
	earlyUsed bool
	// rootlessWS is the workspace a rootless init clones at config (Create's).
	rootlessWS string
	// initKilled: we killed init (the sandbox is ending), so its exit is
	// expected, not a lost sandbox. Under mu.
	initKilled bool

	ch      *channel
	init    *os.Process
	gone    chan struct{} // closed once init has been reaped
	initErr error         // init's wait result, set before gone closes

	dead       chan struct{} // closed once the control channel is unusable
	deadErr    error         // why; set before dead closes
	readerDone chan struct{}
	stderrDone chan struct{}
	procs      sync.WaitGroup // process supervisors

	mu      sync.Mutex
	state   sandboxState
	seq     uint64
	pending map[uint64]*request
	jobs    map[string]*job
	nextJob int
	id      string
	lim     Limits
	env     []string
	workDir string

	killMu sync.Mutex // one freeze of the cgroup at a time

	destroyOnce sync.Once
	killed      chan struct{} // closed once Kill's phase is over
	killErr     error
	destroyed   chan struct{}
	final       Usage
	destroyErr  error
}

type sandboxState string

const (
	statePrepared  sandboxState = "prepared"
	stateStarting  sandboxState = "starting"
	stateStarted   sandboxState = "started"
	stateFailed    sandboxState = "failed" // Start failed: only Destroy is left
	stateDestroyed sandboxState = "destroyed"
)

// ErrSandboxGone is wrapped by every error a sandbox returns once its init is
// gone: destroyed, or dead on its own (the error says which).
var ErrSandboxGone = errors.New("sandboxd: sandbox is gone")

// earlyWorkspace is a workspace tree made ahead of Start, or why not.
type earlyWorkspace struct {
	path, target string
	ws           *workspaceTree
	err          error
}

// request is a message waiting for init's reply.
type request struct {
	typ   string
	reply chan *message
	job   *job // exec and files requests
}

// job is a process init started for the executor: an exec or a files stage.
type job struct {
	id      string
	started bool
	exit    chan *exitEvent // init's exit event, once
}

// PrepareSpec is what a prepared sandbox is built with. Zero sizes take the
// executor's Config.Limits.
type PrepareSpec struct {
	// NetNS is the network namespace to join (a /run/netns path or
	// /proc/PID/ns/net). Empty gives a fresh namespace with only lo.
	NetNS string
	// CABundle is the merged trust bundle mounted over SystemCABundle; the CA
	// environment variables point at it.
	CABundle string
	// TrustDir is a directory WriteTrustDir built, mounted read-only at
	// SandboxTrustDir; TrustEnv points SSL_CERT_DIR and Java at it.
	TrustDir string
	// Hidden paths are masked in addition to Config.HiddenPaths.
	Hidden []string
	// TmpSize and TmpInodes size each tmpfs (/tmp, $HOME's parent, /var/tmp,
	// /dev/shm, the empty workspace). Start remounts them when its limits
	// differ.
	TmpSize, TmpInodes int64

	// Island, given to a rootless executor, is the spec init hands its
	// island hook (InitHooks.Island) before anything else: init is born in
	// a user and network namespace of its own and makes that namespace the
	// sandbox's island. OnIsland receives the listeners' files the hook
	// returned (the caller serves them and owns them from then on); an error
	// fails the sandbox.
	Island   []byte
	OnIsland func(files []*os.File) error

	// rootFS replaces the host root (Run's Spec.RootFS).
	rootFS string
	// noWorkspace leaves out the empty workspace (Run, when it binds one or
	// has a root of its own, which may lack the mount point).
	noWorkspace bool
}

// StartSpec hands a prepared sandbox to its user.
type StartSpec struct {
	// ID names the sandbox in audit records. Default: the slot id.
	ID string
	// Limits for the sandbox (cgroup, tmpfs sizes) and the defaults of each
	// exec (Timeout, OutputCap). Zero fields take Config.Limits.
	Limits Limits
	// Workspace is a host directory mounted read-write at WorkspaceTarget as
	// an idmapped mount: the sandbox uid and gid stand in for the directory's
	// owner, so the sandbox can write it without any chown on the host, and
	// files it creates belong to the directory's owner on the host. Files of
	// other owners appear as nobody. It is opened once, in the executor: pass
	// /proc/self/fd/N to bind exactly a directory you opened and checked. A
	// filesystem that cannot be idmapped fails Start with an error saying so.
	// Empty: the empty workspace (Config.WorkspaceDir) is the workspace.
	Workspace string
	// WorkspaceTarget is where the workspace appears inside. Default: the
	// Workspace path.
	WorkspaceTarget string
	// Env is "K=V" entries every exec gets, after the allow-listed host
	// variables and the proxy and CA variables (later entries win).
	Env []string
	// DefaultEnv is "K=V" entries set only where nothing above sets K
	// (canary credentials: a platform's real AWS_* win). HomeFiles are
	// written into the fresh $HOME at start (paths relative to it, 0600,
	// owned by the sandbox uid), never replacing or following anything
	// there and never inside the workspace. inspect.CanarySet fills both.
	DefaultEnv []string
	HomeFiles  map[string][]byte
	// Proxy is the proxy URL for HTTP_PROXY, HTTPS_PROXY and ALL_PROXY (both
	// cases); NoProxy is NO_PROXY (both cases), default
	// "localhost,127.0.0.1,::1" when Proxy is set.
	Proxy, NoProxy string
}

// Usage is a sandbox's resource use, from its cgroup (init's share included).
// A counter whose controller is missing reads 0.
type Usage struct {
	CPU        time.Duration // user+system, since the sandbox was prepared
	Memory     int64         // bytes now
	PeakMemory int64         // bytes, highest so far
	Pids       int64         // tasks now
	OOMKills   int64         // processes the OOM killer ended
	// PidsLimitHits counts forks refused at the pids limit.
	PidsLimitHits int64
}

// Prepare builds a sandbox up to the point where it could run commands: init
// is PID 1 in new mount, PID, UTS, IPC and cgroup namespaces joined to
// spec.NetNS, the filesystem view is built (read-only root, tmpfs /tmp, $HOME
// and an empty Config.WorkspaceDir, /proc, /dev, the CA bundle, hidden paths,
// runtime directories hidden), it is in its cgroup with the default limits,
// and it waits for Start. ctx bounds the preparation.
func (e *Executor) Prepare(ctx context.Context, spec PrepareSpec) (*Sandbox, error) {
	return e.prepare(ctx, spec, nil)
}

// prepare is Prepare; with early (Create's start spec) the workspace tree is
// made while init starts, which costs a user namespace helper (3-5 ms).
func (e *Executor) prepare(ctx context.Context, spec PrepareSpec, early *StartSpec) (*Sandbox, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if _, err := e.rootNS.get(); err != nil {
		return nil, err
	}
	if (spec.Island != nil) != (e.cfg.Rootless != nil) || (spec.Island != nil && spec.OnIsland == nil) {
		return nil, errors.New("sandboxd: an island (with OnIsland) is given to a rootless executor, and only to one")
	}
	lim := e.cfg.Limits
	if spec.TmpSize != 0 {
		lim.TmpSize = spec.TmpSize
	}
	if spec.TmpInodes != 0 {
		lim.TmpInodes = spec.TmpInodes
	}
	if early != nil {
		// Create: the cgroup gets the user's limits at once.
		lim.Memory, lim.CPUs, lim.Pids, lim.IO = early.Limits.withDefaults(e.cfg.Limits).cgroupLimits()
	}
	if err := lim.validate(); err != nil {
		return nil, err
	}
	spec.TmpSize, spec.TmpInodes = lim.TmpSize, lim.TmpInodes
	sl, err := e.pool.get()
	if err != nil {
		return nil, err
	}
	s := &Sandbox{e: e, slot: sl, spec: spec, lg: e.lg.With(slotKey, sl.id, uidKey, sl.uid),
		gone: make(chan struct{}), dead: make(chan struct{}), readerDone: make(chan struct{}), stderrDone: make(chan struct{}),
		killed: make(chan struct{}), destroyed: make(chan struct{}), state: statePrepared, pending: map[uint64]*request{}, jobs: map[string]*job{}, id: sl.id}
	s.hostHidden = e.hostHidden(spec.Hidden)
	if early != nil && early.Workspace != "" && e.cfg.Rootless != nil {
		s.rootlessWS = early.Workspace
	} else if early != nil && early.Workspace != "" {
		s.early = make(chan earlyWorkspace, 1)
		go func(path, target string) {
			ws, err := openWorkspace(path, target, sl.uid, s.hostHidden, e.idmaps)
			s.early <- earlyWorkspace{path: path, target: target, ws: ws, err: err}
		}(early.Workspace, early.workspaceTarget())
	}
	if err := s.prepare(ctx, lim); err != nil {
		if _, derr := s.Destroy(context.Background()); derr != nil {
			s.lg.Error("sandbox cleanup failed", oplog.ErrorKey, derr)
		}
		return nil, err
	}
	return s, nil
}

// Create is Prepare and Start; a sandbox that cannot be started is destroyed.
// It overlaps what it can: the cgroup gets ss's limits from the start and the
// workspace is opened while init starts.
func (e *Executor) Create(ctx context.Context, ps PrepareSpec, ss StartSpec) (*Sandbox, error) {
	if err := ss.validate(); err != nil {
		return nil, err
	}
	s, err := e.prepare(ctx, ps, &ss)
	if err != nil {
		return nil, err
	}
	if err := s.Start(ctx, ss); err != nil {
		if _, derr := s.Destroy(context.Background()); derr != nil {
			s.lg.Error("sandbox cleanup failed", oplog.ErrorKey, derr)
		}
		return nil, err
	}
	return s, nil
}

// prepare applies the default limits, spawns init, sends it its config and,
// while it builds the filesystem, makes sure it is in the cgroup.
func (s *Sandbox) prepare(ctx context.Context, lim Limits) error {
	if err := s.applyLimits(lim); err != nil {
		return err
	}
	icfg, err := s.e.initConfig(&s.spec, s.slot.uid)
	if err != nil {
		return err
	}
	s.workspace = icfg.WorkspaceDir
	tasks, err := s.slot.cg.openJobsTasks()
	if err != nil {
		return err
	}
	var fds []int
	if tasks != nil {
		defer tasks.Close()
		icfg.JobsCgroup = true
		fds = []int{int(tasks.Fd())}
	}
	if err := s.spawn(); err != nil {
		return err
	}
	go s.readLoop()
	// In the cgroup before the config: init makes the first job's thread
	// and moves it into the v1 jobs child once configured, and moving init
	// into the sandbox's cgroup moves all its threads (the v1 move overlaps
	// the Go runtime's start in init; the view it builds afterwards takes
	// well under a millisecond).
	if err := s.joinCgroup(); err != nil {
		return err
	}
	if err := s.rootlessConfig(icfg); err != nil {
		return err
	}
	r, err := s.send(&message{Type: msgConfig, Config: icfg}, fds...)
	if err != nil {
		return err
	}
	m, err := s.await(ctx, r)
	if err != nil {
		return err
	}
	if m.Type != msgReady {
		return fmt.Errorf("sandboxd: sandbox setup: %s", m.Error)
	}
	return s.takeIsland(m.fds)
}

// joinCgroup makes sure init is in the sandbox's cgroup with a neutral OOM
// score before it is configured. Init's Go runtime starts while a v1 cgroup
// move runs (the kernel makes the first cgroup migration after a quiet
// spell wait for an RCU grace period, 5-15 ms).
func (s *Sandbox) joinCgroup() error {
	pid := s.init.Pid
	if s.e.cfg.Rootless != nil {
		// Born in a delegated v2 cgroup, or none; init's oom score is the
		// user's own (lowering it would need a capability).
		return s.slot.cg.holds(pid)
	}
	if !s.slot.cg.v2 {
		if err := s.slot.cg.addProc(pid); err != nil {
			return err
		}
	}
	// Born in (v2) or moved into (v1) the cgroup: check before any job may
	// start.
	if err := s.slot.cg.holds(pid); err != nil {
		return err
	}
	// Never let the sandbox inherit an OOM-immune score.
	if err := writeFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", "0"); err != nil {
		return fmt.Errorf("sandboxd: reset oom_score_adj: %w", err)
	}
	return nil
}

// Start hands a prepared sandbox to its user: its id (audit records), limits
// (cgroup, and the tmpfs sizes remounted if they differ), the workspace and
// the base environment of every exec. Start may be called once; after it
// fails only Destroy is left.
func (s *Sandbox) Start(ctx context.Context, spec StartSpec) error {
	s.mu.Lock()
	if s.state != statePrepared {
		st := s.state
		s.mu.Unlock()
		return fmt.Errorf("sandboxd: start: the sandbox is %s, want prepared", st)
	}
	s.state = stateStarting
	s.mu.Unlock()
	err := s.start(ctx, spec)
	s.mu.Lock()
	if s.state == stateStarting {
		s.state = stateStarted
		if err != nil {
			s.state = stateFailed
		}
	}
	s.mu.Unlock()
	return err
}

func (s *Sandbox) start(ctx context.Context, spec StartSpec) error {
	if err := spec.validate(); err != nil {
		return err
	}
	lim := spec.Limits.withDefaults(s.e.cfg.Limits)
	if err := lim.validate(); err != nil {
		return err
	}
	if !lim.cgroupEqual(s.applied) {
		if err := s.applyLimits(lim); err != nil {
			return err
		}
	}
	req := &startRequest{TmpSize: lim.TmpSize, TmpInodes: lim.TmpInodes, NoFile: lim.NoFile, FSize: lim.FSize,
		NProc: s.nproc(lim), HomeFiles: spec.HomeFiles}
	workDir := s.e.cfg.Home
	if s.workspace != "" {
		workDir = s.workspace
	}
	var fds []int
	if spec.Workspace != "" && s.e.cfg.Rootless != nil {
		target := spec.workspaceTarget()
		masks, err := s.rootlessWorkspace(spec.Workspace, target)
		if err != nil {
			return err
		}
		req.Workspace, req.Cloned, req.WorkspaceTarget, req.Hidden = true, true, target, masks
		workDir = target
	} else if spec.Workspace != "" {
		target := spec.workspaceTarget()
		ws, err := s.openWorkspace(spec.Workspace, target)
		if err != nil {
			return err
		}
		defer closeFDs([]int{ws.fd})
		req.Workspace, req.WorkspaceTarget, req.Hidden = true, target, ws.masks
		fds = []int{ws.fd}
		workDir = target
	}
	r, err := s.send(&message{Type: msgStart, Start: req}, fds...)
	if err != nil {
		return err
	}
	m, err := s.await(ctx, r)
	if err != nil {
		return err
	}
	if m.Type != msgOK {
		return fmt.Errorf("sandboxd: start: %s", m.Error)
	}
	s.mu.Lock()
	if spec.ID != "" {
		s.id = spec.ID
	}
	s.lim, s.env, s.workDir = lim, s.e.baseEnv(&spec, s.spec.CABundle != "", s.spec.TrustDir != ""), workDir
	s.mu.Unlock()
	return nil
}

// nproc is the jobs' RLIMIT_NPROC. The sandbox uid is its own, so it counts
// exactly the sandbox's tasks. Where its jobs share a pids cgroup with init
// (v2), it is the pids limit itself, which leaves init the initPidsOverhead
// tasks of pids.max for its threads; with a v1 jobs child, the child's
// pids.max binds and this is a backstop.
func (s *Sandbox) nproc(lim Limits) int64 {
	if r := s.e.cfg.Rootless; r != nil && !r.subordinate() {
		return userTasks(r.UID) + lim.Pids
	}
	if s.slot.cg.jobs != "" {
		return 2*(lim.Pids+initPidsOverhead) + 64
	}
	return lim.Pids
}

// MaxPids is the largest Limits.Pids this host can give a sandbox: the
// kernel's pid_max (no more tasks can exist at all), and what keeps nproc's
// RLIMIT_NPROC (its larger, v1 form) within the hard limit this process
// passes on: a job cannot raise its own.
func MaxPids() int64 {
	bound := int64(math.MaxInt64)
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 {
			bound = n
		}
	}
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NPROC, &rl) == nil && rl.Max != unix.RLIM_INFINITY && rl.Max < math.MaxInt64 {
		bound = min(bound, (int64(rl.Max)-64)/2-initPidsOverhead)
	}
	return max(bound, 1)
}

// applyLimits writes lim into the cgroup.
func (s *Sandbox) applyLimits(lim Limits) error {
	warns, err := s.slot.cg.apply(lim)
	for _, w := range warns {
		s.lg.Warn("cgroup limit weakened", "reason", w)
	}
	if err == nil {
		s.applied = lim
	}
	return err
}

// openWorkspace returns the workspace tree for path at target: Create's,
// made while init started, or a new one.
func (s *Sandbox) openWorkspace(path, target string) (*workspaceTree, error) {
	s.mu.Lock()
	take := s.early != nil && !s.earlyUsed
	s.earlyUsed = true
	s.mu.Unlock()
	if take {
		ew := <-s.early
		if ew.path == path && ew.target == target {
			return ew.ws, ew.err
		}
		if ew.ws != nil {
			closeFDs([]int{ew.ws.fd})
		}
	}
	return openWorkspace(path, target, s.slot.uid, s.hostHidden, s.e.idmaps)
}

// ID is the sandbox's id: StartSpec.ID, or the slot id.
func (s *Sandbox) ID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// UID is the sandbox's uid (and gid).
func (s *Sandbox) UID() int { return s.slot.uid }

// WorkDir is an exec's default working directory: the workspace target, the
// empty workspace, or $HOME.
func (s *Sandbox) WorkDir() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.workDir
}

// Done is closed when init is gone (destroyed, or died).
func (s *Sandbox) Done() <-chan struct{} { return s.gone }

// Usage reads the sandbox's cgroup now (after Kill or Destroy: its final
// usage).
func (s *Sandbox) Usage() (Usage, error) {
	select {
	case <-s.killed:
		return s.final, nil
	default:
	}
	return s.slot.cg.usage()
}

// Kill kills every process of the sandbox and returns once none of them can
// run another instruction, with the final usage: what a caller must know
// before it may say the sandbox has ended. The rest of the destruction (init's
// exit, which tears down its address space and mount namespace and takes
// 5-15 ms of kernel time, the cgroup and the uid slot) goes on in the
// background; Destroy waits for it. Every running exec has its result when
// Kill returns. ctx bounds only the caller's wait.
func (s *Sandbox) Kill(ctx context.Context) (Usage, error) {
	s.destroyOnce.Do(func() { go s.destroy() })
	select {
	case <-s.killed:
		return s.final, s.killErr
	case <-ctx.Done():
		return Usage{}, ctx.Err()
	}
}

// Destroy kills every process of the sandbox (Kill), waits for the cgroup to
// be empty, removes it (the mounts go with init's mount namespace) and
// releases the uid slot, and returns the final usage. It is idempotent and
// safe to call at once with anything else; every exec's Wait then returns an
// error wrapping ErrSandboxGone. ctx bounds only the caller's wait: the
// destruction goes on, bounded by its own timeouts.
func (s *Sandbox) Destroy(ctx context.Context) (Usage, error) {
	s.destroyOnce.Do(func() { go s.destroy() })
	select {
	case <-s.destroyed:
		return s.final, s.destroyErr
	case <-ctx.Done():
		return Usage{}, ctx.Err()
	}
}

// destroy is Kill's phase, then the teardown.
func (s *Sandbox) destroy() {
	defer close(s.destroyed)
	s.mu.Lock()
	s.state = stateDestroyed
	drain := s.early != nil && !s.earlyUsed
	s.earlyUsed = true
	s.mu.Unlock()
	if drain {
		if ew := <-s.early; ew.ws != nil {
			closeFDs([]int{ew.ws.fd})
		}
	}
	s.killErr = s.killPhase()
	close(s.killed)
	errs := []error{s.killErr}
	if s.init != nil && s.killErr == nil {
		errs = append(errs, s.waitGone())
	}
	if s.ch != nil {
		s.ch.close()
		<-s.readerDone
		<-s.stderrDone
	}
	if err := s.slot.destroy(); err != nil {
		errs = append(errs, err)
	}
	s.destroyErr = errors.Join(errs...)
	if s.destroyErr != nil {
		s.lg.Error("sandbox destroy failed", oplog.ErrorKey, s.destroyErr)
	}
}

// killPhase kills every process and settles the execs and the final usage.
//
// Only init's descendants can be in the cgroup (without init it is empty),
// all in its PID namespace: none can make another (seccomp). Init gets
// SIGKILL first: from then on it can fork nothing (the kernel refuses a fork
// to a task with a fatal signal pending). The kernel would kill the rest of
// the namespace only once init's address space is torn down, milliseconds
// later, so when anything but init is left the cgroup is killed at once
// (every process, forks included; a v1 freeze-kill costs ~5 ms). A process
// with SIGKILL delivered never returns to user space: from here on nothing
// of the sandbox runs.
func (s *Sandbox) killPhase() error {
	var err error
	if s.init != nil {
		s.killInit()
		others, lerr := s.othersThanInit()
		if others || lerr != nil {
			s.killAll()
		}
		if lerr != nil {
			// Not known to be dead: wait until it is gone, as a whole.
			err = s.waitGone()
		}
	}
	s.fail(fmt.Errorf("%w: destroyed", ErrSandboxGone))
	// Every process is dead, so each exec's output ends; a live writer that
	// blocks is not waited for past emptyWait.
	waited := make(chan struct{})
	go func() { s.procs.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(emptyWait):
		s.lg.Error("exec output still being written after the sandbox was destroyed")
	}
	u, uerr := s.slot.cg.usage()
	if uerr != nil {
		s.lg.Error("cgroup counters unreadable", oplog.ErrorKey, uerr)
	}
	u.Pids = 0 // the dying tasks still count until they are reaped
	s.final = u
	return err
}

// waitGone waits until init is reaped and the cgroup is empty, each for at
// most emptyWait.
func (s *Sandbox) waitGone() error {
	var errs []error
	select {
	case <-s.gone:
	case <-time.After(emptyWait):
		errs = append(errs, fmt.Errorf("sandboxd: init (pid %d) still there %s after SIGKILL", s.init.Pid, emptyWait))
	}
	if err := s.slot.cg.waitEmpty(emptyWait); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// othersThanInit reports whether the cgroup holds any process but init.
func (s *Sandbox) othersThanInit() (bool, error) {
	ps, err := s.slot.cg.pids()
	for _, p := range ps {
		if p != s.init.Pid {
			return true, err
		}
	}
	return false, err
}

// killAll kills every process of the sandbox: through the cgroup (every
// process at once, forks included) and init, whose death takes its PID
// namespace with it. Either alone ends the sandbox.
func (s *Sandbox) killAll() {
	s.killMu.Lock()
	if err := s.slot.cg.kill(); err != nil {
		s.lg.Error("cgroup kill failed", oplog.ErrorKey, err)
	}
	s.killMu.Unlock()
	s.killInit()
}

// killInit kills init, and with it its PID namespace: every process of the
// sandbox.
func (s *Sandbox) killInit() {
	s.mu.Lock()
	s.initKilled = true
	s.mu.Unlock()
	if s.init != nil {
		_ = s.init.Kill() // a pidfd: never another process
	}
}

// fail marks the control channel unusable, once, with why.
func (s *Sandbox) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deadErr == nil {
		s.deadErr = err
		close(s.dead)
	}
}

func (s *Sandbox) deadError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadErr
}

// send sends a request and registers it for init's reply. j is the job an
// exec or files request starts.
func (s *Sandbox) send(m *message, fds ...int) (*request, error) {
	return s.sendJob(m, nil, fds...)
}

func (s *Sandbox) sendJob(m *message, j *job, fds ...int) (*request, error) {
	s.mu.Lock()
	if s.deadErr != nil {
		err := s.deadErr
		s.mu.Unlock()
		return nil, err
	}
	s.seq++
	m.Seq = s.seq
	r := &request{typ: m.Type, reply: make(chan *message, 1), job: j}
	s.pending[m.Seq] = r
	if j != nil {
		s.jobs[j.id] = j
	}
	s.mu.Unlock()
	if err := s.ch.send(m, fds...); err != nil {
		s.mu.Lock()
		delete(s.pending, m.Seq)
		if j != nil {
			delete(s.jobs, j.id)
		}
		s.mu.Unlock()
		return nil, fmt.Errorf("sandboxd: %w", err)
	}
	return r, nil
}

// await waits for the reply to r, for the channel to die, or for ctx.
func (s *Sandbox) await(ctx context.Context, r *request) (*message, error) {
	select {
	case m := <-r.reply:
		return m, nil
	case <-s.dead:
		select {
		case m := <-r.reply:
			return m, nil
		default:
		}
		return nil, s.deadError()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// replies lists the reply types each request may get.
var replies = map[string][]string{
	msgConfig: {msgReady, msgSetupError, msgError},
	msgStart:  {msgOK, msgError},
	msgExec:   {msgStarted, msgExecError, msgError},
	msgFiles:  {msgStarted, msgError},
	msgSignal: {msgOK, msgError},
}

// readLoop reads init's messages until the channel ends. A message that
// breaks the protocol kills the sandbox: init is not doing what it must.
func (s *Sandbox) readLoop() {
	defer close(s.readerDone)
	for {
		m, fds, err := s.ch.recv()
		if err == nil {
			err = checkFromInit(m, len(fds))
			if err == nil && m.Type == msgReady && len(fds) > 0 {
				m.fds, fds = fds, nil
			}
			closeFDs(fds)
		}
		if err == nil {
			err = s.deliver(m)
		}
		if errors.Is(err, io.EOF) {
			s.initExited()
			return
		}
		if err != nil {
			err = fmt.Errorf("%w: init broke the control protocol: %v", ErrSandboxGone, err)
			s.lg.Error("sandbox killed", oplog.ErrorKey, err)
			s.killAll()
			s.fail(err)
			return
		}
	}
}

// initExited records why the channel ended: destroyed, or init died.
func (s *Sandbox) initExited() {
	s.mu.Lock()
	destroyed := s.state == stateDestroyed || s.initKilled
	s.mu.Unlock()
	if destroyed {
		s.fail(fmt.Errorf("%w: destroyed", ErrSandboxGone))
		return
	}
	select {
	case <-s.gone:
	case <-time.After(time.Second):
	}
	err := fmt.Errorf("%w: init exited unexpectedly", ErrSandboxGone)
	select {
	case <-s.gone:
		err = fmt.Errorf("%w: init exited unexpectedly (%v)", ErrSandboxGone, s.initErr)
	default:
	}
	s.lg.Error("sandbox lost", oplog.ErrorKey, err)
	s.fail(err)
}

// deliver hands a checked message to whoever waits for it.
func (s *Sandbox) deliver(m *message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.Type == msgExit {
		j := s.jobs[m.Exit.ID]
		if j == nil || !j.started {
			return fmt.Errorf("exit event for job %q, which is not running", m.Exit.ID)
		}
		delete(s.jobs, j.id)
		j.exit <- m.Exit
		return nil
	}
	if m.Seq == 0 {
		return fmt.Errorf("init refused a message: %s", m.Error)
	}
	r := s.pending[m.Seq]
	if r == nil {
		return fmt.Errorf("%s reply to request %d, which is not pending", m.Type, m.Seq)
	}
	ok := false
	for _, t := range replies[r.typ] {
		ok = ok || t == m.Type
	}
	if !ok {
		return fmt.Errorf("%s reply to a %s request", m.Type, r.typ)
	}
	delete(s.pending, m.Seq)
	if r.job != nil {
		if m.Type == msgStarted {
			r.job.started = true
		} else {
			delete(s.jobs, r.job.id)
		}
	}
	r.reply <- m
	return nil
}

// newJob makes the next job of kind ("x" exec, "f" files).
func (s *Sandbox) newJob(kind string) *job {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextJob++
	return &job{id: kind + strconv.Itoa(s.nextJob), exit: make(chan *exitEvent, 1)}
}

// pidsReserve is how many tasks below a pids limit it shares with its jobs
// (v2) init must be for a job to start: init makes a thread for it, and a Go
// program whose thread cannot be made ends (the sandbox with it).
const pidsReserve = 4

// ErrPidsLimit is wrapped by the error of an exec or files operation refused
// because the sandbox is at its pids limit.
var ErrPidsLimit = errors.New("sandboxd: the sandbox is at its pids limit")

// pidsRoom refuses a job while the sandbox's jobs are at their pids limit (a
// fork bomb of its own filled it): it could not fork.
func (s *Sandbox) pidsRoom() error {
	cur, max, reserve, ok := s.slot.cg.jobsPids()
	if ok && cur+reserve > max {
		return fmt.Errorf("%w (%d of %d tasks): nothing can start until some end", ErrPidsLimit, cur, max)
	}
	return nil
}

// settings returns the sandbox's settings for a job, or why it cannot run
// one. When it can, the job is counted in s.procs (Destroy waits for them
// all): the caller calls s.procs.Done when the job is over.
func (s *Sandbox) settings() (id string, lim Limits, env []string, workDir string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.deadErr != nil:
		err = s.deadErr
	case s.state != stateStarted:
		err = fmt.Errorf("sandboxd: the sandbox is %s, want started", s.state)
	default:
		s.procs.Add(1)
	}
	return s.id, s.lim, s.env, s.workDir, err
}

func (s *PrepareSpec) validate() error {
	for _, p := range []struct{ name, v string }{{"netns", s.NetNS}, {"ca_bundle", s.CABundle}, {"trust_dir", s.TrustDir}, {"rootfs", s.rootFS}} {
		if p.v != "" && !filepath.IsAbs(p.v) {
			return fmt.Errorf("sandboxd: prepare.%s %q: want an absolute path", p.name, p.v)
		}
	}
	for _, h := range s.Hidden {
		if !filepath.IsAbs(h) {
			return fmt.Errorf("sandboxd: prepare.hidden %q: want an absolute path", h)
		}
	}
	if s.TmpSize < 0 || s.TmpInodes < 0 {
		return fmt.Errorf("sandboxd: prepare.tmp_size %d tmp_inodes %d: want >= 0", s.TmpSize, s.TmpInodes)
	}
	return nil
}

func (s *StartSpec) workspaceTarget() string {
	if s.WorkspaceTarget != "" {
		return s.WorkspaceTarget
	}
	return s.Workspace
}

func (s *StartSpec) validate() error {
	for _, p := range []struct{ name, v string }{{"workspace", s.Workspace}, {"workspace_target", s.WorkspaceTarget}} {
		if p.v != "" && !filepath.IsAbs(p.v) {
			return fmt.Errorf("sandboxd: start.%s %q: want an absolute path", p.name, p.v)
		}
	}
	if s.WorkspaceTarget != "" && s.Workspace == "" {
		return errors.New("sandboxd: start.workspace_target without a workspace")
	}
	if len(s.ID) > 256 {
		return fmt.Errorf("sandboxd: start.id: %d bytes, want at most 256", len(s.ID))
	}
	for _, e := range append(append([]string(nil), s.Env...), s.DefaultEnv...) {
		if i := indexByte(e, '='); i <= 0 {
			return fmt.Errorf("sandboxd: start.env %q: want KEY=VALUE", e)
		}
	}
	if err := checkHomeFiles(s.HomeFiles); err != nil {
		return fmt.Errorf("sandboxd: start.home_files: %w", err)
	}
	return nil
}
