package daemon

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/dnsfilter"
	"github.com/airlock-dev/airlock/fdreserve"
	"github.com/airlock-dev/airlock/gateway"
	"github.com/airlock-dev/airlock/inspect"
	"github.com/airlock-dev/airlock/ipguard"
	"github.com/airlock-dev/airlock/netns"
	"github.com/airlock-dev/airlock/oplog"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/sandboxd"
	"github.com/airlock-dev/airlock/secrets"
)

// Defaults.
const (
	DefaultRunDir     = "/run/airlock"
	DefaultResolvConf = "/etc/resolv.conf"
	systemBundle      = "/etc/ssl/certs/ca-certificates.crt"
)

// Options configure New.
type Options struct {
	// Config is the loaded configuration (config.Load applies defaults).
	Config config.Config
	// ConfigPath is the file Config came from; sandboxes never see it.
	ConfigPath string
	// RunDir holds this instance's state (namespace state files, an ephemeral
	// CA, the merged bundle). Default DefaultRunDir/<kind>-<pid>.
	RunDir string
	// EphemeralCA mints an interception CA for this process when the configured
	// one does not exist (airlock run). Without it, a missing CA means requests
	// policy wants intercepted are denied (mitm_unavailable).
	EphemeralCA bool
	// Recover says what to do with namespaces a crashed instance with the same
	// RunDir left behind. Empty means remove them.
	Recover netns.RecoverPolicy
	// Executor overrides the executor's config (tests set Exe and InitArgs).
	Executor *sandboxd.Config
	// Pool keeps Config.Sandbox.PoolSize sandboxes prepared for the API's
	// creates (airlock serve). Without it there is no warm pool: a single
	// `airlock run` would only pay for sandboxes nobody takes.
	Pool bool
	// Approvals holds requests the policy asks a person about for an answer
	// through the API (airlock serve; approval.go). Without it nobody could
	// answer, and an ask decision is the deny it is.
	Approvals bool
	// NoExecutor builds no executor (airlock attach serves a namespace whose
	// processes someone else runs); Run then fails.
	NoExecutor bool
	// ResolvConf is read for DNS upstreams when the config names none.
	ResolvConf string
	// Gateway is the base gateway config the daemon fills in (tests set DialFunc).
	Gateway gateway.Config
	// Logger receives operational logs; nil means slog.Default().
	Logger *slog.Logger
	// Owner, when above 0, makes this a per-user daemon (airlock serve
	// --user): only that uid may call the API, whatever the socket's mode
	// lets connect (root included), and it administers it (userapi.go).
	Owner int
	// PolicyLate lets New return before the built-in policy compiles
	// (airlock run; lazyPolicy): it compiles when first asked, or beside
	// the command. Every decision waits for the compile (engineRef), so
	// nothing leaves before it ends; Run reports a compile that failed as
	// its error and ends the command, whose connections were all refused.
	// A policy directory, a bundle or presets compile before New returns,
	// which returns their error, as without PolicyLate.
	PolicyLate bool
	// policyHook runs before the policy's compile; its error is the
	// compile's (tests).
	policyHook func() error
	// Rootless runs without root (rootless.go): sandboxes are made by an
	// executor in rootless mode, their islands built from inside and
	// adopted, the run directory is the user's. Run and the API's sandboxes
	// work; there is no warm pool, attach or recovery.
	Rootless *sandboxd.Rootless
}

