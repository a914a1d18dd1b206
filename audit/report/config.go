package report

import (
	"crypto/ed25519"
	"fmt"
	"time"
)

// Defaults for Config.
const (
	DefaultTopN          = 50
	DefaultMaxBuckets    = 240
	DefaultMaxSandboxes  = 200
	DefaultMaxCells      = 20000
	DefaultMaxSecretUses = 2000
	DefaultMaxDNSFlags   = 2000
	DefaultMaxEvents     = 100
)

// Config says what Build reads and how far it aggregates. Zero bounds take
// their Default* constant.
type Config struct {
	// Files are the audit files, oldest first, read as one chain.
	Files []string
	// Sandbox, Since and Until select the records aggregated (Since
	// inclusive, Until exclusive); the chain is verified whole regardless.
	Sandbox      string
	Since, Until time.Time
	// Mode, Owner and Labels select records as audit.Filter's fields do
	// (report mode's would-denials or the rest; the owner's uid; the
	// sandboxes whose creation record carried every label).
	Mode   string
	Owner  string
	Labels map[string]string
	// PublicKey checks checkpoint signatures; nil checks the chain only.
	PublicKey ed25519.PublicKey
	// Partial accepts a first file that starts mid-chain (audit.VerifyOptions).
	Partial bool
	// MaxUnsigned, with PublicKey, is the most records allowed after the last
	// signed checkpoint (audit.VerifyOptions; negative: no limit).
	MaxUnsigned int
	// TopN bounds the destination, denial and DNS tables written precomputed.
	TopN int
	// MaxBuckets bounds the timeline: the bucket widens (1s, 5s, ... 1d,
	// 2d, ...) until the records' span fits.
	MaxBuckets int
	// MaxSandboxes bounds the sandboxes counted one by one; later ones are
	// folded into OtherSandboxes.
	MaxSandboxes int
	// MaxCells bounds the (sandbox, kind, decision, destination, reason)
	// cells; past it new destinations are folded into Other.
	MaxCells int
	// MaxSecretUses, MaxDNSFlags and MaxEvents bound those tables the same way.
	MaxSecretUses int
	MaxDNSFlags   int
	MaxEvents     int
	// Now stamps the report (time.Now when nil).
	Now func() time.Time
}

func (c *Config) applyDefaults() {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.TopN, DefaultTopN)
	def(&c.MaxBuckets, DefaultMaxBuckets)
	def(&c.MaxSandboxes, DefaultMaxSandboxes)
	def(&c.MaxCells, DefaultMaxCells)
	def(&c.MaxSecretUses, DefaultMaxSecretUses)
	def(&c.MaxDNSFlags, DefaultMaxDNSFlags)
	def(&c.MaxEvents, DefaultMaxEvents)
	if c.Now == nil {
		c.Now = time.Now
	}
}

func (c *Config) validate() error {
	if len(c.Files) == 0 {
		return fmt.Errorf("report: no audit files given")
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"TopN", c.TopN}, {"MaxBuckets", c.MaxBuckets}, {"MaxSandboxes", c.MaxSandboxes}, {"MaxCells", c.MaxCells},
		{"MaxSecretUses", c.MaxSecretUses}, {"MaxDNSFlags", c.MaxDNSFlags}, {"MaxEvents", c.MaxEvents}} {
		if f.v < 1 {
			return fmt.Errorf("report: %s %d: want at least 1", f.name, f.v)
		}
	}
	if !c.Since.IsZero() && !c.Until.IsZero() && !c.Since.Before(c.Until) {
		return fmt.Errorf("report: since %s is not before until %s", c.Since.Format(time.RFC3339), c.Until.Format(time.RFC3339))
	}
	return nil
}
