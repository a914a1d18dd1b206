package sandboxd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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
	// rootNS is the user namespace every sandbox's host view is idmapped
	// through, so no host socket is connectable (hostview_linux.go). Its
	// helper process (3-5 ms) runs while the caller goes on setting up.
	rootNS *usernsFuture
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
	return &Executor{cfg: cfg, cgm: cgm, pool: p, log: log, lg: lg, rootNS: startRootUserns()}, nil
}

// Close destroys the idle pool slots.
func (e *Executor) Close() error {
	err := e.pool.close()
	if f, nerr := e.rootNS.get(); nerr == nil {
		f.Close()
	}
	return err
}

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
	if _, err := e.rootNS.get(); err != nil {
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
	icfg := &initConfig{
		HostMountNS: [2]uint64{uint64(mnt.Dev), mnt.Ino},
		Hostname:    e.cfg.Hostname, RootFS: spec.RootFS, Workspace: wsHost, WorkspaceTarget: ws,
		CABundle: spec.CABundle, Hidden: hidden, Home: e.cfg.Home, TmpSize: lim.TmpSize, TmpInodes: lim.TmpInodes,
		FreshNet: spec.NetNS == "",
		Exec: execConfig{Argv: spec.Argv, Env: env, Dir: dir, UID: s.uid, GID: s.uid,
			NoFile: lim.NoFile, FSize: lim.FSize, NProc: nproc},
	}
	src := "/"
	if spec.RootFS != "" {
		// The mount table names real paths.
		var err error
		if src, err = filepath.EvalSymlinks(spec.RootFS); err != nil {
			return nil, fmt.Errorf("sandboxd: spec.rootfs %s: %w", spec.RootFS, err)
		}
	}
	var err error
	if icfg.Mounts, err = viewMounts(src, icfg); err != nil {
		return nil, err
	}
	return icfg, nil
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