// Daemon is one running airlock.
type Daemon struct {
	log      *slog.Logger
	cfg      config.Config
	runDir   string
	runLock  *os.File // the run directory's lock, held until Close (rundir.go)
	engine   *policy.Engine
	writer   *audit.Writer
	tally    *audit.Tally
	audit    *audit.Observed // the log every part writes through: the writer with its observers
	budget   *audit.Budget   // the gateway's records go through it to the tally
	dns      *dnsfilter.Filter
	gw       *gateway.Gateway
	secrets  *secrets.Injector
	scanner  *inspect.Scanner  // content inspection (inspect.go); nil when off
	canaries *inspect.Canaries // nil when inspect.canaries is off
	netns    *netns.Manager
	exec     *sandboxd.Executor
	caBundle string
	trustDir string // sandboxd.WriteTrustDir's forms of caBundle; "" when it is empty
	hidden   []string
	// hiddenNamed are hidden, each with what it holds.
	hiddenNamed []hiddenPath
	proxyURL    string
	closers     []func() error
	// keepState is set at Close when namespaces are left for a later Recover.
	keepState bool
	// bundleAudit writes the policy bundle source's events (policybundle.go).
	bundleAudit *bundleAudit
	// rootless is the executor's rootless mode, nil as root (rootless.go).
	rootless *sandboxd.Rootless
	// lazy is the built-in policy's compile when New returned before it
	// (Options.PolicyLate, lazyPolicy); nil otherwise.
	lazy *engineBuild
	// bundleWait waits for caBundle and trustDir when New returned before
	// they were written (Options.PolicyLate); nil otherwise.
	bundleWait func() error

	// The API's sandboxes (sandboxes.go): the audit chain's owner stamping
	// and egress counters, the events tap, the registry, the warm pool and
	// the seams they are built on.
	acct      *accounts
	tap       *audit.Tap
	reg       *registry
	pool      *warmPool
	exe       executor
	net       network
	metrics   *metrics
	conns     *apiConns          // the API's connections and streams by uid (apiconns.go)
	approvals *approvals         // requests held for a person's answer (approval.go)
	fdr       *fdreserve.Reserve // the spare descriptor of the sandboxes' listeners
	host      hostBounds
	home      string
	heartbeat time.Duration
	stopping  atomic.Bool
	owner     int // Options.Owner
}

// New builds every part, in dependency order, and undoes what it built if a
// later part fails. Nothing serves until a task or an attach asks for it.
func New(ctx context.Context, o Options) (_ *Daemon, err error) {
	o = o.withDefaults()
	cfg := o.Config
	logger := o.Logger
	switch parent := filepath.Dir(o.RunDir); {
	case parent == DefaultRunDir:
		removeStale(ctx, DefaultRunDir, logger)
	case o.Rootless != nil && parent == RootlessRunDir():
		removeStale(ctx, parent, logger) // run directories only: a rootless island dies with its init
	}
	d := &Daemon{log: logger, cfg: cfg, runDir: o.RunDir, owner: o.Owner, rootless: o.Rootless}
	if err := d.guardRootless(o); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if err := d.makeRunDir(); err != nil {
		return nil, err
	}
	caps, err := deriveConnCaps(cfg.API, nofileLimit())
	if err != nil {
		return nil, err
	}
	upstreams := cfg.DNS.Upstreams
	if len(upstreams) == 0 {
		if upstreams, err = resolvConfUpstreams(o.ResolvConf); err != nil {
			return nil, fmt.Errorf("dns.upstreams is empty and %w", err)
		}
	}
	allow, err := ipguard.ParsePrefixes("upstream.allow_cidrs", cfg.Upstream.AllowCIDRs)
	if err != nil {
		return nil, err
	}
	// Secrets before the policy: a policy bundle's token is one.
	if err := d.buildSecrets(cfg); err != nil {
		return nil, err
	}
	lazy, err := lazyPolicy(o)
	if err != nil {
		return nil, err
	}
	eng := d.compileEngine(cfg, o.policyHook, lazy)
	defer func() {
		if err != nil || !lazy {
			_ = eng.waitStarted() // never leave the compile running on an early return
		}
	}()
	if err := d.buildInspect(cfg); err != nil {
		return nil, err
	}
	if err := d.buildAudit(cfg); err != nil {
		return nil, err
	}
	caCert, caKey, err := d.interceptionCA(cfg, o.EphemeralCA)
	if err != nil {
		return nil, err
	}
	// The trust bundle and directory are written beside the next steps.
	bundle := d.bundleAsync(caCert, cfg.Upstream.CAFile)
	// The gateway's own addresses are refused as destinations and as DNS
	// answers even inside upstream.allow_cidrs: an allowed name resolving to
	// this host must not reach its services (metrics, an internal registry's
	// admin port, the host's sshd). So are the DNS filter's upstream
	// resolvers: a tunnel to an allowed name resolving to one would carry raw
	// DNS past the filter's policy, limits and audit.
	own, err := hostAddrs()
	if err != nil {
		return nil, err
	}
	own = append(own, resolverAddrs(upstreams)...)
	if o.Approvals { // before the DNS filter and the gateway, which ask it
		d.buildApprovals(cfg, ipguard.New(allow, own))
	}
	// Secrets are built first: the DNS filter checks every question for a
	// placeholder.
	if err := d.buildDNS(cfg, upstreams, own, eng.dec); err != nil {
		return nil, err
	}
	if err := d.buildGateway(o.Gateway, cfg, allow, own, caCert, caKey, eng.dec); err != nil {
		return nil, err
	}
	if o.PolicyLate {
		d.bundleWait = bundle // Run waits for it
	} else if err := bundle(); err != nil {
		return nil, err
	}
	if err := d.buildNetns(); err != nil {
		return nil, err
	}
	d.hiddenNamed = namedHidden(o, cfg, caKey)
	d.hidden = hiddenPaths(o, cfg, caKey)
	d.proxyURL = "http://127.0.0.1:" + strconv.Itoa(netns.DefaultExplicitPort)
	if !o.NoExecutor {
		if err := d.buildExecutor(*o.Executor, cfg); err != nil {
			return nil, err
		}
	}
	if lazy {
		d.lazy = eng
	} else if err := eng.wait(); err != nil {
		return nil, err
	}
	// Recover may serve re-attached namespaces: only now that dec has the
	// engine (lazyPolicy: a run's own new directory has none to serve).
	// A rootless island dies with its init, and a per-user daemon's
	// namespaces are its own user namespaces', pinned nowhere: nothing is
	// left to recover.
	if o.Rootless == nil && o.Owner <= 0 {
		if _, err := d.netns.Recover(ctx, o.Recover); err != nil {
			return nil, fmt.Errorf("recover namespaces: %w", err)
		}
	}
	d.stampRecoveredPods()
	// The warm pool starts filling only after Recover: Recover removes the
	// pool namespaces its manager does not know yet, and a fill under way
	// makes its namespace before the manager records it.
	d.initSandboxes(o)
	d.conns = newAPIConns(caps, d.log, d.metrics.reg)
	d.startBundleReports()
	if d.scanner != nil && !o.PolicyLate {
		// Off the start's path: the first scan would compile the rules
		// itself. A run warms them once its command has run a while (Run).
		go func() { _ = d.scanner.Warm() }()
	}
	return d, nil
}

