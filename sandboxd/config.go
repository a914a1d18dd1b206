package sandboxd

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Defaults applied by New (Config) and Run (Spec.Limits) to zero fields.
const (
	DefaultExe          = "/proc/self/exe"
	DefaultCgroupRoot   = "/sys/fs/cgroup"
	DefaultCgroupParent = "airlock"
	DefaultStateDir     = "/run/airlock/sandboxd"
	DefaultUIDBase      = 100000
	DefaultUIDCount     = 1000
	DefaultPoolSize     = 4
	DefaultHostname     = "sandbox"
	DefaultHome         = "/home/sandbox"
	// DefaultWorkspaceDir is where a sandbox without a bound workspace gets
	// an empty one (api.WorkspaceDir).
	DefaultWorkspaceDir = "/workspace"
	// DefaultMaxUpload bounds the file content one PutFiles writes.
	DefaultMaxUpload = 1 << 30

	DefaultMemory    = 512 << 20
	DefaultCPUs      = 1.0
	DefaultPids      = 256
	DefaultTimeout   = 10 * time.Minute
	DefaultTmpSize   = 256 << 20
	DefaultTmpInodes = 65536
	DefaultNoFile    = 1024
	DefaultFSize     = 1 << 30
	DefaultOutputCap = 4 << 20

	// SandboxPath is the PATH every sandboxed command gets.
	SandboxPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/go/bin"

	// SystemCABundle is where the merged CA bundle is mounted.
	SystemCABundle = "/etc/ssl/certs/ca-certificates.crt"
	// SandboxUser names the sandbox uid (and gid) in the /etc/passwd and
	// /etc/group the sandbox sees: the root's files plus this entry.
	SandboxUser = "sandbox"

	// initPidsOverhead is added to Limits.Pids for init's Go runtime threads,
	// so --pids N leaves N tasks to the command.
	initPidsOverhead = 16
)

// DefaultInitArgs are the arguments after the executable that make the airlock
// binary run InitMain (the hidden subcommand).
var DefaultInitArgs = []string{"__sandbox-init"}

// DefaultEnvAllow are host environment variables passed into every sandbox.
var DefaultEnvAllow = []string{"TERM", "LANG", "LC_ALL", "LC_CTYPE", "TZ"}

// DefaultHiddenPaths are masked in every sandbox when they exist: airlock's config,
// keys, secrets, state, audit log and daemon socket.
var DefaultHiddenPaths = []string{"/etc/airlock", "/run/airlock", "/var/lib/airlock", "/var/log/airlock"}

// CAEnvVars are set to the CA bundle path when Spec.CABundle is given (which
// runtime reads which: docs/TRUST.md).
var CAEnvVars = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT",
	"NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "CARGO_HTTP_CAINFO", "AWS_CA_BUNDLE", "DENO_CERT"}

// CgroupMode selects the cgroup hierarchy.
type CgroupMode string

// Cgroup modes.
const (
	CgroupAuto CgroupMode = ""   // detect: cgroup2 mounted at CgroupRoot means v2
	CgroupV1   CgroupMode = "v1" // per-controller hierarchies (hybrid hosts)
	CgroupV2   CgroupMode = "v2" // unified hierarchy
)

// Config configures an Executor. Zero fields take the Default* values.
type Config struct {
	// Exe is the binary re-executed as the sandbox init. Default /proc/self/exe.
	Exe string
	// InitArgs follow Exe on the command line; nil means DefaultInitArgs. Tests whose
	// TestMain dispatches on the stage marker pass an empty, non-nil slice.
	InitArgs []string
	// CgroupRoot is where cgroups are mounted. Default /sys/fs/cgroup.
	CgroupRoot string
	// CgroupMode forces v1 or v2; empty detects.
	CgroupMode CgroupMode
	// AllowMissingControllers names limit controllers (memory, cpu, pids, io) the
	// executor may run without. Empty (the default): a controller a limit needs that
	// the hierarchy lacks is an error naming it. A listed controller that is missing
	// leaves its limit unenforced; New logs it at Warn and every run logs it again.
	// List memory only where something else bounds the sandbox's memory (the tests
	// on v1-hybrid hosts, which run v2 mode on the cgroup2 mount for its process
	// paths).
	AllowMissingControllers []string
	// CgroupParent is the directory, under each hierarchy's root, that holds the
	// per-sandbox cgroups (named airlock-<slot id>). Default "airlock".
	CgroupParent string
	// StateDir holds the lock files that make uid and cgroup slots unique across
	// processes. Default /run/airlock/sandboxd.
	StateDir string
	// UIDBase and UIDCount give the range of per-sandbox uids (gid = uid). Default
	// 100000 and 1000. No two live sandboxes on the host share a uid.
	UIDBase  int
	UIDCount int
	// PoolSize is how many slots (uid + cgroup) are kept ready. Default 4; -1 disables.
	PoolSize int
	// EnvAllow names host environment variables copied into every sandbox.
	// nil means DefaultEnvAllow.
	EnvAllow []string
	// HiddenPaths are masked in every sandbox (plus Spec.Hidden). nil means
	// DefaultHiddenPaths.
	HiddenPaths []string
	// Hostname is the sandbox's UTS hostname. Default "sandbox".
	Hostname string
	// Home is $HOME inside the sandbox; its parent directory gets a tmpfs. Default
	// /home/sandbox.
	Home string
	// WorkspaceDir is where a prepared sandbox has its empty workspace, a
	// tmpfs of its own sized like /tmp. Its mount point is made on the host
	// root (root-owned, empty) when missing. Default /workspace.
	WorkspaceDir string
	// MaxUpload bounds the bytes of file content one PutFiles writes (past it:
	// ErrTooLarge). Default 1 GiB.
	MaxUpload int64
	// Limits are the defaults for Spec.Limits fields left zero.
	Limits Limits
	// Rootless, when set, makes sandboxes without root (rootless.go).
	Rootless *Rootless
}

