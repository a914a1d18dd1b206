package netns

import (
	"cmp"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultRunDir          = "/run/netns"
	DefaultStateDir        = "/run/airlock/netns"
	DefaultIslandAddr      = "10.255.255.254/32"
	DefaultExplicitPort    = 3128
	DefaultTransparentPort = 15001
	DefaultDNSPort         = 53
	DefaultNFLogGroup      = 100
	DefaultDropBurst       = 10
	DefaultDropInterval    = time.Second
	DefaultIPTables        = IPTablesAuto
	DefaultExecTimeout     = 10 * time.Second
	DefaultNewFlowRate     = 500
	DefaultNewFlowBurst    = 2000
	// MaxNewFlowRate and MaxNewFlowBurst are the most the hashlimit rule is
	// given (the kernel takes more; a sandbox never needs it).
	MaxNewFlowRate  = 100000
	MaxNewFlowBurst = 100000
)

// IPTables backends for Config.IPTables.
const (
	IPTablesAuto   = "auto"
	IPTablesNFT    = "nft"
	IPTablesLegacy = "legacy"
)

// NamePrefix starts the name of every namespace this package owns under RunDir.
const NamePrefix = "airlock-"

// poolPrefix names pre-made namespaces that have no sandbox yet.
const poolPrefix = NamePrefix + "pool-"

// Config configures a Manager. The zero value is usable: New fills defaults.
// It has no YAML form of its own: package daemon fills it from config.Config.
type Config struct {
	// RunDir is where namespaces are bind-mounted (the `ip netns` directory).
	RunDir string
	// StateDir holds one JSON file per sandbox so Recover can re-attach after a
	// crash. It must not be reachable from a sandbox.
	StateDir string
	// IslandAddr is the address put on lo and used as the default route's source,
	// a single-address prefix outside 127.0.0.0/8 (IPv4 only).
	IslandAddr string
	// ExplicitPort, TransparentPort and DNSPort are the listeners' ports on
	// 127.0.0.1 inside the namespace; they must differ.
	ExplicitPort    int
	TransparentPort int
	DNSPort         int
	// NFLogGroup is the nfnetlink_log group the drop rules log to (1..65535). Each
	// namespace has its own groups, so one number serves every sandbox.
	NFLogGroup int
	// DropBurst drop records per sandbox are written individually in each
	// DropInterval; the rest are counted and summarized in one record.
	DropBurst    int
	DropInterval time.Duration
	// PoolSize namespaces are kept ready (rules installed, no listeners) so that
	// Create only has to claim one. 0 disables the pool.
	PoolSize int
	// IPTables is the backend: auto, nft or legacy (netns/DESIGN.md).
	IPTables string
	// ExecTimeout bounds each iptables-restore/iptables-save run.
	ExecTimeout time.Duration
	// NewFlowRate is how many new flows (connections, datagrams to a new
	// destination) per second a sandbox may start, sustained, and NewFlowBurst
	// how many above that at once; past them a new flow's first packet is
	// dropped (a datagram's sender gets EPERM, a TCP connect waits for its SYN's
	// retransmission). They bound the sandbox's share of the host's conntrack
	// table (rules.go).
	NewFlowRate  int
	NewFlowBurst int
}

// withDefaults returns c with zero fields set to the defaults.
func (c Config) withDefaults() Config {
	c.RunDir = cmp.Or(c.RunDir, DefaultRunDir)
	c.StateDir = cmp.Or(c.StateDir, DefaultStateDir)
	c.IslandAddr = cmp.Or(c.IslandAddr, DefaultIslandAddr)
	c.ExplicitPort = cmp.Or(c.ExplicitPort, DefaultExplicitPort)
	c.TransparentPort = cmp.Or(c.TransparentPort, DefaultTransparentPort)
	c.DNSPort = cmp.Or(c.DNSPort, DefaultDNSPort)
	c.NFLogGroup = cmp.Or(c.NFLogGroup, DefaultNFLogGroup)
	c.DropBurst = cmp.Or(c.DropBurst, DefaultDropBurst)
	c.DropInterval = cmp.Or(c.DropInterval, DefaultDropInterval)
	c.IPTables = cmp.Or(c.IPTables, DefaultIPTables)
	c.ExecTimeout = cmp.Or(c.ExecTimeout, DefaultExecTimeout)
	c.NewFlowRate = cmp.Or(c.NewFlowRate, DefaultNewFlowRate)
	c.NewFlowBurst = cmp.Or(c.NewFlowBurst, DefaultNewFlowBurst)
	return c
}

