package dnsfilter

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/ipguard"
	"github.com/airlock-dev/airlock/policy"
)

// Defaults applied by New to zero-valued Config fields.
const (
	DefaultMinTTL             = 30 * time.Second
	DefaultMaxTTL             = time.Hour
	DefaultTimeout            = 2 * time.Second
	DefaultPolicyTimeout      = time.Second
	DefaultCacheSize          = 10000
	DefaultDecisionCacheSize  = 4096
	DefaultRateLimit          = 200.0 // queries per second per sandbox
	DefaultRateBurst          = 1000
	DefaultUniqueNames        = 100 // distinct names per registered domain per window
	DefaultUniqueWindow       = time.Minute
	DefaultLongLabel          = 40  // labels longer than this are flagged
	DefaultEntropy            = 3.5 // bits per character
	DefaultEntropyMinLen      = 16  // shorter labels are not scored for entropy
	DefaultPTRDomain          = "airlock.internal"
	DefaultEDNSSize           = 1232  // the DNS flag day 2020 size, for upstream and replies
	DefaultMaxTCPConns        = 64    // per sandbox
	DefaultNameMemoPerSandbox = 4096  // addresses remembered per sandbox (NameFor)
	DefaultNameMemoTotal      = 65536 // addresses remembered for all sandboxes together

	DefaultAuditRate            = 200.0 // individual audit records per second per sandbox
	DefaultAuditBurst           = 1000
	DefaultAuditSummaryInterval = time.Second
	DefaultAuditTopNames        = 10
	MaxAuditTopNames            = 100
)

// Exfiltration flags: what dnsfilter passes to policy in input.dns.flags and writes
// to the audit record's flags.
const (
	FlagRateLimited     = "rate_limited"
	FlagManyUniqueNames = "many_unique_names"
	FlagLongLabel       = "long_label"
	FlagHighEntropy     = "high_entropy"
)

// FlagRebindingDropped is written to the audit record (never to policy input: it is
// known only after the upstream answered) when answers were dropped by the guard.
const FlagRebindingDropped = "rebinding_dropped"

// defaultBlockFlags are the flags that deny a query without asking policy when
// Config.BlockFlags is nil. An empty non-nil list blocks on nothing.
//
// many_unique_names is blocked by default because it is the one hard bound on
// DNS exfiltration under an allowed wildcard: every new name reaches the
// upstream (and the domain's authoritative servers), and long_label and
// high_entropy are heuristics that short, hyphenated labels evade. Only names
// first seen after the threshold are flagged, so the names a sandbox already
// used keep resolving.
var defaultBlockFlags = []string{FlagRateLimited, FlagManyUniqueNames}

// DefaultBlockFlags returns the flags blocked when Config.BlockFlags is nil.
func DefaultBlockFlags() []string { return append([]string(nil), defaultBlockFlags...) }

var knownFlags = map[string]bool{
	FlagRateLimited: true, FlagManyUniqueNames: true, FlagLongLabel: true, FlagHighEntropy: true,
}