// Limits caps one sandbox. Zero fields take the executor's Config.Limits, then the
// Default* constants.
type Limits struct {
	Memory    int64         // bytes of memory (RAM + swap: swap is never an escape)
	CPUs      float64       // CPU quota in cores
	Pids      int64         // tasks (processes and threads) the command may have
	Timeout   time.Duration // wall clock from start; the whole tree dies when it passes
	TmpSize   int64         // bytes for each of the /tmp and $HOME tmpfs
	TmpInodes int64         // inodes for each tmpfs
	NoFile    uint64        // RLIMIT_NOFILE
	FSize     int64         // RLIMIT_FSIZE (largest file a process may write)
	OutputCap int64         // bytes of stdout and of stderr kept in Result
	IO        []IOLimit     // block I/O throttles (v2 io.max, v1 blkio.throttle)
}

// IOLimit throttles one block device. Zero rates are unlimited.
type IOLimit struct {
	Device    string // "major:minor"
	ReadBPS   uint64
	WriteBPS  uint64
	ReadIOPS  uint64
	WriteIOPS uint64
}

// Spec is one command to run.
type Spec struct {
	// ID names the sandbox in audit records. Default: the slot id.
	ID string
	// Argv is the command; Argv[0] is looked up in SandboxPath.
	Argv []string
	// Env is explicit "K=V" entries, added after the allow-listed host variables and
	// the proxy and CA variables (later entries win).
	Env []string
	// DefaultEnv and HomeFiles are as in StartSpec (canary credentials).
	DefaultEnv []string
	HomeFiles  map[string][]byte
	// Dir is the working directory inside the sandbox. Default: the workspace
	// when set, else the empty one (Config.WorkspaceDir; $HOME with a RootFS).
	Dir string
	// NetNS is the network namespace to join (a /run/netns path or /proc/PID/ns/net).
	// Empty gives a fresh namespace with only lo.
	NetNS string
	// Workspace is a host directory mounted read-write at WorkspaceTarget as an
	// idmapped mount: the sandbox uid and gid stand in for the directory's owner, so
	// the sandbox can write it without any chown on the host, and files it creates
	// belong to the directory's owner on the host. Files of other owners appear as
	// nobody. A filesystem that cannot be idmapped (NFS, proc, older tmpfs) fails the
	// run with an error saying so; it is never mounted read-only instead.
	Workspace string
	// WorkspaceTarget is where the workspace appears inside. Default: same path.
	WorkspaceTarget string
	// RootFS is a directory used as the root (pivot_root) instead of the host root.
	RootFS string
	// CABundle is the merged trust bundle mounted over SystemCABundle; the CA
	// environment variables point at it.
	CABundle string
	// TrustDir is a directory WriteTrustDir built from the same bundle, mounted
	// read-only at SandboxTrustDir; TrustEnv points SSL_CERT_DIR and Java at it.
	TrustDir string
	// Proxy is the proxy URL for HTTP_PROXY, HTTPS_PROXY and ALL_PROXY (both cases).
	Proxy string
	// NoProxy is NO_PROXY (both cases). Default "localhost,127.0.0.1,::1" when Proxy
	// is set.
	NoProxy string
	// Hidden paths are masked in addition to Config.HiddenPaths.
	Hidden []string
	// Stdin feeds the command; nil means /dev/null.
	Stdin io.Reader
	// Stdout and Stderr receive the output live (tee) in addition to the capture.
	Stdout io.Writer
	Stderr io.Writer
	// Limits for this run.
	Limits Limits
	// Island and OnIsland make the sandbox's network namespace its own
	// (rootless: init is born in it, PrepareSpec.Island).
	Island   []byte
	OnIsland func(files []*os.File) error
	// Labels are copied nowhere but the audit record's sandbox id; reserved.
}