// interceptionCA returns the CA files the gateway uses: the configured ones when
// they exist, else (EphemeralCA) a CA minted for this process in RunDir, else
// none.
func (d *Daemon) interceptionCA(cfg config.Config, ephemeral bool) (cert, key string, err error) {
	_, cerr := os.Stat(cfg.CA.Cert)
	_, kerr := os.Stat(cfg.CA.Key)
	switch {
	case cerr == nil && kerr == nil:
		return cfg.CA.Cert, cfg.CA.Key, nil
	case ephemeral:
		cert, key, err = gateway.InitEphemeralCA(filepath.Join(d.runDir, "ca"), time.Now())
		if err != nil {
			return "", "", fmt.Errorf("ephemeral CA: %w", err)
		}
		return cert, key, nil
	}
	d.log.Warn("no interception CA: requests policy wants intercepted are denied (airlock ca init)", "ca_cert", cfg.CA.Cert)
	return "", "", nil
}

// writeBundle writes the trust bundle sandboxes get: the system roots, the
// interception CA and the operator's upstream CA (so tunnels that are not
// intercepted to an internal registry verify too); and the same roots as a
// hashed directory and a Java truststore. The system roots and the upstream
// CA, the same for every process, are a trust cache entry
// (sandboxd.OpenTrustDir: built once and reused by later processes); the
// interception CA, new in every `airlock run`, is laid over it in the run
// directory (sandboxd.OverlayTrustDir: the entry's files linked, the CA and
// the Java store written), so a run's start no longer writes, hashes and
// evicts a cache entry of its own.
//
// It returns the hold on the cache entry to release at Close (nil when it
// holds none). It runs beside New's other steps (bundleAsync): it touches
// no other field of d.
func (d *Daemon) writeBundle(caCert, upstreamCA string) (bundle, trustDir string, release func(), err error) {
	read := func(p string) ([]byte, error) {
		if p == "" {
			return nil, nil
		}
		pem, err := os.ReadFile(p)
		if err != nil {
			if p == systemBundle && errors.Is(err, os.ErrNotExist) {
				return nil, nil
			}
			return nil, fmt.Errorf("ca bundle: %w", err)
		}
		if len(pem) > 0 && pem[len(pem)-1] != '\n' {
			pem = append(pem, '\n')
		}
		return pem, nil
	}
	sys, err := read(systemBundle)
	if err != nil {
		return "", "", nil, err
	}
	own, err := read(caCert)
	if err != nil {
		return "", "", nil, err
	}
	upstream, err := read(upstreamCA)
	if err != nil {
		return "", "", nil, err
	}
	b := append(append(append([]byte(nil), sys...), own...), upstream...)
	path := filepath.Join(d.runDir, "ca-bundle.pem")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return "", "", nil, fmt.Errorf("ca bundle: %w", err)
	}
	if len(b) == 0 {
		return path, "", nil, nil
	}
	// The trust directory is kept between processes (sandboxd.OpenTrustDir):
	// in DefaultRunDir's cache for the default run dirs, else in this one.
	cache := filepath.Join(d.runDir, "trust-cache")
	if parent := filepath.Dir(d.runDir); parent == DefaultRunDir || (d.rootless != nil && parent == RootlessRunDir()) {
		cache = filepath.Join(parent, "trust-cache")
	}
	base := append(sys[:len(sys):len(sys)], upstream...)
	if len(base) == 0 || len(own) == 0 {
		trust, _, release, err := sandboxd.OpenTrustDir(cache, b)
		if err != nil {
			return "", "", nil, err
		}
		return path, trust, release, nil
	}
	baseDir, _, release, err := sandboxd.OpenTrustDir(cache, base)
	if err != nil {
		return "", "", nil, err
	}
	// Held to Close: another process's eviction would remove it (and the
	// next start build it again) the moment nobody holds it.
	trust := filepath.Join(d.runDir, "trust")
	if err := os.RemoveAll(trust); err != nil { // a kept run directory's
		release()
		return "", "", nil, fmt.Errorf("trust dir: %w", err)
	}
	if _, err := sandboxd.OverlayTrustDir(trust, baseDir, base, own); err != nil {
		release()
		return "", "", nil, err
	}
	return path, trust, release, nil
}

