package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/oplog"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/sandboxd"
	"github.com/airlock-dev/airlock/secrets"
)

// endTimeout bounds the destruction of one sandbox (its executor sandbox,
// then its namespace).
const endTimeout = 30 * time.Second

// admit refuses a new sandbox while the daemon cannot take one: stopping,
// the audit log refusing records or its filesystem low on space, no
// executor.
func (d *Daemon) admit() *api.Error {
	if d.stopping.Load() {
		return apiErr(api.CodeUnavailable, "", "the daemon is stopping")
	}
	if d.exe == nil {
		return apiErr(api.CodeUnavailable, "", "this airlock has no executor for sandboxes")
	}
	if err := d.audit.Err(); err != nil {
		return apiErr(api.CodeUnavailable, "", "the audit log refuses records: %v", err)
	}
	if err := d.checkFreeSpace(); err != nil {
		return apiErr(api.CodeUnavailable, "", "%v", err)
	}
	return nil
}

// createSandbox makes a running sandbox for c: its namespace served, its
// init started with the request's id, limits, workspace and environment.
// It is audited (kind sandbox, reason created) before anything is built.
func (d *Daemon) createSandbox(ctx context.Context, c caller, p *createParams) (*sandbox, *api.Error) {
	if e := d.admit(); e != nil {
		return nil, e
	}
	sc := d.cfg.Sandbox
	bk := bookingOf(p.limits)
	if e := d.reg.reserve(c.uid, sc.MaxSandboxes, sc.MaxSandboxesPerOwner, c.root(), bk, d.callerCeiling()); e != nil {
		return nil, e
	}
	added := false
	defer func() {
		if !added {
			d.reg.unreserve(c.uid, bk)
		}
	}()
	var ws *os.File
	if p.workspace != "" {
		var e *api.Error
		if ws, e = openWorkspace(p.workspace, c, d.hiddenNamed); e != nil {
			return nil, e
		}
		defer ws.Close()
	}
	id, err := d.newSandboxID()
	if err != nil {
		return nil, apiErr(api.CodeInternal, "", "sandbox id: %v", err)
	}
	if e := d.attachBindings(id, c, p); e != nil {
		return nil, e
	}
	sb := newSandbox(id, c.uid, p, time.Now())
	sb.acct = d.acct.open(id, c.uid)
	// Its owner reads its recent records back (events ?history=true).
	d.tap.Keep(id, 0, 0) // audit.DefaultHistoryRecords, DefaultHistoryBytes
	if err := d.audit.Log(d.lifecycleRecord(sb, ReasonCreated, nil)); err != nil {
		if d.secrets != nil {
			d.secrets.Forget(id)
		}
		d.acct.close(id)
		d.tap.Forget(id)
		return nil, apiErr(api.CodeUnavailable, "", "the audit log refused the sandbox's record: %v", err)
	}
	b, err := d.build(ctx, sb, ws)
	if err != nil {
		d.log.Error("create sandbox", oplog.SandboxKey, id, oplog.ErrorKey, err)
		if d.secrets != nil {
			d.secrets.Forget(id)
		}
		final := api.Usage{}
		sb.endReason = ReasonFailed
		if lerr := d.audit.Log(d.lifecycleRecord(sb, ReasonFailed, &final)); lerr != nil {
			d.log.Error("audit sandbox end", oplog.SandboxKey, id, oplog.ErrorKey, lerr)
		}
		d.acct.close(id)
		d.tap.Forget(id)
		d.metrics.ended.WithLabelValues(ReasonFailed).Inc()
		if errors.Is(err, context.Canceled) {
			return nil, apiErr(api.CodeUnavailable, "", "create sandbox: %v", err)
		}
		if e := refusedLimit(err); e != nil {
			return nil, e
		}
		return nil, apiErr(api.CodeInternal, "", "create sandbox: %v", err)
	}
	sb.box, sb.workDir = b, b.WorkDir()
	d.reg.add(sb)
	added = true
	d.metrics.created.Inc()
	sb.armTimers(func(reason string) { d.endSandbox(sb, reason) })
	go d.monitor(sb)
	return sb, nil
}

// refusedLimit is the 400 naming the limit the kernel refused to write
// into the sandbox's cgroup, or nil for any other error.
func refusedLimit(err error) *api.Error {
	var le *sandboxd.LimitError
	if !errors.As(err, &le) {
		return nil
	}
	why := "out of the kernel's range"
	if errors.Is(le.Err, syscall.EBUSY) {
		why = "below what the sandbox's init already uses"
	}
	return apiErr(api.CodeInvalidField, "limits."+le.Limit, "limits.%s: the kernel refused %s for %s: %s", le.Limit, le.Value, filepath.Base(le.File), why)
}

