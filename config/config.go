package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Defaults used when a field is absent.
const (
	DefaultPolicyMode    = "enforce"
	DefaultDNSMinTTL     = 30 * time.Second
	DefaultDNSMaxTTL     = time.Hour
	DefaultAuditFile     = "/var/log/airlock/audit.jsonl"
	DefaultAuditMaxSize  = 100 << 20
	DefaultAuditOverflow = "block"
	DefaultAuditMinFree  = 256 << 20
	DefaultCACert        = "/etc/airlock/ca.pem"
	DefaultCAKey         = "/etc/airlock/ca.key"
	DefaultMemory        = 512 << 20
	DefaultCPUs          = 1.0
	DefaultPids          = 256
	DefaultTimeout       = 10 * time.Minute
	DefaultTmpSize       = 256 << 20
	DefaultNewFlows      = 500
	DefaultNewFlowBurst  = 2000
	MaxNewFlows          = 100000
	DefaultAPISocket     = "/run/airlock/airlock.sock"
	DefaultAPIGroup      = "airlock"
	DefaultMetricsListen = "127.0.0.1:9464"

	// The daemon's sandboxes (airlock serve). A warm pool of two covers an
	// agent platform opening sandboxes one at a time without holding much idle
	// (each pooled sandbox is a namespace, an init and a cgroup).
	DefaultPoolSize = 2
	// An agent session that stops calling for half an hour has ended; a day
	// bounds one that never stops.
	DefaultIdleTimeout = 30 * time.Minute
	DefaultMaxLifetime = 24 * time.Hour
	// DefaultMaxUpload bounds one file upload's tar stream: a workspace of
	// sources fits, a disk image does not.
	DefaultMaxUpload = 1 << 30
	// DefaultMaxSandboxes is well under the executor's 1000 sandbox uids and
	// what a small host's memory holds at the default 512M limit when most
	// sandboxes idle; one owner may hold an eighth of them, so one runaway
	// agent platform leaves room for seven others.
	DefaultMaxSandboxes         = 128
	DefaultMaxSandboxesPerOwner = 16

	// Bounds of the sandbox keys.
	MaxPoolSize       = 64
	MaxMaxLifetime    = 30 * 24 * time.Hour
	MinSandboxTimeout = time.Second
	// MaxEvalTimeout bounds policy.eval_timeout: every request waits for its
	// decision.
	MaxEvalTimeout = 10 * time.Second
	MaxSandboxes   = 1000 // the executor's default uid range
)

// Config is the whole file.
type Config struct {
	Policy   Policy   `yaml:"policy"`
	DNS      DNS      `yaml:"dns"`
	Upstream Upstream `yaml:"upstream"`
	Audit    Audit    `yaml:"audit"`
	CA       CA       `yaml:"ca"`
	Secrets  Secrets  `yaml:"secrets"`
	Limits   Limits   `yaml:"limits"`
	Sandbox  Sandbox  `yaml:"sandbox"`
	API      API      `yaml:"api"`
	Metrics  Metrics  `yaml:"metrics"`
	Inspect  Inspect  `yaml:"inspect"` // inspect.go
}

// Policy selects the Rego policy and how it is applied.
type Policy struct {
	// Dir is a directory of extra `package airlock.egress` rules, tests and data;
	// empty means the embedded default policy alone.
	Dir string `yaml:"dir"`
	// Mode is enforce (deny what policy denies) or report (log it, let it pass).
	Mode string `yaml:"mode"`
	// Presets names the package-registry host lists to allow read-only
	// (python, node, go, rust, github, debian, ubuntu). Empty means the default set.
	Presets []string `yaml:"presets"`
	// Allow adds hosts (or *.x / **.x patterns) to the allowlist.
	Allow []string `yaml:"allow"`
	// EvalTimeout bounds one policy evaluation; a slower one is a
	// fail-closed policy_error deny. 0 means the engine's default (100ms);
	// at most MaxEvalTimeout.
	EvalTimeout Duration `yaml:"eval_timeout"`
	// Bundle, when set, downloads the policy directory's content as an OPA
	// bundle instead of reading Dir (bundle.go).
	Bundle *Bundle `yaml:"bundle"`
}

// DNS configures the filtering resolver.
type DNS struct {
	// Upstreams are the resolvers the filter forwards allowed names to: IP:PORT
	// (UDP, TCP on truncation) or tls://IP:PORT#SERVERNAME (DNS over TLS).
	Upstreams []string `yaml:"upstreams"`
	// MinTTL and MaxTTL clamp cached answers.
	MinTTL Duration `yaml:"min_ttl"`
	MaxTTL Duration `yaml:"max_ttl"`
	// RateLimit (queries/s) and RateBurst size each sandbox's token bucket;
	// zero means the DNS filter's default (200/s, burst 1000).
	RateLimit float64 `yaml:"rate_limit"`
	RateBurst int     `yaml:"rate_burst"`
	// UniqueNames is how many distinct names under one registered domain a
	// sandbox may ask per minute before new ones are flagged; zero: 100.
	UniqueNames int `yaml:"unique_names"`
	// BlockFlags are the exfiltration flags that deny a query whatever policy
	// says (rate_limited, many_unique_names, long_label, high_entropy); absent
	// means [rate_limited, many_unique_names], [] leaves every flag to policy.
	BlockFlags []string `yaml:"block_flags"`
	// AuditRate and AuditBurst bound each sandbox's individual DNS audit records;
	// past them queries are counted in summary records. Zero: 200/s, burst 1000.
	AuditRate  float64 `yaml:"audit_rate"`
	AuditBurst int     `yaml:"audit_burst"`
}