// bundleAsync starts writeBundle and returns what waits for it: the first
// call sets caBundle and trustDir and returns its error, later calls the
// same error. Close waits for it (the run directory is removed after) and
// releases the trust cache entry it holds.
func (d *Daemon) bundleAsync(caCert, upstreamCA string) func() error {
	type result struct {
		bundle, trust string
		release       func()
		err           error
	}
	c := make(chan result, 1)
	go func() {
		b, t, release, err := d.writeBundle(caCert, upstreamCA)
		c <- result{b, t, release, err}
	}()
	var release func()
	wait := sync.OnceValue(func() error {
		r := <-c
		d.caBundle, d.trustDir, release = r.bundle, r.trust, r.release
		return r.err
	})
	d.closers = append(d.closers, func() error {
		if wait(); release != nil {
			release()
		}
		return nil
	})
	return wait
}

func hiddenPaths(o Options, cfg config.Config, caKey string) []string {
	var h []string
	for _, n := range namedHidden(o, cfg, caKey) {
		h = append(h, n.path)
	}
	return h
}

// namedHidden are the paths hidden from every sandbox, each with what it
// holds (so a refused workspace can say which file it would have shown).
func namedHidden(o Options, cfg config.Config, caKey string) []hiddenPath {
	var h []hiddenPath
	for _, n := range []hiddenPath{
		{path: o.ConfigPath, what: "the config file", field: "config"},
		{path: cfg.CA.Key, what: "the CA key", field: "ca.key"},
		{path: caKey, what: "the CA key"},
		{path: cfg.Secrets.File, what: "the secrets file", field: "secrets.file"},
		{path: cfg.Audit.File, what: "the audit log", field: "audit.file"},
		{path: filepath.Dir(cfg.Audit.File), what: "the audit log", file: cfg.Audit.File, field: "audit.file"},
		{path: cfg.Audit.SigningKey, what: "the audit signing key", field: "audit.signing_key"},
		{path: cfg.Audit.File + ".key", what: "the audit signing key", field: "audit.file"},
		{path: cfg.API.Socket, what: "the daemon's socket", field: "api.socket"},
		{path: o.RunDir, what: "airlock's run directory"},
		{path: cfg.Policy.Dir, what: "the policy directory", field: "policy.dir"},
		{path: bundlePersistDir(cfg), what: "the policy bundle cache", field: "policy.bundle.persist_dir"},
	} {
		if n.path == "" || n.path == "/" || n.path == "." {
			continue
		}
		abs, err := filepath.Abs(n.path)
		if err != nil {
			continue
		}
		n.path = abs
		if n.file != "" {
			n.file, _ = filepath.Abs(n.file)
		}
		h = append(h, n)
	}
	for _, p := range sandboxd.DefaultHiddenPaths {
		h = append(h, hiddenPath{path: p, what: "a directory of airlock's config and state"})
	}
	return h
}