// Result is how a run ended: its command's ExecResult (ExitStatus included),
// where ID is the sandbox's and Wall, CPU, PeakMemory and OOMKilled are the
// whole cgroup's (CPU user+system, PeakMemory in bytes), and what only a run
// knows.
type Result struct {
	ExecResult
	PidsLimitHit bool          // the cgroup refused a fork at pids.max
	UID          int           // the sandbox's uid (and gid)
	StartLatency time.Duration // create-to-exec: Run called until the command's execve succeeded
}

func (c *Config) applyDefaults() {
	c.Exe = cmp.Or(c.Exe, DefaultExe)
	if c.InitArgs == nil {
		c.InitArgs = DefaultInitArgs
	}
	c.CgroupRoot = cmp.Or(c.CgroupRoot, DefaultCgroupRoot)
	c.CgroupParent = cmp.Or(c.CgroupParent, DefaultCgroupParent)
	c.StateDir = cmp.Or(c.StateDir, DefaultStateDir)
	c.UIDBase = cmp.Or(c.UIDBase, DefaultUIDBase)
	c.UIDCount = cmp.Or(c.UIDCount, DefaultUIDCount)
	c.PoolSize = cmp.Or(c.PoolSize, DefaultPoolSize)
	if c.EnvAllow == nil {
		c.EnvAllow = DefaultEnvAllow
	}
	if c.HiddenPaths == nil {
		c.HiddenPaths = DefaultHiddenPaths
	}
	c.Hostname = cmp.Or(c.Hostname, DefaultHostname)
	c.Home = cmp.Or(c.Home, DefaultHome)
	c.WorkspaceDir = cmp.Or(c.WorkspaceDir, DefaultWorkspaceDir)
	c.MaxUpload = cmp.Or(c.MaxUpload, DefaultMaxUpload)
	c.Limits = c.Limits.withDefaults(Limits{
		Memory: DefaultMemory, CPUs: DefaultCPUs, Pids: DefaultPids, Timeout: DefaultTimeout,
		TmpSize: DefaultTmpSize, TmpInodes: DefaultTmpInodes, NoFile: DefaultNoFile,
		FSize: DefaultFSize, OutputCap: DefaultOutputCap,
	})
}

func (c *Config) validate() error {
	switch c.CgroupMode {
	case CgroupAuto, CgroupV1, CgroupV2:
	default:
		return fmt.Errorf("sandboxd: cgroup_mode %q: want \"\", \"v1\" or \"v2\"", c.CgroupMode)
	}
	for _, a := range c.AllowMissingControllers {
		ok := false
		for _, l := range LimitControllers {
			ok = ok || a == l
		}
		if !ok {
			return fmt.Errorf("sandboxd: allow_missing_controllers %q: want memory, cpu, pids or io", a)
		}
	}
	if c.UIDBase < 1000 || c.UIDBase+c.UIDCount > 1<<31-2 {
		return fmt.Errorf("sandboxd: uid_base %d: want >= 1000 with uid_base+uid_count < 2^31-1", c.UIDBase)
	}
	if c.UIDCount < 1 {
		return fmt.Errorf("sandboxd: uid_count %d: want >= 1", c.UIDCount)
	}
	if c.PoolSize < -1 {
		return fmt.Errorf("sandboxd: pool_size %d: want -1 (off) or >= 0", c.PoolSize)
	}
	if filepath.Base(c.CgroupParent) != c.CgroupParent || c.CgroupParent == "." || c.CgroupParent == ".." {
		return fmt.Errorf("sandboxd: cgroup_parent %q: want a single directory name", c.CgroupParent)
	}
	for _, p := range []struct{ name, v string }{{"exe", c.Exe}, {"cgroup_root", c.CgroupRoot}, {"state_dir", c.StateDir}, {"home", c.Home},
		{"workspace_dir", c.WorkspaceDir}} {
		if !filepath.IsAbs(p.v) {
			return fmt.Errorf("sandboxd: %s %q: want an absolute path", p.name, p.v)
		}
	}
	if filepath.Dir(c.Home) == "/" {
		return fmt.Errorf("sandboxd: home %q: want a path below a top-level directory (its parent gets a tmpfs)", c.Home)
	}
	if w := filepath.Clean(c.WorkspaceDir); w == "/" || within(c.Home, w) || within(w, c.Home) {
		return fmt.Errorf("sandboxd: workspace_dir %q: want a directory other than / that neither holds nor lies in home %q", c.WorkspaceDir, c.Home)
	}
	if c.MaxUpload < 1 {
		return fmt.Errorf("sandboxd: max_upload %d: want >= 1", c.MaxUpload)
	}
	for _, h := range c.HiddenPaths {
		if !filepath.IsAbs(h) {
			return fmt.Errorf("sandboxd: hidden_paths %q: want an absolute path", h)
		}
	}
	return c.Limits.validate()
}