// Upstream configures how the gateway reaches the internet.
type Upstream struct {
	// AllowCIDRs are ranges the SSRF guard lets through (an internal registry).
	AllowCIDRs []string `yaml:"allow_cidrs"`
	// CAFile is an extra PEM bundle trusted for upstream TLS, beside the system roots.
	CAFile string `yaml:"ca_file"`
	// Proxy is the company's egress proxy every upstream connection goes
	// through (CONNECT origin:port): http://host[:port] or https://host[:port],
	// never with credentials in it. Empty: the gateway dials origins itself.
	Proxy string `yaml:"proxy"`
	// NoProxy lists origins dialed directly instead: host names, *.domain or
	// .domain (names under it), addresses and CIDRs (IP-literal origins).
	NoProxy []string `yaml:"no_proxy"`
	// ProxyAuthSecret names a secret of the secrets file whose value,
	// "user:password", is sent to the proxy as Proxy-Authorization: Basic.
	ProxyAuthSecret string `yaml:"proxy_auth_secret"`
}

// Audit configures the audit log.
type Audit struct {
	File    string `yaml:"file"`
	MaxSize Size   `yaml:"max_size"`
	// SigningKey is the Ed25519 key that signs checkpoints; empty means File + ".key"
	// (created 0600 on first use).
	SigningKey string `yaml:"signing_key"`
	// Overflow is what happens when the writer's queue is full: block (the
	// default: requests wait for room) or deny (requests are refused at once,
	// and none leaves before room for its record is reserved).
	Overflow string `yaml:"overflow"`
	// MaxFiles and MaxBytes bound the rotated files kept (count, total size);
	// after a rotation the oldest beyond either are deleted, the newest always
	// kept. Zero keeps every file.
	MaxFiles int  `yaml:"max_files"`
	MaxBytes Size `yaml:"max_bytes"`
	// MinFree refuses new sandboxes (run, attach) while the audit file's
	// filesystem has less free space: a size (256M, the default) or a share of
	// the filesystem (1%); 0 turns the check off.
	MinFree FreeSpace `yaml:"min_free"`
	// GatewayRate (records/s) and GatewayBurst size each sandbox's budget of
	// individual records of refused gateway requests; past it they are counted
	// in summary records. Zero: 200/s, burst 1000.
	GatewayRate  float64 `yaml:"gateway_rate"`
	GatewayBurst int     `yaml:"gateway_burst"`
	// Node is stamped on every record (the record's "node"): the machine the
	// log belongs to, so the streams a cluster's log collector gathers from
	// many nodes stay apart. Empty means $NODE_NAME (a DaemonSet sets it from
	// the downward API), else the host name.
	Node string `yaml:"node"`
	// Export lists the sinks `airlock serve` ships the log to (package
	// audit/export; README.md, "Audit export"). A jsonl sink with endpoint
	// "-" writes the lines to serve's stdout.
	Export []AuditExport `yaml:"export"`
}

// ExportTLS is how an audit.export sink trusts its collector: CAFile (PEM)
// instead of the system's CAs, ServerName to check, and an optional client
// certificate.
type ExportTLS struct {
	CAFile     string `yaml:"ca_file"`
	ServerName string `yaml:"server_name"`
	CertFile   string `yaml:"cert_file"`
	KeyFile    string `yaml:"key_file"`
}

// AuditExport is one sink of audit.export. Zero fields take audit/export's
// defaults; the endpoint's form is checked when serve starts the sink.
type AuditExport struct {
	// Name tells sinks apart (state file, metrics); default: Format.
	Name string `yaml:"name"`
	// Format is ocsf, otlp, syslog or jsonl.
	Format string `yaml:"format"`
	// Endpoint: a file (jsonl, ocsf) or "-" for stdout, http(s):// or
	// grpc(s):// (otlp), tcp:// or tls:// (syslog).
	Endpoint string    `yaml:"endpoint"`
	TLS      ExportTLS `yaml:"tls"`
	// StateFile keeps the last acknowledged seq; default
	// <audit.file>.<name>.export-state.
	StateFile     string   `yaml:"state_file"`
	BatchSize     int      `yaml:"batch_size"`
	FlushInterval Duration `yaml:"flush_interval"`
	BackoffMin    Duration `yaml:"backoff_min"`
	BackoffMax    Duration `yaml:"backoff_max"`
	Timeout       Duration `yaml:"timeout"`
}