// removeStale tears down what `airlock run` processes that died left in
// runDirs/run-<pid> (DefaultRunDir, or the rootless RootlessRunDir): their namespaces (through a Manager that owns their
// state files) and the directory itself. A directory is removed only under
// its lock (rundir.go): one whose lock is held belongs to a live process,
// whatever its name says; one without a lock file (made by an older
// airlock, or not yet locked) only when no process has its pid.
func removeStale(ctx context.Context, runDirs string, logger *slog.Logger) {
	entries, _ := os.ReadDir(runDirs)
	for _, e := range entries {
		pidStr, ok := strings.CutPrefix(e.Name(), "run-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid == os.Getpid() {
			continue
		}
		dir := filepath.Join(runDirs, e.Name())
		lock, held, err := tryLockRunDir(dir)
		if held || err != nil || (lock == nil && processAlive(pid)) {
			continue
		}
		removeStaleDir(ctx, dir, pid, logger)
		if lock != nil {
			lock.Close()
		}
	}
}

// removeStaleDir removes a dead run's namespaces and its directory; the
// caller holds the directory's lock, or it has none.
func removeStaleDir(ctx context.Context, dir string, pid int, logger *slog.Logger) {
	m, err := netns.New(netns.Config{StateDir: filepath.Join(dir, "netns")}, server{}, nil, logger)
	if err == nil {
		if res, err := m.Recover(ctx, netns.RecoverRemove); err == nil && len(res.Removed) > 0 {
			logger.Info("removed namespaces of a dead airlock run", "pid", pid, "sandboxes", res.Removed)
		}
		m.Close()
	}
	_ = os.RemoveAll(dir)
}

func processAlive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

// hostAddrs lists the addresses of this host's interfaces (the namespace the
// daemon's ordinary threads run in).
func hostAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list the host's addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out, nil
}

// resolverAddrs returns the IP addresses of DNS upstreams (IP:PORT or
// tls://IP:PORT#NAME; others, which config validation refuses, are skipped).
func resolverAddrs(upstreams []string) []netip.Addr {
	var out []netip.Addr
	for _, u := range upstreams {
		addr, _, _ := strings.Cut(strings.TrimPrefix(u, "tls://"), "#")
		if ap, err := netip.ParseAddrPort(addr); err == nil {
			out = append(out, ap.Addr().Unmap())
		}
	}
	return out
}

// resolvConfUpstreams reads nameserver lines as IP:53 upstreams.
func resolvConfUpstreams(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", path, err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(io.LimitReader(f, 1<<16))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			if a, err := netip.ParseAddr(fields[1]); err == nil && a.Zone() == "" {
				out = append(out, netip.AddrPortFrom(a, 53).String())
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s names no nameserver", path)
	}
	return out, nil
}

func shutdown(f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return f(ctx)
}

// Tally counts this instance's decisions for a summary.
func (d *Daemon) Tally() *audit.Tally { return d.tally }

// MetricsHandler serves the gateway's and the DNS filter's Prometheus metrics,
// and extra's (serve's audit exporters); mount it on a host listener no
// sandbox can reach.
func (d *Daemon) MetricsHandler(extra ...prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(append(prometheus.Gatherers{d.gw.Registry(), d.dns.Registry(), d.metrics.reg}, extra...), promhttp.HandlerOpts{})
}

// Engine is the policy engine (for reload on SIGHUP).
func (d *Daemon) Engine() *policy.Engine { return d.engine }

// Close stops everything New built, last built first: namespaces are torn down
// before the gateway stops, so no sandbox is ever left with a way out.
func (d *Daemon) Close() error {
	var errs []error
	for i := len(d.closers) - 1; i >= 0; i-- {
		if err := d.closers[i](); err != nil {
			errs = append(errs, err)
		}
	}
	d.closers = nil
	return errors.Join(errs...)
}