func (l Limits) withDefaults(d Limits) Limits {
	l.Memory = cmp.Or(l.Memory, d.Memory)
	l.CPUs = cmp.Or(l.CPUs, d.CPUs)
	l.Pids = cmp.Or(l.Pids, d.Pids)
	l.Timeout = cmp.Or(l.Timeout, d.Timeout)
	l.TmpSize = cmp.Or(l.TmpSize, d.TmpSize)
	l.TmpInodes = cmp.Or(l.TmpInodes, d.TmpInodes)
	l.NoFile = cmp.Or(l.NoFile, d.NoFile)
	l.FSize = cmp.Or(l.FSize, d.FSize)
	l.OutputCap = cmp.Or(l.OutputCap, d.OutputCap)
	if l.IO == nil {
		l.IO = d.IO
	}
	return l
}

// cgroupLimits are the limits the cgroup holds.
func (l Limits) cgroupLimits() (memory int64, cpus float64, pids int64, io []IOLimit) {
	return l.Memory, l.CPUs, l.Pids, l.IO
}

// cgroupEqual reports whether l and o put the same limits in a cgroup.
func (l Limits) cgroupEqual(o Limits) bool {
	if l.Memory != o.Memory || l.CPUs != o.CPUs || l.Pids != o.Pids || len(l.IO) != len(o.IO) {
		return false
	}
	for i := range l.IO {
		if l.IO[i] != o.IO[i] {
			return false
		}
	}
	return true
}

func (l Limits) validate() error {
	switch {
	case l.Memory < 4<<20:
		return fmt.Errorf("sandboxd: limits.memory %d: want >= 4MiB", l.Memory)
	case l.CPUs < 0.01 || l.CPUs > 1024:
		return fmt.Errorf("sandboxd: limits.cpus %g: want 0.01..1024", l.CPUs)
	case l.Pids < 1:
		return fmt.Errorf("sandboxd: limits.pids %d: want >= 1", l.Pids)
	case l.Timeout < 0:
		return fmt.Errorf("sandboxd: limits.timeout %s: want > 0", l.Timeout)
	case l.TmpSize < 4096:
		return fmt.Errorf("sandboxd: limits.tmp_size %d: want >= 4096", l.TmpSize)
	case l.TmpInodes < 16:
		return fmt.Errorf("sandboxd: limits.tmp_inodes %d: want >= 16", l.TmpInodes)
	case l.NoFile < 16:
		return fmt.Errorf("sandboxd: limits.nofile %d: want >= 16", l.NoFile)
	case l.FSize < 1:
		return fmt.Errorf("sandboxd: limits.fsize %d: want >= 1", l.FSize)
	case l.OutputCap < 0:
		return fmt.Errorf("sandboxd: limits.output_cap %d: want >= 0", l.OutputCap)
	}
	for _, io := range l.IO {
		var maj, min uint32
		if _, err := fmt.Sscanf(io.Device, "%d:%d", &maj, &min); err != nil || fmt.Sprintf("%d:%d", maj, min) != io.Device {
			return fmt.Errorf("sandboxd: limits.io device %q: want \"major:minor\"", io.Device)
		}
	}
	return nil
}

func (s *Spec) validate() error {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return errors.New("sandboxd: spec.argv: want a command")
	}
	for _, p := range []struct{ name, v string }{{"netns", s.NetNS}, {"workspace", s.Workspace},
		{"workspace_target", s.WorkspaceTarget}, {"rootfs", s.RootFS}, {"ca_bundle", s.CABundle}, {"trust_dir", s.TrustDir}, {"dir", s.Dir}} {
		if p.v != "" && !filepath.IsAbs(p.v) {
			return fmt.Errorf("sandboxd: spec.%s %q: want an absolute path", p.name, p.v)
		}
	}
	for _, h := range s.Hidden {
		if !filepath.IsAbs(h) {
			return fmt.Errorf("sandboxd: spec.hidden %q: want an absolute path", h)
		}
	}
	for _, e := range s.Env {
		if i := indexByte(e, '='); i <= 0 {
			return fmt.Errorf("sandboxd: spec.env %q: want KEY=VALUE", e)
		}
	}
	return nil
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}
