package config

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"time"
)

// Defaults of policy.bundle.
const (
	DefaultBundleMinDelay     = 60 * time.Second
	DefaultBundleMaxDelay     = 120 * time.Second
	DefaultBundleStartTimeout = 10 * time.Second
	DefaultBundlePersistDir   = "/var/lib/airlock/bundle"
)

// Bundle is policy.bundle: where the policy bundle comes from and how it is
// checked (docs/CONFIG.md, "Policy from an OPA bundle").
type Bundle struct {
	// URL is the bundle's full URL, http(s)://host[:port]/path; never with
	// credentials in it.
	URL string `yaml:"url"`
	// MinDelay and MaxDelay bound the wait between polls, whole seconds
	// (defaults 60s and 120s).
	MinDelay Duration `yaml:"min_delay"`
	MaxDelay Duration `yaml:"max_delay"`
	// LongPollingTimeout asks the server to hold each request until the
	// bundle changes, at most this long (whole seconds; 0: off).
	LongPollingTimeout Duration `yaml:"long_polling_timeout"`
	// StartTimeout is how long a start waits for the first download when no
	// bundle is persisted (default 10s); until one arrives nothing is allowed.
	StartTimeout Duration `yaml:"start_timeout"`
	// PersistDir keeps the last activated bundle for the next start
	// (default /var/lib/airlock/bundle).
	PersistDir string `yaml:"persist_dir"`
	// CAFile is a PEM bundle trusted for the server's certificate.
	CAFile string `yaml:"ca_file"`
	// TokenSecret names a secret of secrets.file sent as
	// "Authorization: Bearer <value>" with each request.
	TokenSecret string `yaml:"token_secret"`
	// Signing, when set, makes a valid signature by this key required.
	Signing *BundleSigning `yaml:"signing"`
}

// BundleSigning is the public key bundles must be signed with.
type BundleSigning struct {
	// PublicKey is the PEM key inline; PublicKeyFile a file holding it. Exactly
	// one is set.
	PublicKey     string `yaml:"public_key"`
	PublicKeyFile string `yaml:"public_key_file"`
	// KeyID is the key's id (the signer's --signing-key id).
	KeyID string `yaml:"key_id"`
	// Scope, when set, must equal the signature's scope claim.
	Scope string `yaml:"scope"`
	// Algorithm: RS256|384|512, PS256|384|512, ES256|384|512; empty: the key's.
	Algorithm string `yaml:"algorithm"`
}

func (b *Bundle) applyDefaults() {
	if b == nil {
		return
	}
	if b.MinDelay == 0 && b.MaxDelay == 0 {
		b.MinDelay, b.MaxDelay = Duration(DefaultBundleMinDelay), Duration(DefaultBundleMaxDelay)
	}
	if b.StartTimeout == 0 {
		b.StartTimeout = Duration(DefaultBundleStartTimeout)
	}
	if b.PersistDir == "" {
		b.PersistDir = DefaultBundlePersistDir
	}
}

// validateBundle checks policy.bundle (the policy engine checks the key).
func (p *Policy) validateBundle(secretsFile string) error {
	b := p.Bundle
	if b == nil {
		return nil
	}
	if p.Dir != "" {
		return fmt.Errorf("policy.bundle: cannot be combined with policy.dir %q (the bundle is the policy directory)", p.Dir)
	}
	u, err := url.Parse(b.URL)
	switch {
	case b.URL == "":
		return errors.New("policy.bundle.url: empty")
	case err != nil:
		return fmt.Errorf("policy.bundle.url: %q is not a URL: %w", b.URL, err)
	case u.User != nil:
		return errors.New("policy.bundle.url: the URL carries credentials; put a token in a secret of the secrets file and name it in policy.bundle.token_secret")
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("policy.bundle.url: %q: scheme must be http or https", b.URL)
	case u.Hostname() == "" || u.Fragment != "":
		return fmt.Errorf("policy.bundle.url: %q: want http(s)://host[:port]/path", b.URL)
	}
	for _, d := range []struct {
		name string
		v    Duration
	}{{"min_delay", b.MinDelay}, {"max_delay", b.MaxDelay}, {"long_polling_timeout", b.LongPollingTimeout}} {
		t := time.Duration(d.v)
		if (t != 0 || d.name != "long_polling_timeout") && (t < time.Second || t%time.Second != 0) {
			return fmt.Errorf("policy.bundle.%s: %s is not a whole number of seconds, at least 1s", d.name, t)
		}
	}
	if b.MaxDelay < b.MinDelay {
		return fmt.Errorf("policy.bundle.max_delay %s is below policy.bundle.min_delay %s", b.MaxDelay, b.MinDelay)
	}
	if b.TokenSecret != "" {
		if secretsFile == "" {
			return fmt.Errorf("policy.bundle.token_secret: %q names a secret but secrets.file is not set", b.TokenSecret)
		}
		if u.Scheme != "https" && !loopbackHost(u.Hostname()) {
			return fmt.Errorf("policy.bundle.token_secret: the token would cross the network in clear; policy.bundle.url must be https (plain http only to a loopback address)")
		}
	}
	if s := b.Signing; s != nil {
		if (s.PublicKey == "") == (s.PublicKeyFile == "") {
			return errors.New("policy.bundle.signing: set exactly one of public_key and public_key_file")
		}
		if s.KeyID == "" {
			return errors.New("policy.bundle.signing.key_id: empty (the id the bundle was signed with)")
		}
	}
	return nil
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.IsLoopback()
}