// Config configures a Filter. The zero value of every field means its Default*.
// It has no YAML form of its own: package daemon fills it from config.Config,
// the one configuration schema.
type Config struct {
	// Upstreams are the resolvers allowed names are sent to, tried in order. Each is
	// "IP:PORT" (UDP, retried over TCP when truncated) or "tls://IP:PORT#SERVERNAME"
	// (DNS over TLS, certificate verified for SERVERNAME). IP literals only: the
	// filter never resolves its own upstreams. Required.
	Upstreams []string
	// MinTTL and MaxTTL clamp every cached TTL, positive and negative.
	MinTTL time.Duration
	MaxTTL time.Duration
	// Timeout bounds one exchange with one upstream.
	Timeout time.Duration
	// PolicyTimeout bounds one policy decision (a timeout is a deny).
	PolicyTimeout time.Duration
	// TLSCAFile is a PEM bundle that verifies DNS-over-TLS upstreams instead of the
	// system roots. TLSConfig, when set by code, wins over it.
	TLSCAFile string
	TLSConfig *tls.Config
	// CacheSize bounds the answer cache (entries).
	CacheSize int
	// DecisionCacheSize bounds each sandbox's decision cache (entries); negative
	// turns the decision cache off.
	DecisionCacheSize int
	// IPv6 answers AAAA questions through the upstreams; false (the default, since
	// sandboxes have IPv6 disabled) answers them NODATA.
	IPv6 bool
	// AllowCIDRs are answer ranges the rebinding guard lets through (e.g. an internal
	// registry at 10.1.2.3/32; a bare address means /32 or /128). Everything else
	// ipguard refuses is dropped.
	AllowCIDRs []string
	// NameCheck, when set, is asked about every question's normalized name before
	// policy; refused means NXDOMAIN, never forwarded, audited with reason and
	// (if not empty) flag. The daemon checks for secret placeholders with it.
	NameCheck func(sb policy.Sandbox, name string) (reason, flag string, refused bool)
	// Approve, when set, holds a question the policy asks a person about
	// until the answer (approval.go); nil: it is refused as policy says.
	Approve ApproveFunc
	// ScanName, when set, is content inspection of every question's name
	// (the daemon's scanner: canaries, credentials, encoded data, high-entropy
	// labels). Its findings are policy input (input.content.findings; such a
	// question bypasses the decision cache) and go on the audit record.
	ScanName func(sb policy.Sandbox, name string) []policy.Finding
	// GatewayAddrs are the gateway's own addresses; answers naming them are dropped.
	GatewayAddrs []netip.Addr
	// RateLimit (queries/s) and RateBurst size each sandbox's token bucket; a query
	// over it is flagged rate_limited.
	RateLimit float64
	RateBurst int
	// UniqueNames is how many distinct names under one registered domain (eTLD+1)
	// a sandbox may ask within UniqueWindow; each further new name under it in
	// that window is flagged many_unique_names (blocked by default). Names asked
	// before the threshold was reached are not flagged.
	UniqueNames  int
	UniqueWindow time.Duration
	// LongLabel flags (long_label) any label longer than this many characters.
	LongLabel int
	// Entropy flags (high_entropy) any hyphen-free run of a label, at least
	// EntropyMinLen characters long, whose Shannon entropy is at least this many
	// bits per character (half a bit less for runs mixing letters and digits).
	Entropy       float64
	EntropyMinLen int
	// BlockFlags lists flags that deny a query (NXDOMAIN, never forwarded) whatever
	// policy says. nil means DefaultBlockFlags(); [] blocks on nothing, leaving it
	// to policy (input.dns.flags).
	BlockFlags []string
	// MaxTCPConns bounds each sandbox's open TCP connections to the filter;
	// further connections wait in the listener's backlog.
	MaxTCPConns int
	// NameMemoPerSandbox and NameMemoTotal bound the addresses the filter
	// remembers having answered (NameFor, which the gateway decides a raw TCP
	// connection to a bare address by): per sandbox and for all sandboxes
	// together. Past either bound the oldest entries are dropped; a
	// connection to an address whose entry was dropped is decided as the
	// bare address (fail closed).
	NameMemoPerSandbox int
	NameMemoTotal      int
	// PTRDomain is the zone of the names given for a sandbox's own addresses:
	// PTR of an own address answers "<sandbox-id>.<PTRDomain>.".
	PTRDomain string
	// AuditRate (records/s) and AuditBurst size each sandbox's audit budget, a
	// token bucket: while a query finds a token it gets its own audit record;
	// past the budget its query is counted into a summary record instead (reason
	// dns_audit_summary), so a sandbox spraying queries cannot grow the audit log
	// at packet rate. Every query is in exactly one record or one summary.
	AuditRate  float64
	AuditBurst int
	// AuditSummaryInterval is how often a sandbox over its audit budget gets a
	// summary record (one per interval while over budget, and a final one when
	// the sandbox stops).
	AuditSummaryInterval time.Duration
	// AuditTopNames is how many of the most-asked names a summary lists
	// (1..MaxAuditTopNames).
	AuditTopNames int
}

// upstreamSpec is one parsed Config.Upstreams entry.
type upstreamSpec struct {
	addr       string         // ip:port, as dialed
	ap         netip.AddrPort // addr parsed, an IPv4-mapped address unmapped
	tls        bool
	serverName string
}