// Task is one command to run in a new sandbox.
type Task struct {
	// ID names the sandbox (policy input.sandbox.id, audit sandbox); empty
	// generates run-<random>.
	ID     string
	Labels map[string]string
	// Owner is the uid every audit record of the sandbox carries
	// (audit.Record.Owner), as a daemon sandbox's carry its creator's: for
	// airlock run, the user who invoked it. Negative: no owner.
	Owner int
	Argv  []string
	// Env is extra KEY=VALUE entries (after the proxy and CA variables).
	Env       []string
	Workspace string
	Limits    sandboxd.Limits
	Stdin     io.Reader
	Stdout    io.Writer
	Stderr    io.Writer
}

// Run makes the island namespace, gives the sandbox its placeholders, runs the
// command and tears everything down. The namespace exists before the command
// starts and is gone after it ends, so the command never has any other way out.
func (d *Daemon) Run(ctx context.Context, t Task) (*sandboxd.Result, error) {
	if len(t.Argv) == 0 {
		return nil, errors.New("no command")
	}
	if d.exec == nil {
		return nil, errors.New("this airlock has no executor")
	}
	if t.ID == "" {
		var b [6]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		t.ID = "run-" + hex.EncodeToString(b[:])
	}
	if t.Workspace != "" {
		if err := workspaceRefusal(t.Workspace, d.hiddenNamed); err != nil {
			return nil, err
		}
	}
	if err := d.checkFreeSpace(); err != nil {
		return nil, err
	}
	sb := policy.Sandbox{ID: t.ID, Labels: t.Labels}
	if t.Owner >= 0 {
		// Closed last (defers run last first): after the teardown, nothing
		// logs a record of the sandbox any more.
		d.acct.open(sb.ID, t.Owner)
		defer d.acct.close(sb.ID)
	}
	// Like a daemon sandbox's, the run's creation record names its labels
	// (audit query --label, policy suggest --label read them) and mode.
	if err := d.audit.Log(d.runRecord(sb)); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	spec := sandboxd.Spec{}
	var err error
	if d.rootless != nil {
		// The namespace is born with the sandbox's init (rootless.go).
		if spec.Island, spec.OnIsland, err = d.rootlessIsland(ctx, sb); err != nil {
			return nil, err
		}
	} else {
		ns, err := d.netns.Create(ctx, sb)
		if err != nil {
			return nil, fmt.Errorf("sandbox network: %w", err)
		}
		spec.NetNS = ns.Path
	}
	defer func() {
		if _, served := d.netns.Get(sb.ID); !served {
			return // a rootless island init failed to build
		}
		tctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.netns.Teardown(tctx, sb.ID); err != nil {
			d.log.Error("teardown", oplog.SandboxKey, sb.ID, oplog.ErrorKey, err)
		}
	}()
	env := append([]string(nil), t.Env...)
	var ph map[string]string
	if d.secrets != nil {
		var err error
		if ph, err = d.secrets.Placeholders(secrets.Sandbox{ID: sb.ID, Labels: sb.Labels}); err != nil {
			return nil, err
		}
		defer d.secrets.Forget(sb.ID)
		for k, v := range ph {
			env = append(env, k+"="+v)
		}
	}
	if d.bundleWait != nil {
		if err := d.bundleWait(); err != nil {
			return nil, err
		}
	}
	cenv, cfiles := d.canaryPlant(sb.ID)
	cfiles = withAWSFile(cfiles, ph)
	spec.ID, spec.DefaultEnv, spec.HomeFiles, spec.Argv, spec.Env = sb.ID, cenv, cfiles, t.Argv, env
	spec.Workspace, spec.CABundle, spec.TrustDir, spec.Proxy, spec.Hidden = t.Workspace, d.caBundle, d.trustDir, d.proxyURL, d.hidden
	spec.Stdin, spec.Stdout, spec.Stderr, spec.Limits = t.Stdin, t.Stdout, t.Stderr, t.Limits
	// A short command that never connects compiles neither the scanner's
	// rules nor (lazyPolicy) the policy: one that runs past warmDelay gets
	// both compiled beside it, and a connection or a scan before that
	// compiles what it needs itself.
	warm := time.AfterFunc(warmDelay, func() {
		if d.lazy != nil {
			d.lazy.start()
		}
		if d.scanner != nil {
			_ = d.scanner.Warm()
		}
	})
	defer warm.Stop()
	if d.lazy == nil {
		return d.exec.Run(ctx, spec)
	}
	// The policy may not have compiled, or started to (lazyPolicy): the
	// command starts meanwhile, its decisions wait for the engine (the
	// first starts the compile), and a compile that fails ends it.
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-d.lazy.done:
			if err := d.lazy.wait(); err != nil {
				cancel(err)
			}
		case <-rctx.Done():
		}
	}()
	res, err := d.exec.Run(rctx, spec)
	if perr := d.lazy.waitStarted(); perr != nil {
		return nil, fmt.Errorf("policy: %w (the sandbox was ended; every connection it made was refused)", perr)
	}
	return res, err
}

