package sandboxd

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/oplog"
)

// Keys of the operational log only this package writes (oplog has the
// shared ones).
const (
	uidKey  = "uid"  // a sandbox's uid
	slotKey = "slot" // a slot id (the cgroup's name)
	jobKey  = "job"  // an exec's or files operation's id in its sandbox
)

// Executor makes sandboxes (Prepare, Start, Create) and runs one-shot
// commands in them (Run). It is safe for concurrent use.
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
	// idmaps are the user namespaces workspaces are idmapped through.
	idmaps *idmapCache
	// initFile is the init binary cfg.Exe executes (initexe.go), nil when
	// init is this binary re-executed.
	initFile *os.File
}

// New validates cfg, prepares the cgroup parent, removes stale sandboxes left by
// dead executors and starts the slot pool. log receives the exec audit records.
func New(cfg Config, log audit.Logger, logger *slog.Logger) (_ *Executor, err error) {
	if log == nil {
		return nil, errors.New("sandboxd: an audit logger is required")
	}
	lg := oplog.For(logger, "sandboxd")
	initFile := findInit(&cfg, lg)
	defer func() {
		if err != nil && initFile != nil {
			initFile.Close()
		}
	}()
	cfg.applyDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Rootless != nil {
		// The executor keeps the open init binary: dropped, its finalizer
		// would close the descriptor cfg.Exe names at some later GC, and a
		// file opened after it would take the number.
		e, err := newRootless(cfg, log, lg)
		if err != nil {
			return nil, err
		}
		e.initFile = initFile
		return e, nil
	}
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
	idmaps := newIdmapCache()
	p.mu.Lock()
	p.idmaps = idmaps
	p.mu.Unlock()
	return &Executor{cfg: cfg, cgm: cgm, pool: p, log: log, lg: lg, rootNS: startRootUserns(), idmaps: idmaps, initFile: initFile}, nil
}

// findInit points cfg at the init binary beside this executable when cfg
// leaves the init to the defaults and one is usable (initexe.go), and returns
// it open; nil leaves cfg to re-execute this binary.
func findInit(cfg *Config, lg *slog.Logger) *os.File {
	if cfg.Exe != "" || cfg.InitArgs != nil {
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil
	}
	f, err := openInit(self)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			lg.Warn("init binary refused: sandboxes start from this binary instead (slower)", oplog.ErrorKey, err)
		}
		return nil
	}
	cfg.Exe, cfg.InitArgs = FDExe(f), []string{}
	return f
}

// Close destroys the idle pool slots.
func (e *Executor) Close() error {
	err := e.pool.close()
	if f, nerr := e.rootNS.get(); nerr == nil {
		f.Close()
	}
	e.idmaps.close()
	if e.initFile != nil {
		e.initFile.Close()
	}
	return err
}

// CgroupV2 reports whether the executor uses the unified hierarchy.
func (e *Executor) CgroupV2() bool { return e.cgm.v2 }

// initConfig builds the configuration init receives for a sandbox running as
// uid.
func (e *Executor) initConfig(spec *PrepareSpec, uid int) (*initConfig, error) {
	hidden := append(append([]string{}, e.cfg.HiddenPaths...), spec.Hidden...)
	if spec.rootFS == "" {
		// Hide what a path points at too, so a symlink cannot be a way around.
		hidden = e.hostHidden(spec.Hidden)
	}
	var mnt unix.Stat_t
	if err := unix.Stat("/proc/self/ns/mnt", &mnt); err != nil {
		return nil, fmt.Errorf("sandboxd: read own mount namespace: %w", err)
	}
	icfg := &initConfig{
		HostMountNS: [2]uint64{uint64(mnt.Dev), mnt.Ino},
		Hostname:    e.cfg.Hostname, RootFS: spec.rootFS, CABundle: spec.CABundle, TrustDir: spec.TrustDir, Hidden: hidden, Home: e.cfg.Home,
		TmpSize: spec.TmpSize, TmpInodes: spec.TmpInodes, FreshNet: spec.NetNS == "",
		UID: uid, GID: uid, InitArgs: e.cfg.InitArgs,
	}
	if icfg.InitArgs == nil {
		icfg.InitArgs = []string{}
	}
	if !spec.noWorkspace {
		if err := ensureMountPoint(e.cfg.WorkspaceDir, e.cfg.Home); err != nil {
			return nil, err
		}
		icfg.WorkspaceDir = e.cfg.WorkspaceDir
	}
	src := "/"
	if spec.rootFS != "" {
		// The mount table names real paths.
		var err error
		if src, err = filepath.EvalSymlinks(spec.rootFS); err != nil {
			return nil, fmt.Errorf("sandboxd: spec.rootfs %s: %w", spec.rootFS, err)
		}
	}
	var err error
	if icfg.Mounts, err = viewMounts(src, icfg); err != nil {
		return nil, err
	}
	return icfg, nil
}

// hostHidden returns the hidden host paths (Config.HiddenPaths and extra)
// and what each resolves to.
func (e *Executor) hostHidden(extra []string) []string {
	hidden := append(append([]string{}, e.cfg.HiddenPaths...), extra...)
	out := append([]string{}, hidden...)
	for _, h := range hidden {
		if r, err := filepath.EvalSymlinks(h); err == nil && r != h {
			out = append(out, r)
		}
	}
	return out
}

// ensureMountPoint makes sure the empty workspace's mount point exists on
// the host root (the sandbox sees the host root read-only, so init cannot
// make it): a root-owned, empty 0755 directory, made once. Inside a tree the
// sandbox covers with a tmpfs of its own (/tmp, $HOME's parent...), init
// makes it instead.
func ensureMountPoint(dir, home string) error {
	if underTmpfs(dir, filepath.Dir(home)) {
		return nil
	}
	st, err := os.Lstat(dir)
	switch {
	case err == nil && !st.IsDir():
		return fmt.Errorf("sandboxd: workspace_dir %s on the host is a %v, not a directory: the empty workspace is mounted over it", dir, st.Mode().Type())
	case err == nil:
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("sandboxd: workspace_dir %s: %w", dir, err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("sandboxd: create %s on the host (the mount point of the empty workspace): %w", dir, err)
	}
	return nil
}

// baseEnv is the environment every exec of a sandbox starts from.
func (e *Executor) baseEnv(spec *StartSpec, caBundle, trustDir bool) []string {
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
	if caBundle {
		for _, k := range CAEnvVars {
			env = append(env, k+"="+SystemCABundle)
		}
	}
	if trustDir {
		env = append(env, TrustEnv()...)
	}
	return withDefaults(dedupeEnv(append(env, spec.Env...)), spec.DefaultEnv)
}

// withDefaults appends the entries of defaults whose key env does not set.
func withDefaults(env, defaults []string) []string {
	set := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	for _, kv := range defaults {
		if k, _, _ := strings.Cut(kv, "="); !set[k] {
			set[k] = true
			env = append(env, kv)
		}
	}
	return env
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