// compiled is a validated Config with defaults applied and strings parsed.
type compiled struct {
	Config
	upstreams []upstreamSpec
	allow     []netip.Prefix
	block     map[string]bool
	tlsConfig *tls.Config
}

// compile applies the defaults, validates, and parses what the filter
// uses; the error names every bad field.
func (c Config) compile() (*compiled, error) {
	c.applyDefaults()
	errs := c.validate()
	bad := func(field string, v any, want string) {
		errs = append(errs, fmt.Errorf("dnsfilter: config: %s: invalid value %v, want %s", field, v, want))
	}
	out := &compiled{block: map[string]bool{}}
	for _, fl := range c.BlockFlags {
		if !knownFlags[fl] {
			bad("block_flags", strconv.Quote(fl), "one of rate_limited, many_unique_names, long_label, high_entropy")
			continue
		}
		out.block[fl] = true
	}
	if len(c.Upstreams) == 0 {
		bad("upstreams", "[]", `at least one "IP:PORT" or "tls://IP:PORT#SERVERNAME"`)
	}
	for i, u := range c.Upstreams {
		spec, err := parseUpstream(u)
		if err != nil {
			errs = append(errs, fmt.Errorf("dnsfilter: config: upstreams[%d]: %w", i, err))
			continue
		}
		out.upstreams = append(out.upstreams, spec)
	}
	allow, err := ipguard.ParsePrefixes("dnsfilter: config: allow_cidrs", c.AllowCIDRs)
	if err != nil {
		errs = append(errs, err)
	}
	out.allow = allow
	out.tlsConfig = c.TLSConfig
	if out.tlsConfig == nil && c.TLSCAFile != "" {
		pem, err := os.ReadFile(c.TLSCAFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("dnsfilter: config: tls_ca_file: %w", err))
		} else {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				errs = append(errs, fmt.Errorf("dnsfilter: config: tls_ca_file: %q holds no PEM certificate", c.TLSCAFile))
			}
			out.tlsConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out.Config = c
	return out, nil
}

// applyDefaults replaces every zero field with its default.
func (c *Config) applyDefaults() {
	c.MinTTL = cmp.Or(c.MinTTL, DefaultMinTTL)
	c.MaxTTL = cmp.Or(c.MaxTTL, DefaultMaxTTL)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.PolicyTimeout = cmp.Or(c.PolicyTimeout, DefaultPolicyTimeout)
	c.UniqueWindow = cmp.Or(c.UniqueWindow, DefaultUniqueWindow)
	c.AuditSummaryInterval = cmp.Or(c.AuditSummaryInterval, DefaultAuditSummaryInterval)
	c.AuditRate = cmp.Or(c.AuditRate, DefaultAuditRate)
	c.AuditBurst = cmp.Or(c.AuditBurst, DefaultAuditBurst)
	c.AuditTopNames = cmp.Or(c.AuditTopNames, DefaultAuditTopNames)
	c.CacheSize = cmp.Or(c.CacheSize, DefaultCacheSize)
	c.DecisionCacheSize = cmp.Or(c.DecisionCacheSize, DefaultDecisionCacheSize)
	c.RateLimit = cmp.Or(c.RateLimit, DefaultRateLimit)
	c.RateBurst = cmp.Or(c.RateBurst, DefaultRateBurst)
	c.UniqueNames = cmp.Or(c.UniqueNames, DefaultUniqueNames)
	c.LongLabel = cmp.Or(c.LongLabel, DefaultLongLabel)
	c.Entropy = cmp.Or(c.Entropy, DefaultEntropy)
	c.EntropyMinLen = cmp.Or(c.EntropyMinLen, DefaultEntropyMinLen)
	c.MaxTCPConns = cmp.Or(c.MaxTCPConns, DefaultMaxTCPConns)
	c.NameMemoPerSandbox = cmp.Or(c.NameMemoPerSandbox, DefaultNameMemoPerSandbox)
	c.NameMemoTotal = cmp.Or(c.NameMemoTotal, DefaultNameMemoTotal)
	c.PTRDomain = cmp.Or(c.PTRDomain, DefaultPTRDomain)
	if c.BlockFlags == nil {
		c.BlockFlags = DefaultBlockFlags()
	}
}