// runRecord is the creation record of Run's sandbox, shaped as a daemon
// sandbox's (lifecycleRecord): kind sandbox, reason created, extra labels
// and mode.
func (d *Daemon) runRecord(sb policy.Sandbox) *audit.Record {
	labels, _ := json.Marshal(sb.Labels)
	mode, _ := json.Marshal(d.cfg.Policy.Mode)
	return &audit.Record{ID: sb.ID + "/create", Sandbox: sb.ID, Kind: audit.KindSandbox, Decision: audit.DecisionAllow,
		Reasons: []audit.Reason{{ID: ReasonCreated, Msg: "sandbox created (airlock run)"}},
		Extra:   map[string]json.RawMessage{"labels": labels, "mode": mode}}
}

// Attach serves an existing namespace (a container's or a VM's) until Detach,
// treating traffic arriving on its interfaces as inbound says.
// A sandbox with a Pod has it stamped on every audit record from the first.
func (d *Daemon) Attach(ctx context.Context, sb policy.Sandbox, nsPath string, inbound netns.Inbound) (*netns.Sandbox, error) {
	if err := d.checkFreeSpace(); err != nil {
		return nil, err
	}
	claimed := sb.Pod != nil && d.acct.claimPod(sb.ID, clonePod(sb.Pod))
	s, err := d.netns.Attach(ctx, sb, nsPath, inbound)
	if err != nil && claimed {
		d.acct.setPod(sb.ID, nil)
	}
	return s, err
}

// Detach restores an attached namespace as it was.
func (d *Daemon) Detach(ctx context.Context, id string) error {
	err := d.netns.Detach(ctx, id)
	if _, still := d.netns.Get(id); !still {
		d.acct.setPod(id, nil)
	}
	return err
}

// CheckAttached reports whether attached sandbox id's rules are still in
// force (netns.ErrNotAttached for an unknown id).
func (d *Daemon) CheckAttached(ctx context.Context, id string) error {
	return d.netns.CheckAttached(ctx, id)
}

// stampRecoveredPods stamps the records of the attached pods Recover served
// again, as Attach did before the restart.
func (d *Daemon) stampRecoveredPods() {
	for _, id := range d.netns.IDs() {
		if s, ok := d.netns.Get(id); ok && s.Pod != nil {
			d.acct.setPod(id, clonePod(s.Pod))
		}
	}
}

// Backend names the iptables backend in use.
func (d *Daemon) Backend() string { return d.netns.Backend() }

// server serves a sandbox's listeners with the gateway (explicit and
// transparent) and the DNS filter (UDP and TCP): the netns.Server glue. Stop
// writes the sandbox's last audit summary once the gateway has stopped
// serving it.
type server struct {
	gw     *gateway.Gateway
	dns    *dnsfilter.Filter
	budget *audit.Budget
	// fdr wraps the sandbox's TCP listeners: at the descriptor limit a new
	// connection is refused, not left waiting (nil: not wrapped).
	fdr *fdreserve.Reserve
}

var _ netns.Server = server{}

func (s server) Serve(sb policy.Sandbox, own []netip.Addr, ls netns.Listeners) error {
	if s.fdr != nil {
		for _, l := range []struct {
			l    *net.Listener
			name string
		}{{&ls.Explicit, "explicit"}, {&ls.Transparent, "transparent"}, {&ls.DNSTCP, "dns_tcp"}} {
			if *l.l != nil {
				*l.l = s.fdr.Listener(*l.l, l.name)
			}
		}
	}
	if err := s.dns.ServeSandbox(sb, own, ls.DNSUDP, ls.DNSTCP); err != nil {
		return err
	}
	if err := s.gw.ServeSandbox(sb, ls.Explicit, ls.Transparent); err != nil {
		s.dns.StopSandbox(sb.ID)
		return err
	}
	return nil
}

func (s server) Stop(id string) {
	s.gw.StopSandbox(id)
	s.dns.StopSandbox(id)
	if s.budget != nil {
		s.budget.Forget(id)
	}
}