// CA is the interception CA made by `airlock ca init`.
type CA struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// Secrets points at the secrets file.
type Secrets struct {
	File string `yaml:"file"`
}

// Limits caps each sandbox.
type Limits struct {
	Memory  Size     `yaml:"memory"`
	CPUs    float64  `yaml:"cpus"`
	Pids    int      `yaml:"pids"`
	Timeout Duration `yaml:"timeout"`
	TmpSize Size     `yaml:"tmp_size"`
	// NewFlows is how many new flows (connections, datagrams to a new
	// destination) per second a sandbox may start, sustained, and NewFlowBurst
	// how many above that at once; past them a datagram to a new destination
	// fails with EPERM and a TCP connect waits for its SYN's retransmission.
	// They bound each sandbox's share of the host's connection-tracking table.
	NewFlows     int `yaml:"new_flows"`
	NewFlowBurst int `yaml:"new_flow_burst"`
}

// Sandbox describes the sandbox `airlock run` creates (labels, workspace,
// env) and the daemon's sandboxes (the rest).
type Sandbox struct {
	// Labels are matched by policy (input.sandbox.labels) and secret bindings.
	Labels map[string]string `yaml:"labels"`
	// Workspace is a host directory mounted read-write at the same path.
	// Empty: `airlock run`'s current directory; "none": an empty /workspace.
	Workspace string `yaml:"workspace"`
	// Env lists extra KEY=VALUE pairs for the command.
	Env []string `yaml:"env"`
	// PoolSize sandboxes are kept ready (namespace, listeners' rules, cgroup,
	// init waiting) so a create only hands one out. 0 means the default (2);
	// -1 turns the pool off.
	PoolSize int `yaml:"pool_size"`
	// IdleTimeout ends a sandbox with no exec running and no API call for it
	// this long; a create may ask for another, up to MaxLifetime.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// MaxLifetime ends a sandbox this long after it was created whatever it
	// does; a create may ask for less, never more.
	MaxLifetime Duration `yaml:"max_lifetime"`
	// MaxUpload bounds the tar stream of one file upload.
	MaxUpload Size `yaml:"max_upload"`
	// MaxSandboxes bounds the daemon's live sandboxes; MaxSandboxesPerOwner
	// those of one caller other than root.
	MaxSandboxes         int `yaml:"max_sandboxes"`
	MaxSandboxesPerOwner int `yaml:"max_sandboxes_per_owner"`
}

// API is the daemon's control socket (never reachable from a sandbox).
type API struct {
	Socket string `yaml:"socket"`
	// Group owns the socket (mode 0660): its members may create and use
	// sandboxes of their own. Absent means DefaultAPIGroup; "" means root
	// only (mode 0600). A name or a numeric gid.
	Group string `yaml:"group"`
	// MaxConns bounds the API's open connections together, and
	// MaxConnsPerUID those of one caller other than root; a connection past
	// either is answered 429 and closed. Root may always use a share of
	// MaxConns no other caller can take. 0 derives each from the process's
	// RLIMIT_NOFILE (README.md, "Configuration"); a value that would
	// leave the gateway too few descriptors is refused when serve starts.
	MaxConns       int `yaml:"max_conns"`
	MaxConnsPerUID int `yaml:"max_conns_per_uid"`
	// MaxStreamsPerUID bounds the long-lived requests (exec output, stdin,
	// events) one caller other than root holds open at once; 0 derives it
	// (half of the per-uid connections).
	MaxStreamsPerUID int `yaml:"max_streams_per_uid"`
	// CallerLimits bounds what all the sandboxes of one caller other than
	// root book together.
	CallerLimits CallerLimits `yaml:"caller_limits"`
	// groupSet: the file named group (so "" is kept, not defaulted).
	groupSet bool
}

// CallerLimits is a ceiling on the sum of the limits of one caller's live
// sandboxes (root's are exempt). A create that would take the sum past it
// is refused naming the limit. Zero fields take the daemon's defaults,
// derived from the host: memory its RAM, pids a quarter of the kernel's
// pid_max (pids are one table for the whole host), cpus no ceiling (CPU
// quotas share the host's cores, they cannot use them up for others).
type CallerLimits struct {
	Memory Size    `yaml:"memory"`
	CPUs   float64 `yaml:"cpus"`
	Pids   int64   `yaml:"pids"`
}

// Bounds of the api keys.
const (
	MaxAPIConns = 1 << 20
)