// callerCeiling is api.caller_limits with its defaults: memory the host's,
// pids a quarter of pid_max, cpus none.
func (d *Daemon) callerCeiling() booking {
	cl := d.cfg.API.CallerLimits
	c := booking{memory: int64(cl.Memory), cpus: cl.CPUs, pids: cl.Pids}
	if c.memory == 0 {
		c.memory = d.host.memory
	}
	if c.pids == 0 {
		c.pids = d.host.pidMax / 4
	}
	return c
}

// build gives sb its namespace and executor sandbox: a pooled pair when one
// is ready, else both made now.
func (d *Daemon) build(ctx context.Context, sb *sandbox, ws *os.File) (box, error) {
	psb := policy.Sandbox{ID: sb.id, Labels: sb.labels}
	psb.Mode, psb.Allow = policy.Mode(sb.params.mode), sb.params.allowList
	ss := startSpec{ID: sb.id, Limits: sb.params.limits, Env: append([]string(nil), sb.params.env...), Proxy: d.proxyURL}
	var ph map[string]string
	if d.secrets != nil {
		var err error
		if ph, err = d.secrets.Placeholders(secrets.Sandbox{ID: psb.ID, Labels: psb.Labels}); err != nil {
			return nil, err
		}
		for k, v := range ph {
			ss.Env = append(ss.Env, k+"="+v)
		}
	}
	ss.DefaultEnv, ss.HomeFiles = d.canaryPlant(sb.id) // inspect.go; the caller's and platform's values win
	ss.HomeFiles = withAWSFile(ss.HomeFiles, ph)
	if ws != nil {
		ss.Workspace, ss.WorkspaceTarget = fdPath(ws), sb.params.workspace
	}
	if pb := d.pool.take(); pb != nil {
		// Init is started while the namespace is served: neither needs the
		// other, and nothing runs in the sandbox before create returns.
		started := make(chan error, 1)
		go func() { started <- pb.box.Start(ctx, ss) }()
		_, nerr := d.net.CreateFrom(ctx, psb, pb.net)
		serr := <-started
		if nerr != nil {
			pb.discard(d.log)
			return nil, fmt.Errorf("sandbox network: %w", nerr)
		}
		if serr != nil {
			d.undoBuild(sb.id, pb.box)
			return nil, serr
		}
		d.metrics.fromPool.Inc()
		return pb.box, nil
	}
	if d.rootless != nil {
		return d.buildRootless(ctx, psb, ss)
	}
	ns, err := d.net.Create(ctx, psb)
	if err != nil {
		return nil, fmt.Errorf("sandbox network: %w", err)
	}
	b, err := d.exe.Create(ctx, d.prepareSpec(ns.Path), ss)
	if err != nil {
		d.undoBuild(sb.id, nil)
		return nil, err
	}
	return b, nil
}

// undoBuild destroys what a failed build made.
func (d *Daemon) undoBuild(id string, b box) {
	ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
	defer cancel()
	if b != nil {
		if _, err := b.Destroy(ctx); err != nil {
			d.log.Error("destroy sandbox", oplog.SandboxKey, id, oplog.ErrorKey, err)
		}
	}
	if err := d.net.Teardown(ctx, id); err != nil {
		d.log.Error("teardown", oplog.SandboxKey, id, oplog.ErrorKey, err)
	}
}

// prepareSpec is what every sandbox is prepared with (pooled or not).
func (d *Daemon) prepareSpec(netnsPath string) prepareSpec {
	return prepareSpec{NetNS: netnsPath, CABundle: d.caBundle, TrustDir: d.trustDir, Hidden: d.hidden, TmpSize: int64(d.cfg.Limits.TmpSize)}
}

// monitor ends a sandbox whose init died on its own.
func (d *Daemon) monitor(sb *sandbox) {
	select {
	case <-sb.box.Done():
		d.endSandbox(sb, ReasonFailed)
	case <-sb.ended:
	}
}

