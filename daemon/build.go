package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/dnsfilter"
	"github.com/airlock-dev/airlock/fdreserve"
	"github.com/airlock-dev/airlock/gateway"
	"github.com/airlock-dev/airlock/netns"
	"github.com/airlock-dev/airlock/oplog"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/sandboxd"
	"github.com/airlock-dev/airlock/secrets"
)

// The steps of New, one per part built, in the order New calls them. Each
// registers its part's closer as soon as the part exists, so an error in a
// later step closes it (Close runs closers last first).

// withDefaults fills the zero fields of o.
func (o Options) withDefaults() Options {
	if o.RunDir == "" && o.Rootless != nil {
		o.RunDir = filepath.Join(RootlessRunDir(), "run-"+strconv.Itoa(os.Getpid()))
	}
	if o.RunDir == "" {
		o.RunDir = filepath.Join(DefaultRunDir, "run-"+strconv.Itoa(os.Getpid()))
	}
	if o.ResolvConf == "" {
		o.ResolvConf = DefaultResolvConf
	}
	if o.Recover == "" {
		o.Recover = netns.RecoverRemove
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Executor == nil {
		o.Executor = &sandboxd.Config{}
	}
	return o
}

// makeRunDir creates the run directory and takes its lock (rundir.go)
// before anything else touches it; it is removed at Close unless
// namespaces are kept for a later Recover. A process that does not get the
// lock (the directory is another's) fails here and never writes or removes
// anything in it.
func (d *Daemon) makeRunDir() error {
	f, err := lockRunDir(d.runDir)
	if err != nil {
		return err
	}
	d.runLock = f
	d.closers = append(d.closers, func() error {
		// The lock is released last: no other process takes the directory
		// while it is being removed.
		defer f.Close()
		// Attached namespaces stay closed (rules in place, no listeners) with their
		// state files, for the next instance's Recover; only then is the
		// directory kept. A directory that is no longer ours (removed and
		// made again from outside) is left alone.
		if d.keepState || !holdsLock(d.runDir, f) {
			return nil
		}
		return os.RemoveAll(d.runDir)
	})
	return nil
}

// engineBuild is the policy compile New runs beside the other steps.
type engineBuild struct {
	dec *engineRef
	// start starts the compile (once; later calls do nothing). compileEngine
	// calls it, unless the compile is lazy: then the first decision (dec),
	// Run's warm-up timer or wait does.
	start func()
	// started reports whether start was called.
	started func() bool
	// done is closed when the compile has ended (wait then returns at once).
	done <-chan struct{}
	// wait starts the compile if it has not started, waits for it (the
	// compile publishes its engine to dec and d.engine, or the fail-closed
	// nil) and returns its error; from any goroutine, any number of times.
	wait func() error
}

// compileEngine starts compiling the policy. Compiling is the slowest part of
// a start; nothing else New builds needs the compiled engine, so it compiles
// meanwhile. The DNS filter and the gateway get dec, which wait points at the
// engine before anything decides: a decision asked sooner waits for it, and
// one asked of a failed compile is the fail-closed deny.
//
// A lazy compile (airlock run's built-in policy, lazyPolicy) starts only
// when something asks: the first decision, or Run's warm-up timer, so a
// command that never connects never pays for it. A test's hook runs before
// the compile; its error is the compile's (nil: no hook).
func (d *Daemon) compileEngine(cfg config.Config, hook func() error, lazy bool) (b *engineBuild) {
	// The compile publishes its engine (or the fail-closed nil) to dec
	// itself: a lazy one is started by a decision that waits on dec.
	done := make(chan struct{})
	var compileErr error
	compile := func() {
		defer close(done)
		var err error
		if hook != nil {
			err = hook()
		}
		var bundle *policy.BundleConfig
		if err == nil {
			bundle, err = d.policyBundle(cfg)
		}
		var e *policy.Engine
		if err == nil {
			e, err = policy.New(policy.Config{
				Dir:         cfg.Policy.Dir,
				Mode:        policy.Mode(cfg.Policy.Mode),
				Presets:     cfg.Policy.Presets,
				AllowHosts:  cfg.Policy.Allow,
				EvalTimeout: time.Duration(cfg.Policy.EvalTimeout),
				Watch:       cfg.Policy.Dir != "",
				Bundle:      bundle,
			}, d.log)
		}
		if err != nil {
			compileErr = err
			e = nil
		} else {
			d.engine = e
		}
		b.dec.set(e)
	}
	var started atomic.Bool
	b = &engineBuild{dec: newEngineRef(), started: started.Load, done: done}
	b.start = sync.OnceFunc(func() {
		started.Store(true)
		go compile()
	})
	b.dec.kick = b.start
	b.wait = func() error {
		b.start()
		<-done
		return compileErr
	}
	if !lazy {
		b.start()
	}
	// The engine stops after everything that asks it (closers run last
	// first), once its compile is over (New may return before it is:
	// Options.PolicyLate); a lazy compile nothing started is not started.
	d.closers = append(d.closers, func() error {
		if !started.Load() || b.wait() != nil {
			return nil
		}
		return d.engine.Close()
	})
	return b
}

// waitStarted is wait for a compile that started, nil for one that never
// did (lazy, and nothing asked).
func (b *engineBuild) waitStarted() error {
	if !b.started() {
		return nil
	}
	return b.wait()
}

// lazyPolicy reports whether airlock run's policy may compile on first use:
// the built-in policy with no presets, whose only input, the allowed hosts,
// is checked here (a policy directory, a bundle or presets compile at once,
// so their errors are the run's before its command starts).
func lazyPolicy(o Options) (bool, error) {
	p := o.Config.Policy
	if !o.PolicyLate || p.Dir != "" || p.Bundle != nil || len(p.Presets) > 0 {
		return false, nil
	}
	for _, h := range p.Allow {
		if _, err := policy.NormalizeAllow(h); err != nil {
			return false, fmt.Errorf("policy: allow_hosts: %q: %w", h, err)
		}
	}
	return true, nil
}

// buildAudit opens the audit writer (every record stamped with AuditNode),
// the tally every part logs through, and
// the per-sandbox budget the gateway logs through (in front of the tally).
func (d *Daemon) buildAudit(cfg config.Config) error {
	if err := os.MkdirAll(filepath.Dir(cfg.Audit.File), 0o750); err != nil {
		return fmt.Errorf("audit.file: %w", err)
	}
	signingKey := cfg.Audit.SigningKey
	if signingKey == "" {
		// Checkpoints are what make a rewrite of the whole chain detectable: sign
		// by default, with a key kept beside the log (created 0600 on first use).
		signingKey = cfg.Audit.File + ".key"
	}
	node, err := AuditNode(cfg)
	if err != nil {
		return err
	}
	w, err := audit.New(audit.Config{
		File:           cfg.Audit.File,
		MaxSize:        int64(cfg.Audit.MaxSize),
		Overflow:       cfg.Audit.Overflow,
		MaxFiles:       cfg.Audit.MaxFiles,
		MaxBytes:       int64(cfg.Audit.MaxBytes),
		SigningKeyFile: signingKey,
		Node:           node,
	}, d.log)
	if err != nil {
		return err
	}
	d.writer = w
	d.closers = append(d.closers, d.writer.Close)
	// Every record is stamped by the accounts (owner, pod) and, once the
	// writer accepted it, counted (accounts, tally) and streamed (tap).
	d.tap, d.acct, d.tally = audit.NewTap(), newAccounts(), audit.NewTally()
	d.audit = audit.Observe(d.writer, d.acct, d.tally, d.tap)
	// The budget's last summaries are written before the writer closes
	// (closers run last first).
	d.budget, err = audit.NewBudget(audit.BudgetConfig{Rate: cfg.Audit.GatewayRate, Burst: cfg.Audit.GatewayBurst}, d.audit, d.log)
	if err != nil {
		return fmt.Errorf("audit.gateway_rate, gateway_burst: %w", err)
	}
	d.closers = append(d.closers, d.budget.Close)
	return nil
}

// buildDNS builds the DNS filter.
func (d *Daemon) buildDNS(cfg config.Config, upstreams []string, own []netip.Addr, dec policy.Decider) error {
	var approve dnsfilter.ApproveFunc
	if d.approvals != nil {
		approve = d.dnsApprove
	}
	f, err := dnsfilter.New(dnsfilter.Config{
		Approve:      approve,
		GatewayAddrs: own,
		Upstreams:    upstreams,
		RateLimit:    cfg.DNS.RateLimit,
		RateBurst:    cfg.DNS.RateBurst,
		UniqueNames:  cfg.DNS.UniqueNames,
		BlockFlags:   cfg.DNS.BlockFlags,
		AuditRate:    cfg.DNS.AuditRate,
		AuditBurst:   cfg.DNS.AuditBurst,
		MinTTL:       time.Duration(cfg.DNS.MinTTL),
		MaxTTL:       time.Duration(cfg.DNS.MaxTTL),
		AllowCIDRs:   cfg.Upstream.AllowCIDRs,
		NameCheck:    d.placeholderInName(),
		ScanName:     d.scanName(),
	}, dec, d.audit, d.log)
	if err != nil {
		return err
	}
	d.dns = f
	d.closers = append(d.closers, func() error { return shutdown(d.dns.Shutdown) })
	return nil
}

// buildSecrets loads the secrets file, if one is configured.
// placeholderInName is the DNS filter's name check: a question that carries a
// sandbox's secret placeholder is refused and flagged, as the gateway does
// for a CONNECT host or an SNI. nil without secrets.
func (d *Daemon) placeholderInName() func(sb policy.Sandbox, name string) (reason, flag string, refused bool) {
	if d.secrets == nil {
		return nil
	}
	inj := d.secrets
	return func(sb policy.Sandbox, name string) (string, string, bool) {
		err := inj.CheckName(secrets.Sandbox{ID: sb.ID, Labels: sb.Labels}, name)
		if err == nil {
			return "", "", false
		}
		var den *secrets.Denial
		if errors.As(err, &den) {
			return den.Code, den.Flag, true
		}
		return "secret_check_failed", "", true // fail closed
	}
}

func (d *Daemon) buildSecrets(cfg config.Config) error {
	if cfg.Secrets.File == "" {
		return nil
	}
	sc, err := secrets.LoadFile(cfg.Secrets.File)
	if err != nil {
		return err
	}
	d.secrets, err = secrets.New(sc, d.log)
	return err
}

// buildGateway builds the gateway from base, the config the caller (tests)
// started.
func (d *Daemon) buildGateway(base gateway.Config, cfg config.Config, allow []netip.Prefix, own []netip.Addr,
	caCert, caKey string, dec policy.Decider) error {
	gwCfg := base
	gwCfg.AllowCIDRs = allow
	gwCfg.OwnAddrs = own
	gwCfg.UpstreamCAFile = cfg.Upstream.CAFile
	gwCfg.CACertFile, gwCfg.CAKeyFile = caCert, caKey
	if d.secrets != nil {
		gwCfg.Injector = d.secrets
	}
	if d.approvals != nil {
		gwCfg.Approver = d.approvals
	}
	gwCfg.ParentProxy, gwCfg.ParentNoProxy = cfg.Upstream.Proxy, cfg.Upstream.NoProxy
	d.inspectGateway(&gwCfg, cfg)
	if id := cfg.Upstream.ProxyAuthSecret; id != "" {
		if d.secrets == nil {
			return fmt.Errorf("upstream.proxy_auth_secret: %q needs secrets.file", id)
		}
		auth, err := d.secrets.ProxyAuthorization(id)
		if err != nil {
			return fmt.Errorf("upstream.proxy_auth_secret: %w", err)
		}
		gwCfg.ParentAuth = auth
	}
	gw, err := gateway.New(gwCfg, dec, d.budget, d.dns.Resolver(), d.log)
	if err != nil {
		return err
	}
	d.gw = gw
	if d.secrets != nil { // token endpoints (STS AssumeRole) are called through the guarded dialer
		d.secrets.SetTokenClient(gw.TokenClient())
	}
	d.closers = append(d.closers, func() error { return shutdown(d.gw.Shutdown) })
	return nil
}

// buildNetns builds the island namespace manager.
func (d *Daemon) buildNetns() error {
	d.fdr = fdreserve.New(d.log.With(oplog.ComponentKey, "fdreserve"))
	d.closers = append(d.closers, d.fdr.Close)
	m, err := netns.New(netns.Config{StateDir: filepath.Join(d.runDir, "netns"),
		NewFlowRate: d.cfg.Limits.NewFlows, NewFlowBurst: d.cfg.Limits.NewFlowBurst},
		server{gw: d.gw, dns: d.dns, budget: d.budget, fdr: d.fdr}, d.audit, d.log)
	if err != nil {
		return err
	}
	d.netns = m
	// Close leaves every namespace it still manages closed, as a crash would:
	// Run tears down its own, and an attached container keeps no way out until
	// it is detached or a new instance re-attaches it.
	d.closers = append(d.closers, func() error {
		d.keepState = len(d.netns.IDs()) > 0
		return d.netns.Close()
	})
	return nil
}

// execLimits is the executor's form of the configured limits.
func execLimits(c config.Limits) sandboxd.Limits {
	return sandboxd.Limits{Memory: int64(c.Memory), CPUs: c.CPUs, Pids: int64(c.Pids), Timeout: time.Duration(c.Timeout), TmpSize: int64(c.TmpSize)}
}

// buildExecutor builds the executor from ec (tests set Exe and InitArgs) with
// the configured limits.
func (d *Daemon) buildExecutor(ec sandboxd.Config, cfg config.Config) error {
	ec.Limits = execLimits(cfg.Limits)
	if d.rootless != nil {
		ec.Rootless = d.rootless
		if ec.StateDir == "" {
			ec.StateDir = filepath.Join(d.runDir, "sandboxd")
		}
	}
	e, err := sandboxd.New(ec, d.audit, d.log)
	if err != nil {
		return err
	}
	d.exec = e
	d.closers = append(d.closers, d.exec.Close)
	return nil
}

// initSandboxes builds what the API's sandboxes need: the registry, the
// metrics, the executor and network seams and the warm pool. Its closer
// ends every sandbox (daemon_stopped) and empties the pool before the
// executor and the namespaces close.
func (d *Daemon) initSandboxes(o Options) {
	d.reg = newRegistry()
	d.host = readHostBounds()
	d.home = sandboxd.DefaultHome
	if o.Executor != nil && o.Executor.Home != "" {
		d.home = o.Executor.Home
	}
	d.heartbeat = DefaultHeartbeat
	d.net = netnsNetwork{m: d.netns, srv: server{gw: d.gw, dns: d.dns}}
	if d.rootless != nil {
		d.net = rootlessNetwork{netnsNetwork{m: d.netns, srv: server{gw: d.gw, dns: d.dns}}}
	}
	if d.exec != nil {
		d.exe = sandboxdExecutor{d.exec}
	}
	poolSize := max(d.cfg.Sandbox.PoolSize, 0)
	if d.exe == nil || !o.Pool {
		poolSize = 0
	}
	d.pool = newWarmPool(poolSize, d.cfg.Pool.Max, d.net, d.exe, d.poolSpec, d.log)
	d.metrics = newMetrics(func() float64 { return float64(d.reg.len()) }, func() float64 { return float64(d.pool.depth()) })
	d.metrics.reg.MustRegister(poolBrokenMetric(d.pool.broken.Load))
	d.metrics.reg.MustRegister(inboundMetric(d.netns.InboundAccepted), fdRefusedMetric(d.fdr.Refused))
	d.closers = append(d.closers, func() error {
		d.stopping.Store(true)
		d.endAll(ReasonDaemonStopped)
		d.pool.close()
		return nil
	})
}