// validate checks the bounds of the numbers and the PTR domain (which it
// normalizes), one error per bad field.
func (c *Config) validate() []error {
	var errs []error
	for _, f := range []struct {
		field string
		bad   bool
		v     any
		want  string
	}{
		{"min_ttl", c.MinTTL < 0, c.MinTTL, "a positive duration"},
		{"max_ttl", c.MaxTTL < c.MinTTL, c.MaxTTL, "a duration >= min_ttl (" + c.MinTTL.String() + ")"},
		{"timeout", c.Timeout < 0, c.Timeout, "a positive duration"},
		{"policy_timeout", c.PolicyTimeout < 0, c.PolicyTimeout, "a positive duration"},
		{"unique_window", c.UniqueWindow < 0, c.UniqueWindow, "a positive duration"},
		{"cache_size", c.CacheSize < 0, c.CacheSize, "a positive number of entries"},
		{"rate_limit", c.RateLimit < 0, c.RateLimit, "a positive number of queries per second"},
		{"rate_burst", c.RateBurst < 0, c.RateBurst, "a positive number of queries"},
		{"audit_rate", c.AuditRate < 0 || math.IsNaN(c.AuditRate) || math.IsInf(c.AuditRate, 0), c.AuditRate, "a positive number of records per second"},
		{"audit_burst", c.AuditBurst < 0, c.AuditBurst, "a positive number of records"},
		{"audit_summary_interval", c.AuditSummaryInterval < 0, c.AuditSummaryInterval, "a positive duration"},
		{"audit_top_names", c.AuditTopNames < 0 || c.AuditTopNames > MaxAuditTopNames, c.AuditTopNames, "1.." + strconv.Itoa(MaxAuditTopNames) + " names"},
		{"max_tcp_conns", c.MaxTCPConns < 0, c.MaxTCPConns, "a positive number of connections"},
		{"name_memo_per_sandbox", c.NameMemoPerSandbox < 0, c.NameMemoPerSandbox, "a positive number of addresses"},
		{"name_memo_total", c.NameMemoTotal < 0, c.NameMemoTotal, "a positive number of addresses"},
		{"unique_names", c.UniqueNames < 0, c.UniqueNames, "a positive number of names"},
		{"long_label", c.LongLabel < 0 || c.LongLabel > 63, c.LongLabel, "1..63 characters"},
		{"entropy", c.Entropy < 0 || c.Entropy > 8, c.Entropy, "0..8 bits per character"},
		{"entropy_min_len", c.EntropyMinLen < 0 || c.EntropyMinLen > 63, c.EntropyMinLen, "1..63 characters"},
	} {
		if f.bad {
			errs = append(errs, fmt.Errorf("dnsfilter: config: %s: invalid value %v, want %s", f.field, f.v, f.want))
		}
	}
	if d, err := hostname.Normalize(c.PTRDomain); err != nil {
		errs = append(errs, fmt.Errorf("dnsfilter: config: ptr_domain: invalid value %s, want a host name such as airlock.internal", strconv.Quote(c.PTRDomain)))
	} else {
		c.PTRDomain = d
	}
	return errs
}

func parseUpstream(s string) (upstreamSpec, error) {
	var spec upstreamSpec
	rest := s
	switch {
	case strings.HasPrefix(rest, "tls://"):
		spec.tls = true
		rest = strings.TrimPrefix(rest, "tls://")
		var ok bool
		rest, spec.serverName, ok = strings.Cut(rest, "#")
		if !ok || spec.serverName == "" {
			return spec, fmt.Errorf("invalid value %q, want tls://IP:PORT#SERVERNAME (the name the certificate is verified for)", s)
		}
	case strings.HasPrefix(rest, "udp://"):
		rest = strings.TrimPrefix(rest, "udp://")
	case strings.Contains(rest, "://"):
		return spec, fmt.Errorf("invalid value %q, want IP:PORT or tls://IP:PORT#SERVERNAME", s)
	}
	ap, err := netip.ParseAddrPort(rest)
	if err != nil || ap.Port() == 0 {
		return spec, fmt.Errorf("invalid value %q, want an IP literal with a port such as 1.1.1.1:53", s)
	}
	spec.ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	spec.addr = ap.String()
	return spec, nil
}
