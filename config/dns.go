package config

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// DNS defaults.
const (
	DefaultDNSMinTTL = 30 * time.Second
	DefaultDNSMaxTTL = time.Hour
)

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

func (d *DNS) applyDefaults() {
	if d.MinTTL == 0 {
		d.MinTTL = Duration(DefaultDNSMinTTL)
	}
	if d.MaxTTL == 0 {
		d.MaxTTL = Duration(DefaultDNSMaxTTL)
	}
}

func (d *DNS) validate() error {
	for i, u := range d.Upstreams {
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
	if d.MinTTL < 0 || d.MaxTTL < 0 {
		return errors.New("dns.min_ttl and dns.max_ttl must not be negative")
	}
	if d.RateLimit < 0 || d.RateBurst < 0 || d.UniqueNames < 0 || d.AuditRate < 0 || d.AuditBurst < 0 {
		return errors.New("dns.rate_limit, rate_burst, unique_names, audit_rate and audit_burst must not be negative")
	}
	for i, f := range d.BlockFlags {
		switch f {
		case "rate_limited", "many_unique_names", "long_label", "high_entropy":
		default:
			return fmt.Errorf("dns.block_flags[%d]: %q is not one of rate_limited, many_unique_names, long_label, high_entropy", i, f)
		}
	}
	if d.MinTTL > d.MaxTTL {
		return fmt.Errorf("dns.min_ttl %s is greater than dns.max_ttl %s", d.MinTTL, d.MaxTTL)
	}
	return nil
}