// UnmarshalYAML tells an absent group (the default) from an empty one (root
// only).
func (a *API) UnmarshalYAML(n *yaml.Node) error {
	var raw struct {
		Socket           string       `yaml:"socket"`
		Group            *string      `yaml:"group"`
		MaxConns         int          `yaml:"max_conns"`
		MaxConnsPerUID   int          `yaml:"max_conns_per_uid"`
		MaxStreamsPerUID int          `yaml:"max_streams_per_uid"`
		CallerLimits     CallerLimits `yaml:"caller_limits"`
	}
	// n.Decode does not inherit the file decoder's KnownFields: check here,
	// one level down too.
	if err := knownKeys(n, "config.API", "socket", "group", "max_conns", "max_conns_per_uid", "max_streams_per_uid", "caller_limits"); err != nil {
		return err
	}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "caller_limits" {
				if err := knownKeys(n.Content[i+1], "config.CallerLimits", "memory", "cpus", "pids"); err != nil {
					return err
				}
			}
		}
	}
	if err := n.Decode(&raw); err != nil {
		return err
	}
	a.Socket = raw.Socket
	a.MaxConns, a.MaxConnsPerUID, a.MaxStreamsPerUID = raw.MaxConns, raw.MaxConnsPerUID, raw.MaxStreamsPerUID
	a.CallerLimits = raw.CallerLimits
	if raw.Group != nil {
		a.Group, a.groupSet = *raw.Group, true
	}
	return nil
}

// knownKeys refuses a key of mapping n that is not one of keys.
func knownKeys(n *yaml.Node, typ string, keys ...string) error {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i].Value; !slices.Contains(keys, k) {
			return fmt.Errorf("line %d: field %s not found in type %s", n.Content[i].Line, k, typ)
		}
	}
	return nil
}

// validate checks the api keys other than group.
func (a *API) validate() error {
	switch {
	case a.MaxConns < 0 || a.MaxConns > MaxAPIConns:
		return fmt.Errorf("api.max_conns: %d is not between 0 (derived from RLIMIT_NOFILE) and %d", a.MaxConns, MaxAPIConns)
	case a.MaxConnsPerUID < 0 || a.MaxConnsPerUID > MaxAPIConns:
		return fmt.Errorf("api.max_conns_per_uid: %d is not between 0 (derived) and %d", a.MaxConnsPerUID, MaxAPIConns)
	case a.MaxConns > 0 && a.MaxConnsPerUID > a.MaxConns:
		return fmt.Errorf("api.max_conns_per_uid: %d is more than api.max_conns (%d)", a.MaxConnsPerUID, a.MaxConns)
	case a.MaxStreamsPerUID < 0 || a.MaxStreamsPerUID > MaxAPIConns:
		return fmt.Errorf("api.max_streams_per_uid: %d is not between 0 (derived) and %d", a.MaxStreamsPerUID, MaxAPIConns)
	case a.MaxConnsPerUID > 0 && a.MaxStreamsPerUID > a.MaxConnsPerUID:
		return fmt.Errorf("api.max_streams_per_uid: %d is more than api.max_conns_per_uid (%d): each stream holds a connection", a.MaxStreamsPerUID, a.MaxConnsPerUID)
	}
	cl := a.CallerLimits
	switch {
	case cl.Memory < 0 || cl.Memory > 0 && cl.Memory < 4<<20:
		return fmt.Errorf("api.caller_limits.memory: %s is not 0 (the host's memory) or at least 4M", cl.Memory)
	case !(cl.CPUs == 0 || cl.CPUs >= 0.01) || math.IsInf(cl.CPUs, 0):
		return fmt.Errorf("api.caller_limits.cpus: %v is not 0 (no ceiling) or at least 0.01", cl.CPUs)
	case cl.Pids < 0:
		return fmt.Errorf("api.caller_limits.pids: %d is not 0 (a quarter of the kernel's pid_max) or a positive number", cl.Pids)
	}
	return nil
}

// SetGroup sets Group explicitly ("" is root only), as a flag would.
func (a *API) SetGroup(g string) { a.Group, a.groupSet = g, true }

// Metrics is the Prometheus listener, on the host side only.
type Metrics struct {
	Listen string `yaml:"listen"`
}

// Default returns the configuration used when no file is given.
func Default() Config {
	var c Config
	c.applyDefaults()
	return c
}

