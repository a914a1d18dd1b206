package policy

import (
	"fmt"
	"sort"
	"time"
)

// Defaults applied by New.
const (
	// DefaultMode is the global mode when Config.Mode is empty.
	DefaultMode = ModeEnforce
	// DefaultEvalTimeout bounds one evaluation; a slower one is a policy_error deny.
	DefaultEvalTimeout = 100 * time.Millisecond
	// DefaultCacheSize is the number of decisions kept per policy revision.
	DefaultCacheSize = 10000
	// DefaultCacheBytes bounds the memory the decision cache of one policy
	// revision holds (keys include whole queries and headers).
	DefaultCacheBytes = 32 << 20
	// DefaultReloadDebounce is how long Watch waits for file events to settle.
	DefaultReloadDebounce = 200 * time.Millisecond
	// PresetNone as the only entry of Config.Presets activates no preset.
	PresetNone = "none"
)

// Config configures an Engine. The zero value is the embedded default policy in
// enforce mode with every preset active.
type Config struct {
	// Dir is the user's policy directory (package airlock.egress rules, tests,
	// data). Empty means the embedded default policy only.
	Dir string
	// Mode is the global mode, "enforce" (default) or "report". A policy can set
	// the mode per request with `report` or `enforce` rules in airlock.egress.
	Mode Mode
	// EvalTimeout bounds one evaluation (default DefaultEvalTimeout).
	EvalTimeout time.Duration
	// Watch reloads the policy when a file under Dir changes (needs Dir).
	Watch bool
	// Presets names the active presets (data.airlock.presets.NAME). Nil or empty
	// means every preset known (embedded and from Dir); ["none"] means none.
	Presets []string
	// AllowHosts are host patterns (host, *.domain, **.domain, IP) reachable with
	// every kind and method (`airlock run --allow`): HOST on ports 443 and 80,
	// HOST:PORT on PORT, HOST:* on every port. Ports 53 and 853 carry DNS and
	// are reachable only when named (HOST:53), never through HOST:*. An IPv6
	// literal with a port is bracketed: [2001:db8::1]:8443.
	AllowHosts []string
	// CacheSize bounds the decision cache per revision: 0 means DefaultCacheSize,
	// a negative value turns the cache off.
	CacheSize int
	// CacheBytes bounds the decision cache per revision by an estimate of the
	// bytes it holds (key plus decision): 0 means DefaultCacheBytes. An input
	// whose key alone is longer than CacheBytes/1024 is never cached.
	CacheBytes int64
	// ReloadDebounce is how long Watch lets file events settle (default
	// DefaultReloadDebounce).
	ReloadDebounce time.Duration
	// Bundle, when set, takes Dir's place: the policy directory's content
	// comes from an OPA bundle server (bundle.go). Dir and Watch must be
	// empty.
	Bundle *BundleConfig
	// FailingTests, when set, lets New build an engine whose directory's own
	// tests fail (it still fails on a compile error): FailingTests is called
	// with the failure. For `policy eval`, which
	// must answer while a policy is being fixed; run and serve leave it nil.
	FailingTests func(error)
}

// withDefaults applies defaults and validates; errors name the field.
func (c Config) withDefaults() (Config, error) {
	if c.Mode == "" {
		c.Mode = DefaultMode
	}
	if c.Mode != ModeEnforce && c.Mode != ModeReport {
		return c, fmt.Errorf("policy: mode: %q is not one of enforce, report", c.Mode)
	}
	if c.EvalTimeout == 0 {
		c.EvalTimeout = DefaultEvalTimeout
	}
	if c.EvalTimeout < 0 {
		return c, fmt.Errorf("policy: eval_timeout: %v must be positive", c.EvalTimeout)
	}
	if c.CacheSize == 0 {
		c.CacheSize = DefaultCacheSize
	}
	if c.CacheBytes == 0 {
		c.CacheBytes = DefaultCacheBytes
	}
	if c.CacheBytes < 0 {
		return c, fmt.Errorf("policy: cache_bytes: %d must be positive (turn the cache off with cache_size: -1)", c.CacheBytes)
	}
	if c.ReloadDebounce <= 0 {
		c.ReloadDebounce = DefaultReloadDebounce
	}
	if c.Watch && c.Dir == "" {
		return c, fmt.Errorf("policy: watch: needs dir")
	}
	if c.Bundle != nil {
		if c.Dir != "" {
			return c, fmt.Errorf("policy: bundle: cannot be combined with dir %s (the bundle is the policy directory)", c.Dir)
		}
		b, err := c.Bundle.withDefaults()
		if err != nil {
			return c, err
		}
		c.Bundle = &b
	}
	seen := map[string]bool{}
	presets := make([]string, 0, len(c.Presets))
	for _, p := range c.Presets {
		if p == "" {
			return c, fmt.Errorf("policy: presets: empty name")
		}
		if p == PresetNone && len(c.Presets) > 1 {
			return c, fmt.Errorf("policy: presets: %q cannot be combined with other presets", PresetNone)
		}
		if !seen[p] {
			seen[p] = true
			presets = append(presets, p)
		}
	}
	sort.Strings(presets)
	c.Presets = presets
	hosts := make([]string, 0, len(c.AllowHosts))
	for _, h := range c.AllowHosts {
		n, err := normalizeAllow(h)
		if err != nil {
			return c, fmt.Errorf("policy: allow_hosts: %q: %w", h, err)
		}
		hosts = append(hosts, n)
	}
	sort.Strings(hosts)
	c.AllowHosts = hosts
	return c, nil
}