// validate checks a defaulted Config and names the bad field.
func (c Config) validate() error {
	if !strings.HasPrefix(c.RunDir, "/") {
		return fmt.Errorf("netns: run_dir %q: must be an absolute path", c.RunDir)
	}
	if !strings.HasPrefix(c.StateDir, "/") {
		return fmt.Errorf("netns: state_dir %q: must be an absolute path", c.StateDir)
	}
	p, err := netip.ParsePrefix(c.IslandAddr)
	if err != nil {
		return fmt.Errorf("netns: island_addr %q: %w", c.IslandAddr, err)
	}
	if !p.Addr().Is4() || p.Bits() != 32 || p.Addr().IsLoopback() || p.Addr().IsUnspecified() || p.Addr().IsMulticast() {
		return fmt.Errorf("netns: island_addr %q: must be one IPv4 address as a /32 outside 127.0.0.0/8", c.IslandAddr)
	}
	ports := map[string]int{"explicit_port": c.ExplicitPort, "transparent_port": c.TransparentPort, "dns_port": c.DNSPort}
	seen := map[int]string{}
	for _, name := range []string{"explicit_port", "transparent_port", "dns_port"} {
		v := ports[name]
		if v < 1 || v > 65535 {
			return fmt.Errorf("netns: %s %d: must be in 1..65535", name, v)
		}
		if other, dup := seen[v]; dup {
			return fmt.Errorf("netns: %s %d: same as %s", name, v, other)
		}
		seen[v] = name
	}
	if c.NFLogGroup < 1 || c.NFLogGroup > 65535 {
		return fmt.Errorf("netns: nflog_group %d: must be in 1..65535", c.NFLogGroup)
	}
	if c.DropBurst < 1 {
		return fmt.Errorf("netns: drop_burst %d: must be at least 1", c.DropBurst)
	}
	if c.DropInterval < 10*time.Millisecond {
		return fmt.Errorf("netns: drop_interval %s: must be at least 10ms", c.DropInterval)
	}
	if c.NewFlowRate < 1 || c.NewFlowRate > MaxNewFlowRate {
		return fmt.Errorf("netns: new_flow_rate %d: must be in 1..%d", c.NewFlowRate, MaxNewFlowRate)
	}
	if c.NewFlowBurst < 1 || c.NewFlowBurst > MaxNewFlowBurst {
		return fmt.Errorf("netns: new_flow_burst %d: must be in 1..%d", c.NewFlowBurst, MaxNewFlowBurst)
	}
	if c.PoolSize < 0 || c.PoolSize > 1024 {
		return fmt.Errorf("netns: pool_size %d: must be in 0..1024", c.PoolSize)
	}
	switch c.IPTables {
	case IPTablesAuto, IPTablesNFT, IPTablesLegacy:
	default:
		return fmt.Errorf("netns: iptables %q: must be one of auto, nft, legacy", c.IPTables)
	}
	if c.ExecTimeout <= 0 {
		return fmt.Errorf("netns: exec_timeout %s: must be positive", c.ExecTimeout)
	}
	return nil
}

// islandAddr returns the parsed island address; validate has checked it.
func (c Config) islandAddr() netip.Addr {
	return netip.MustParsePrefix(c.IslandAddr).Addr()
}

var idPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`) })

// ValidateID reports whether id can name a sandbox namespace: 1 to 63 characters
// from [a-zA-Z0-9_.-], starting with a letter or digit, and not starting with
// "pool-" (reserved for the pool).
func ValidateID(id string) error {
	if !idPattern().MatchString(id) {
		return fmt.Errorf("netns: sandbox id %q: must be 1-63 characters of [a-zA-Z0-9_.-] starting with a letter or digit", id)
	}
	if strings.HasPrefix(id, "pool-") {
		return fmt.Errorf("netns: sandbox id %q: the prefix pool- is reserved", id)
	}
	return nil
}

// backendBinaries returns the restore and save commands for a backend name.
func backendBinaries(backend string) (restore, save string) {
	if backend == IPTablesLegacy {
		return "iptables-legacy-restore", "iptables-legacy-save"
	}
	return "iptables-nft-restore", "iptables-nft-save"
}

// lookBin finds an iptables binary on PATH, else in /usr/sbin or /sbin: a
// user's PATH often leaves them out (Debian's does), and rootless airlock
// runs them too.
func lookBin(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if p, serr := exec.LookPath(dir + "/" + name); serr == nil {
			return p, nil
		}
	}
	return "", err
}

// resolveBackend turns auto into nft or legacy by looking at what is installed.
func resolveBackend(want string) (string, error) {
	switch want {
	case IPTablesNFT, IPTablesLegacy:
		r, s := backendBinaries(want)
		for _, b := range []string{r, s} {
			if _, err := lookBin(b); err != nil {
				return "", fmt.Errorf("netns: iptables %s: %s not found: %w", want, b, err)
			}
		}
		return want, nil
	}
	// Legacy first: iptables-legacy-restore of the island ruleset takes ~5 ms here,
	// iptables-nft-restore ~35 ms, which alone would miss the 15 ms create target.
	for _, b := range []string{IPTablesLegacy, IPTablesNFT} {
		if _, err := resolveBackend(b); err == nil {
			return b, nil
		}
	}
	return "", fmt.Errorf("netns: iptables auto: neither iptables-legacy-restore nor iptables-nft-restore is installed")
}