// Load reads and validates a YAML file. An empty path returns Default().
func Load(path string) (Config, error) {
	if path == "" {
		return Default(), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	c, err := Decode(f)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Decode decodes strictly, applies defaults and validates.
func Decode(r io.Reader) (Config, error) {
	data, err := io.ReadAll(io.LimitReader(r, 1<<20+1))
	if err != nil {
		return Config{}, err
	}
	if len(data) > 1<<20 {
		return Config{}, errors.New("file larger than 1 MiB")
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("parse: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Config{}, errors.New("parse: more than one YAML document")
	}
	c.applyDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func (c *Config) applyDefaults() {
	if c.Policy.Mode == "" {
		c.Policy.Mode = DefaultPolicyMode
	}
	c.Policy.Bundle.applyDefaults()
	if c.DNS.MinTTL == 0 {
		c.DNS.MinTTL = Duration(DefaultDNSMinTTL)
	}
	if c.DNS.MaxTTL == 0 {
		c.DNS.MaxTTL = Duration(DefaultDNSMaxTTL)
	}
	if c.Audit.File == "" {
		c.Audit.File = DefaultAuditFile
	}
	if c.Audit.MaxSize == 0 {
		c.Audit.MaxSize = DefaultAuditMaxSize
	}
	if c.Audit.Overflow == "" {
		c.Audit.Overflow = DefaultAuditOverflow
	}
	if !c.Audit.MinFree.set {
		c.Audit.MinFree = FreeSpace{Bytes: DefaultAuditMinFree, set: true}
	}
	if c.CA.Cert == "" {
		c.CA.Cert = DefaultCACert
	}
	if c.CA.Key == "" {
		c.CA.Key = DefaultCAKey
	}
	if c.Limits.Memory == 0 {
		c.Limits.Memory = DefaultMemory
	}
	if c.Limits.CPUs == 0 {
		c.Limits.CPUs = DefaultCPUs
	}
	if c.Limits.Pids == 0 {
		c.Limits.Pids = DefaultPids
	}
	if c.Limits.Timeout == 0 {
		c.Limits.Timeout = Duration(DefaultTimeout)
	}
	if c.Limits.TmpSize == 0 {
		c.Limits.TmpSize = DefaultTmpSize
	}
	if c.Limits.NewFlows == 0 {
		c.Limits.NewFlows = DefaultNewFlows
	}
	if c.Limits.NewFlowBurst == 0 {
		c.Limits.NewFlowBurst = DefaultNewFlowBurst
	}
	if c.API.Socket == "" {
		c.API.Socket = DefaultAPISocket
	}
	if !c.API.groupSet {
		c.API.Group, c.API.groupSet = DefaultAPIGroup, true
	}
	c.Sandbox.applyDefaults()
	c.Inspect.applyDefaults()
	if c.Metrics.Listen == "" {
		c.Metrics.Listen = DefaultMetricsListen
	}
}

// Validate names the first bad field and what it allows.
func (c *Config) Validate() error {
	switch c.Policy.Mode {
	case "enforce", "report":
	default:
		return fmt.Errorf("policy.mode: %q is not one of enforce, report", c.Policy.Mode)
	}
	if t := time.Duration(c.Policy.EvalTimeout); t < 0 || t > MaxEvalTimeout {
		return fmt.Errorf("policy.eval_timeout: %s is not between 0 (the default, 100ms) and %s", t, MaxEvalTimeout)
	}
	for i, u := range c.DNS.Upstreams {
		addr := u
		if rest, ok := strings.CutPrefix(u, "tls://"); ok {
			var name string
			addr, name, _ = strings.Cut(rest, "#")
			if name == "" {
				return fmt.Errorf("dns.upstreams[%d]: %q: DNS over TLS needs tls://IP:PORT#SERVERNAME", i, u)
			}
		}
		if _, err := netip.ParseAddrPort(addr); err != nil {
			return fmt.Errorf("dns.upstreams[%d]: %q is not IP:PORT or tls://IP:PORT#SERVERNAME (a name would need a resolver to find the resolver)", i, u)
		}
	}
	if c.DNS.MinTTL < 0 || c.DNS.MaxTTL < 0 {
		return errors.New("dns.min_ttl and dns.max_ttl must not be negative")
	}
	if c.DNS.RateLimit < 0 || c.DNS.RateBurst < 0 || c.DNS.UniqueNames < 0 || c.DNS.AuditRate < 0 || c.DNS.AuditBurst < 0 {
		return errors.New("dns.rate_limit, rate_burst, unique_names, audit_rate and audit_burst must not be negative")
	}
	for i, f := range c.DNS.BlockFlags {
		switch f {
		case "rate_limited", "many_unique_names", "long_label", "high_entropy":
		default:
			return fmt.Errorf("dns.block_flags[%d]: %q is not one of rate_limited, many_unique_names, long_label, high_entropy", i, f)
		}
	}
	if c.DNS.MinTTL > c.DNS.MaxTTL {
		return fmt.Errorf("dns.min_ttl %s is greater than dns.max_ttl %s", c.DNS.MinTTL, c.DNS.MaxTTL)
	}
	if err := c.Policy.validateBundle(c.Secrets.File); err != nil {
		return err
	}
	if err := c.Audit.validate(); err != nil {
		return err
	}
	for i, s := range c.Upstream.AllowCIDRs {
		if _, err := netip.ParsePrefix(s); err != nil {
			return fmt.Errorf("upstream.allow_cidrs[%d]: %q is not a CIDR such as 10.0.0.0/8", i, s)
		}
	}
	if err := c.Upstream.validateProxy(c.Secrets.File); err != nil {
		return err
	}
	// Defaults replace absent (zero) limits before Validate, so a zero here was
	// asked for explicitly (--cpus 0, --pids 0, --timeout 0s, --tmp-size 0): it is
	// an error, never a silent fallback to the default. NaN fails every
	// comparison, so the cpus check is written to reject it too.
	if !(c.Limits.CPUs >= 0.01 && c.Limits.CPUs <= 1024) {
		return fmt.Errorf("limits.cpus: %v is not between 0.01 and 1024", c.Limits.CPUs)
	}
	if c.Limits.Pids < 1 {
		return fmt.Errorf("limits.pids: %d must be at least 1", c.Limits.Pids)
	}
	if c.Limits.Memory < 4<<20 {
		return fmt.Errorf("limits.memory: %s is below the 4M minimum", c.Limits.Memory)
	}
	if c.Limits.Timeout <= 0 {
		return fmt.Errorf("limits.timeout: %s must be positive", c.Limits.Timeout)
	}
	if c.Limits.TmpSize < 4096 {
		return fmt.Errorf("limits.tmp_size: %s is below the 4096-byte minimum", c.Limits.TmpSize)
	}
	if c.Limits.NewFlows < 1 || c.Limits.NewFlows > MaxNewFlows {
		return fmt.Errorf("limits.new_flows: %d is not between 1 and %d per second", c.Limits.NewFlows, MaxNewFlows)
	}
	if c.Limits.NewFlowBurst < 1 || c.Limits.NewFlowBurst > MaxNewFlows {
		return fmt.Errorf("limits.new_flow_burst: %d is not between 1 and %d", c.Limits.NewFlowBurst, MaxNewFlows)
	}
	if err := c.Sandbox.validate(); err != nil {
		return err
	}
	if err := c.Inspect.validate(); err != nil {
		return err
	}
	if !validGroup(c.API.Group) {
		return fmt.Errorf("api.group: %q is not a group name or a numeric gid (\"\" means root only)", c.API.Group)
	}
	return c.API.validate()
}

// validateProxy checks upstream.proxy, no_proxy and proxy_auth_secret.
func (u *Upstream) validateProxy(secretsFile string) error {
	if u.Proxy == "" {
		if len(u.NoProxy) > 0 || u.ProxyAuthSecret != "" {
			return errors.New("upstream.no_proxy and upstream.proxy_auth_secret need upstream.proxy")
		}
		return nil
	}
	p, err := url.Parse(u.Proxy)
	switch {
	case err != nil:
		return fmt.Errorf("upstream.proxy: %q is not a URL: %w", u.Proxy, err)
	case p.User != nil:
		return errors.New("upstream.proxy: the URL carries credentials; put \"user:password\" in a secret of the secrets file and name it in upstream.proxy_auth_secret")
	case p.Scheme != "http" && p.Scheme != "https":
		return fmt.Errorf("upstream.proxy: %q: scheme must be http or https", u.Proxy)
	case p.Hostname() == "" || (p.Path != "" && p.Path != "/") || p.RawQuery != "" || p.Fragment != "":
		return fmt.Errorf("upstream.proxy: %q: want http://host[:port] or https://host[:port]", u.Proxy)
	}
	for i, e := range u.NoProxy {
		if !validNoProxy(e) {
			return fmt.Errorf("upstream.no_proxy[%d]: %q is not a host name, *.domain, .domain, address or CIDR", i, e)
		}
	}
	if u.ProxyAuthSecret != "" && secretsFile == "" {
		return fmt.Errorf("upstream.proxy_auth_secret: %q names a secret but secrets.file is not set", u.ProxyAuthSecret)
	}
	return nil
}

// validNoProxy reports whether e is an address, a CIDR, or a host name
// (letters, digits, '-' and '.') optionally written *.name or .name.
func validNoProxy(e string) bool {
	if _, err := netip.ParsePrefix(e); err == nil {
		return true
	}
	if _, err := netip.ParseAddr(e); err == nil {
		return true
	}
	name := strings.TrimPrefix(strings.TrimPrefix(e, "*"), ".")
	if name == "" || len(name) > 253 {
		return false
	}
	for _, l := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		if l == "" || len(l) > 63 {
			return false
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

func (s *Sandbox) applyDefaults() {
	if s.PoolSize == 0 {
		s.PoolSize = DefaultPoolSize
	}
	if s.IdleTimeout == 0 {
		s.IdleTimeout = Duration(DefaultIdleTimeout)
	}
	if s.MaxLifetime == 0 {
		s.MaxLifetime = Duration(DefaultMaxLifetime)
	}
	if s.MaxUpload == 0 {
		s.MaxUpload = DefaultMaxUpload
	}
	if s.MaxSandboxes == 0 {
		s.MaxSandboxes = DefaultMaxSandboxes
	}
	if s.MaxSandboxesPerOwner == 0 {
		s.MaxSandboxesPerOwner = min(DefaultMaxSandboxesPerOwner, s.MaxSandboxes)
	}
}

func (s *Sandbox) validate() error {
	for k := range s.Labels {
		if k == "" {
			return errors.New("sandbox.labels: empty label name")
		}
	}
	for i, kv := range s.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("sandbox.env[%d]: %q is not KEY=VALUE", i, kv)
		}
	}
	switch {
	case s.PoolSize < -1 || s.PoolSize > MaxPoolSize:
		return fmt.Errorf("sandbox.pool_size: %d is not between 1 and %d (-1 turns the pool off)", s.PoolSize, MaxPoolSize)
	case time.Duration(s.MaxLifetime) < MinSandboxTimeout || time.Duration(s.MaxLifetime) > MaxMaxLifetime:
		return fmt.Errorf("sandbox.max_lifetime: %s is not between %s and %s", s.MaxLifetime, MinSandboxTimeout, MaxMaxLifetime)
	case time.Duration(s.IdleTimeout) < MinSandboxTimeout || s.IdleTimeout > s.MaxLifetime:
		return fmt.Errorf("sandbox.idle_timeout: %s is not between %s and sandbox.max_lifetime (%s)", s.IdleTimeout, MinSandboxTimeout, s.MaxLifetime)
	case s.MaxUpload < 4096:
		return fmt.Errorf("sandbox.max_upload: %s is below the 4096-byte minimum", s.MaxUpload)
	case s.MaxSandboxes < 1 || s.MaxSandboxes > MaxSandboxes:
		return fmt.Errorf("sandbox.max_sandboxes: %d is not between 1 and %d", s.MaxSandboxes, MaxSandboxes)
	case s.MaxSandboxesPerOwner < 1 || s.MaxSandboxesPerOwner > s.MaxSandboxes:
		return fmt.Errorf("sandbox.max_sandboxes_per_owner: %d is not between 1 and sandbox.max_sandboxes (%d)", s.MaxSandboxesPerOwner, s.MaxSandboxes)
	}
	return nil
}

// validGroup accepts "" (root only), a numeric gid or a POSIX-style group
// name (letters, digits, '_', '-', '.', not starting with '-', at most 32).
func validGroup(g string) bool {
	if g == "" {
		return true
	}
	if len(g) > 32 || g[0] == '-' {
		return false
	}
	for _, r := range g {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

func (a *Audit) validate() error {
	switch a.Overflow {
	case "block", "deny":
	default:
		return fmt.Errorf("audit.overflow: %q is not one of block, deny", a.Overflow)
	}
	switch {
	case a.MaxSize < 4096:
		return fmt.Errorf("audit.max_size: %s is below the 4096-byte minimum", a.MaxSize)
	case a.MaxFiles < 0:
		return fmt.Errorf("audit.max_files: %d must be 0 (keep every file) or more", a.MaxFiles)
	case a.MaxBytes < 0:
		return fmt.Errorf("audit.max_bytes: %s must be 0 (no bound) or more", a.MaxBytes)
	case !(a.GatewayRate >= 0) || math.IsInf(a.GatewayRate, 0):
		return fmt.Errorf("audit.gateway_rate: %v must be 0 (the default, 200/s) or a positive number of records per second", a.GatewayRate)
	case a.GatewayBurst < 0:
		return fmt.Errorf("audit.gateway_burst: %d must be 0 (the default, 1000) or more", a.GatewayBurst)
	case !ValidNodeName(a.Node):
		return fmt.Errorf("audit.node: %q is not a node name (at most 253 letters, digits, '-', '.' or '_'); leave it out for $NODE_NAME or the host name", a.Node)
	}
	return a.validateExport()
}

func (a *Audit) validateExport() error {
	names := map[string]bool{}
	stdout := false
	for i, e := range a.Export {
		switch e.Format {
		case "ocsf", "otlp", "syslog", "jsonl":
		default:
			return fmt.Errorf("audit.export[%d].format: %q is not one of ocsf, otlp, syslog, jsonl", i, e.Format)
		}
		name := e.Name
		if name == "" {
			name = e.Format
		}
		switch {
		case e.Endpoint == "":
			return fmt.Errorf("audit.export[%d].endpoint: required (a file or - for stdout for jsonl and ocsf, http(s):// or grpc(s):// for otlp, tcp:// or tls:// for syslog)", i)
		case names[name]:
			return fmt.Errorf("audit.export[%d].name: %q is used by another sink (give each its own name)", i, name)
		case e.Endpoint == "-" && e.Format != "jsonl" && e.Format != "ocsf":
			return fmt.Errorf("audit.export[%d].endpoint: - (stdout) is for jsonl and ocsf, not %s", i, e.Format)
		case e.Endpoint == "-" && stdout:
			return fmt.Errorf("audit.export[%d].endpoint: - (stdout) is used by another sink (their lines would interleave)", i)
		case e.BatchSize < 0:
			return fmt.Errorf("audit.export[%d].batch_size: %d must be 0 (the default, 500) or more", i, e.BatchSize)
		}
		names[name] = true
		stdout = stdout || e.Endpoint == "-"
	}
	return nil
}

// ValidNodeName reports whether name may be audit.node: empty, or at most
// 253 bytes of ASCII letters, digits, '-', '.' and '_' (the writer's rule,
// audit.ValidNode; config imports no airlock package).
func ValidNodeName(name string) bool {
	if len(name) > 253 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

// FreeSpace is a free-space threshold: a size (256M) or a percentage of the
// filesystem (1%); 0 turns the check it guards off.
type FreeSpace struct {
	Bytes   Size
	Percent float64
	set     bool // decoded from the file (so an explicit 0 is not replaced by the default)
}

// ParseFreeSpace parses "256M", "1%" or "0".
func ParseFreeSpace(s string) (FreeSpace, error) {
	t := strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(t, "%"); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || !(v >= 0 && v <= 100) {
			return FreeSpace{}, fmt.Errorf("free space %q: want a percentage between 0%% and 100%%, or a size such as 256M", s)
		}
		return FreeSpace{Percent: v, set: true}, nil
	}
	b, err := ParseSize(t)
	if err != nil {
		return FreeSpace{}, fmt.Errorf("free space %q: want a size such as 256M or a percentage such as 1%%", s)
	}
	return FreeSpace{Bytes: b, set: true}, nil
}

// Of is the threshold in bytes on a filesystem of total bytes.
func (f FreeSpace) Of(total uint64) uint64 {
	if f.Percent > 0 {
		return uint64(float64(total) * f.Percent / 100)
	}
	return uint64(f.Bytes)
}

func (f FreeSpace) String() string {
	if f.Percent > 0 {
		return strconv.FormatFloat(f.Percent, 'f', -1, 64) + "%"
	}
	return f.Bytes.String()
}

// Set implements pflag.Value.
func (f *FreeSpace) Set(v string) error {
	p, err := ParseFreeSpace(v)
	if err != nil {
		return err
	}
	*f = p
	return nil
}

// Type implements pflag.Value.
func (f *FreeSpace) Type() string { return "size-or-percent" }

// UnmarshalText lets JSON use the same spellings as YAML.
func (f *FreeSpace) UnmarshalText(b []byte) error { return f.Set(string(b)) }

// UnmarshalYAML accepts a size, a number or a percentage.
func (f *FreeSpace) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: free space must be a scalar like 256M or 1%%", n.Line)
	}
	if err := f.Set(n.Value); err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	return nil
}

// Size is a byte count written with an optional unit: 512, 64K, 512M, 100MB, 1G,
// 1GiB (binary multiples in every spelling, as memory limits are).
type Size int64

// ParseSize parses a Size, naming the problem on error.
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("size %q: empty", s)
	}
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToUpper(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("size %q: no number (want e.g. 512M, 1G)", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: bad number", s)
	}
	mult := map[string]float64{"": 1, "B": 1,
		"K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10,
		"M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20,
		"G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30,
		"T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("size %q: unknown unit %q (want K, M, G or T)", s, unit)
	}
	v := f * mult
	if v > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	// A fraction of a byte would be cut off, and "0.5" would become 0,
	// which means "the default" to every limit: refuse what would not be
	// enforced as written.
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("size %q: not a whole number of bytes (%.1f)", s, v)
	}
	return Size(v), nil
}

func (s Size) String() string {
	switch {
	case s >= 1<<30 && s%(1<<30) == 0:
		return strconv.FormatInt(int64(s>>30), 10) + "G"
	case s >= 1<<20 && s%(1<<20) == 0:
		return strconv.FormatInt(int64(s>>20), 10) + "M"
	case s >= 1<<10 && s%(1<<10) == 0:
		return strconv.FormatInt(int64(s>>10), 10) + "K"
	}
	return strconv.FormatInt(int64(s), 10)
}

// Set implements pflag.Value so flags share the parser.
func (s *Size) Set(v string) error {
	p, err := ParseSize(v)
	if err != nil {
		return err
	}
	*s = p
	return nil
}

// Type implements pflag.Value.
func (s *Size) Type() string { return "size" }

// UnmarshalText lets JSON (the daemon API) use the same spellings as YAML.
func (s *Size) UnmarshalText(b []byte) error { return s.Set(string(b)) }

// UnmarshalYAML accepts a number or a string with a unit.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: size must be a scalar like 512M", n.Line)
	}
	p, err := ParseSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*s = p
	return nil
}

// Duration is a time.Duration written as 30s, 10m, 1h.
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

// Set implements pflag.Value.
func (d *Duration) Set(v string) error {
	p, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("duration %q: want e.g. 30s, 10m, 1h", v)
	}
	if p < 0 {
		return fmt.Errorf("duration %q: negative", v)
	}
	// "0.4ns" parses to 0, which means "the default" to every timeout:
	// refuse a duration that is not zero as written but is as parsed.
	if p == 0 && strings.ContainsAny(v, "123456789") {
		return fmt.Errorf("duration %q: under a nanosecond (write 0 for the default)", v)
	}
	*d = Duration(p)
	return nil
}

// Type implements pflag.Value.
func (d *Duration) Type() string { return "duration" }

// UnmarshalText lets JSON (the daemon API) use the same spellings as YAML.
func (d *Duration) UnmarshalText(b []byte) error { return d.Set(string(b)) }

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: duration must be a scalar like 30s", n.Line)
	}
	if err := d.Set(n.Value); err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	return nil
}
