package sandboxd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/oplog"
)

// emptyWait bounds how long a killed sandbox's processes may take to leave its
// cgroup before the sandbox is reported as failed.
const emptyWait = 5 * time.Second

// Run runs spec to completion in a sandbox of its own: Create, one exec (when
// the command exits, every process it left behind is killed), Destroy. The
// returned error is non-nil when the sandbox could not be built or the audit
// start record could not be written (nothing ran), when ctx ended (the tree
// was killed; the Result is still returned), or with an *ExecError when the
// command could not be executed (the Result says 127 or 126).
func (e *Executor) Run(ctx context.Context, spec Spec) (*Result, error) {
	t0 := time.Now()
	if err := spec.validate(); err != nil {
		return nil, err
	}
	lim := spec.Limits.withDefaults(e.cfg.Limits)
	if err := lim.validate(); err != nil {
		return nil, err
	}
	sb, err := e.Create(ctx,
		PrepareSpec{NetNS: spec.NetNS, CABundle: spec.CABundle, TrustDir: spec.TrustDir, Hidden: spec.Hidden, TmpSize: lim.TmpSize, TmpInodes: lim.TmpInodes,
			Island: spec.Island, OnIsland: spec.OnIsland, rootFS: spec.RootFS, noWorkspace: spec.Workspace != "" || spec.RootFS != ""},
		StartSpec{ID: spec.ID, Limits: lim, Workspace: spec.Workspace, WorkspaceTarget: spec.WorkspaceTarget, Env: spec.Env,
			DefaultEnv: spec.DefaultEnv, HomeFiles: spec.HomeFiles, Proxy: spec.Proxy, NoProxy: spec.NoProxy})
	if err != nil {
		return nil, err
	}
	id := sb.ID()
	res := &Result{ExecResult: ExecResult{ID: id}, UID: sb.UID()}
	lg := e.lg.With(oplog.SandboxKey, id, uidKey, res.UID)
	if err := e.log.Log(&audit.Record{ID: id + "/start", Sandbox: id, Kind: audit.KindExec, Decision: audit.DecisionAllow,
		Exec: &audit.Exec{Phase: "start", Argv: spec.Argv}}); err != nil {
		e.destroyRun(sb, lg)
		return nil, fmt.Errorf("sandboxd: audit start record refused, not running: %w", err)
	}
	runErr := e.runOnce(ctx, t0, sb, &spec, lim, res, lg)
	u, treeErr := sb.Destroy(context.Background())
	res.Wall = time.Since(t0)
	res.OOMKilled = u.OOMKills > 0
	res.PidsLimitHit = u.PidsLimitHits > 0
	res.PeakMemory = u.PeakMemory
	res.CPU = u.CPU
	if treeErr != nil {
		runErr = treeErr // a process left in the cgroup is an error, never a result
	}
	e.auditEnd(id, res, runErr)
	// A command that could not be executed is the command's outcome (127 or
	// 126, its stderr says why), not a failure of the sandbox.
	var ee *ExecError
	lvl := slog.LevelInfo
	if runErr != nil && !errors.As(runErr, &ee) {
		lvl = slog.LevelError
	}
	lg.Log(ctx, lvl, "sandbox finished", "exit", res.ExitStatus(), "timed_out", res.TimedOut,
		"oom", res.OOMKilled, "wall", res.Wall, oplog.ErrorKey, runErr)
	if runErr != nil && !errors.As(runErr, &ee) && !errors.Is(runErr, context.Canceled) && !errors.Is(runErr, context.DeadlineExceeded) {
		return nil, runErr
	}
	return res, runErr
}

// runOnce runs the command and fills res from how it ended.
func (e *Executor) runOnce(ctx context.Context, t0 time.Time, sb *Sandbox, spec *Spec, lim Limits, res *Result, lg *slog.Logger) error {
	dir := spec.Dir
	if dir == "" {
		dir = sb.WorkDir() // the bound workspace, or the empty one
	}
	p, err := sb.exec(ctx, ExecSpec{Argv: spec.Argv, Dir: dir, Stdin: spec.Stdin, Stdout: spec.Stdout, Stderr: spec.Stderr,
		Timeout: lim.Timeout, OutputCap: lim.OutputCap}, execOptions{onExit: sb.killInit})
	if p == nil {
		return err
	}
	xr, werr := p.Wait()
	if err == nil {
		err = werr
		res.StartLatency = p.started.Sub(t0)
		lg.Info("sandbox started", "create_to_exec", res.StartLatency)
	}
	id := res.ID
	res.ExecResult = *xr // Run sets the cgroup's Wall, CPU, PeakMemory and OOMKilled after
	res.ID = id
	return err
}

func (e *Executor) destroyRun(sb *Sandbox, lg *slog.Logger) {
	if _, err := sb.Destroy(context.Background()); err != nil {
		lg.Error("sandbox cleanup failed", oplog.ErrorKey, err)
	}
}

func (e *Executor) auditEnd(id string, r *Result, runErr error) {
	if err := e.log.Log(endRecord(id+"/end", id, &r.ExecResult, r.PidsLimitHit, runErr)); err != nil {
		e.lg.Error("audit end record refused", oplog.SandboxKey, id, oplog.ErrorKey, err)
	}
}