// endSandbox ends sb for reason: every process killed (nothing of it runs
// when this returns), the end audited with the final usage; the executor
// sandbox (cgroup, mounts, uid) and the namespace are torn down in the
// background (teardown). It returns the sandbox as it ended; a second call
// waits for the first.
func (d *Daemon) endSandbox(sb *sandbox, reason string) api.Sandbox {
	if !sb.beginEnd(reason) {
		<-sb.ended
		return sb.view(api.Usage{})
	}
	if sb.watched() { // the usage read costs a few cgroup files
		sb.notify(sb.view(d.usageNow(sb)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
	defer cancel()
	u, err := sb.box.Kill(ctx)
	if err != nil {
		d.log.Error("kill sandbox", oplog.SandboxKey, sb.id, oplog.ErrorKey, err)
	}
	if d.secrets != nil {
		d.secrets.Forget(sb.id)
	}
	final := apiUsage(u)
	if err := d.audit.Log(d.lifecycleRecord(sb, reason, &final)); err != nil {
		d.log.Error("audit sandbox end", oplog.SandboxKey, sb.id, oplog.ErrorKey, err)
	}
	d.acct.close(sb.id)
	d.tap.Forget(sb.id)
	sb.stopped(u, final)
	d.reg.beginTeardown(sb)
	if d.approvals != nil {
		d.approvals.forget(sb.id) // what was approved for its life ends with it
	}
	go d.teardown(sb.id, sb.box)
	d.metrics.ended.WithLabelValues(reason).Inc()
	if final.OOMKills > 0 {
		d.metrics.oomKills.Add(float64(final.OOMKills))
	}
	return sb.view(final)
}

// teardown destroys an ended sandbox's executor sandbox (init's exit, its
// cgroup and uid) and then its namespace, bounded by endTimeout, and frees
// its id. A failure is logged and counted
// (airlock_sandbox_teardown_failures_total); what it left is removed by the
// next start's recovery.
func (d *Daemon) teardown(id string, b box) {
	defer d.reg.endTeardown(id)
	ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
	defer cancel()
	failed := false
	if _, err := b.Destroy(ctx); err != nil {
		failed = true
		d.log.Error("destroy sandbox", oplog.SandboxKey, id, oplog.ErrorKey, err)
	}
	if err := d.net.Teardown(ctx, id); err != nil {
		failed = true
		d.log.Error("teardown", oplog.SandboxKey, id, oplog.ErrorKey, err)
	}
	if failed {
		d.metrics.teardownFailures.Inc()
	}
}

// endAll ends every sandbox for reason, at once, and waits for every
// teardown under way.
func (d *Daemon) endAll(reason string) {
	var wg sync.WaitGroup
	for _, sb := range d.reg.all() {
		wg.Add(1)
		go func() { defer wg.Done(); d.endSandbox(sb, reason) }()
	}
	wg.Wait()
	d.reg.waitTeardowns()
}

// Shutdown stops the daemon's sandboxes gracefully: no new sandbox is
// accepted (503), running execs may finish until ctx ends, then every
// sandbox is ended (daemon_stopped) and the pool emptied. Close does the
// same without waiting.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.stopping.Store(true)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	var err error
wait:
	for d.reg.runningExecs() > 0 {
		select {
		case <-ctx.Done():
			err = fmt.Errorf("drain: %d execs still running, killed: %w", d.reg.runningExecs(), ctx.Err())
			break wait
		case <-t.C:
		}
	}
	d.endAll(ReasonDaemonStopped)
	d.pool.close()
	return err
}

// usageNow reads a running sandbox's usage (zero when it cannot).
func (d *Daemon) usageNow(sb *sandbox) api.Usage {
	if sb.box == nil {
		return api.Usage{}
	}
	u, err := sb.box.Usage()
	if err != nil {
		return api.Usage{}
	}
	return apiUsage(u)
}

// sandboxView is the API's picture of sb now.
func (d *Daemon) sandboxView(sb *sandbox) *api.Sandbox {
	sb.mu.Lock()
	live := sb.state != api.StateStopped
	sb.mu.Unlock()
	var u api.Usage
	if live {
		u = d.usageNow(sb)
	}
	v := sb.view(u)
	return &v
}

func apiUsage(u usage) api.Usage {
	return api.Usage{CPUMS: float64(u.CPU) / 1e6, MemoryBytes: u.Memory, MemoryPeakBytes: u.PeakMemory, Pids: u.Pids, OOMKills: u.OOMKills}
}

// newSandboxID is "sb-" and 12 random hex digits, not in use.
func (d *Daemon) newSandboxID() (string, error) {
	for range 8 {
		var b [6]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		id := "sb-" + hex.EncodeToString(b[:])
		if !d.reg.taken(id) {
			return id, nil
		}
	}
	return "", errors.New("no free id")
}

// lifecycleRecord is the audit record of a sandbox's creation (u nil) or
// end: kind sandbox, decision allow, the reason; what it was created with,
// or its final usage.
func (d *Daemon) lifecycleRecord(sb *sandbox, reason string, u *api.Usage) *audit.Record {
	extra := map[string]json.RawMessage{}
	put := func(k string, v any) { extra[k], _ = json.Marshal(v) }
	phase, msg := "end", "sandbox ended: "+reason
	if u == nil {
		phase, msg = "create", "sandbox created"
		p := sb.params
		put("labels", sb.labels)
		put("limits", p.resolved)
		put("workspace", p.workspace)
		put("mode", p.mode)
		put("allow", p.allow)
		if len(p.bindings) > 0 {
			put("secret_bindings", p.bindings)
		}
		put("idle_timeout_ms", sb.idleTimeout.Milliseconds())
		put("max_lifetime_ms", sb.maxLifetime.Milliseconds())
	} else {
		sb.mu.Lock()
		put("execs", sb.execsTotal)
		sb.mu.Unlock()
		put("age_ms", time.Since(sb.created).Milliseconds())
		put("usage", u)
	}
	return &audit.Record{ID: sb.id + "/" + phase, Sandbox: sb.id, Kind: audit.KindSandbox, Decision: audit.DecisionAllow,
		Reasons: []audit.Reason{{ID: reason, Msg: msg}}, Extra: extra}
}
