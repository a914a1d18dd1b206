package policy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Defaults of a bundle source (Config.Bundle), applied by New.
const (
	// DefaultBundleMinDelay and DefaultBundleMaxDelay bound the jittered wait
	// between two polls (OPA's own defaults).
	DefaultBundleMinDelay = 60 * time.Second
	DefaultBundleMaxDelay = 120 * time.Second
	// DefaultBundleStartTimeout is how long New waits for the first download
	// when nothing is persisted (after it the engine denies everything until a
	// bundle arrives).
	DefaultBundleStartTimeout = 10 * time.Second
	// MaxBundleFileSize bounds each file of a bundle; a larger one is refused.
	MaxBundleFileSize = 64 << 20
	// MaxBundleRevisionLen bounds a bundle manifest's revision.
	MaxBundleRevisionLen = 128
	// RevNoPolicy is the revision of an engine whose bundle source has no
	// policy yet: every decision is a policy_error deny.
	RevNoPolicy = "none"
)

// BundleConfig configures a policy bundle source: an OPA bundle (a tarball
// of *.rego, *_test.rego and data.json files) downloaded from URL with OPA's
// download code (ETag, long polling), its signature verified before anything
// in it is used, compiled and tested as a policy directory over the embedded
// library, then swapped in; the last good one is kept in PersistDir.
type BundleConfig struct {
	// URL is the bundle's full URL (http or https), e.g.
	// https://bundles.corp.example/airlock/bundle.tar.gz. No credentials in it.
	URL string
	// MinDelay and MaxDelay bound the wait between polls (whole seconds, as
	// OPA counts them; defaults DefaultBundleMinDelay, DefaultBundleMaxDelay).
	MinDelay time.Duration
	MaxDelay time.Duration
	// LongPollingTimeout, when set, asks the server to hold each request until
	// the bundle changes or this much time passes (whole seconds; 0 off). A
	// server that does not answer with OPA's long-polling content type is
	// polled as usual.
	LongPollingTimeout time.Duration
	// StartTimeout is how long New waits for the first download when no bundle
	// is persisted (default DefaultBundleStartTimeout).
	StartTimeout time.Duration
	// PersistDir keeps the last activated bundle (bundle.tar.gz, and its ETag)
	// for the next start; it is verified again when loaded. Empty keeps
	// nothing: a start with the server down then denies everything.
	PersistDir string
	// CAFile is a PEM bundle trusted for the server's certificate, beside
	// the system roots.
	CAFile string
	// Authorization, when set, returns the Authorization header value sent
	// with each request ("Bearer ..."). It is called per request and its
	// value is never logged.
	Authorization func(ctx context.Context) (string, error)
	// Signing, when set, makes a signature required: a bundle without a valid
	// .signatures.json for this key and scope is refused before anything in
	// it is parsed into a policy.
	Signing *BundleSigning
	// Notify, when set, is called after each activation and each refusal
	// past the download (verify, activate, persist), in the goroutine that
	// handled the bundle, with the engine's activation lock held: it must
	// not call back into the engine. The daemon audits with it.
	Notify func(BundleEvent)
	// Manual runs no polling loop: the bundle is downloaded only when the
	// caller calls (*Engine).PollBundle (tests, one-shot tools), and New does
	// not wait for a first download.
	Manual bool
}

// BundleSigning is the key bundles are verified with.
type BundleSigning struct {
	// PublicKey is the PEM public key (PUBLIC KEY, RSA PUBLIC KEY or a
	// CERTIFICATE).
	PublicKey string
	// KeyID is the key's id; the signature's own kid is never used to pick
	// a key.
	KeyID string
	// Scope, when set, must equal the signature's scope claim.
	Scope string
	// Algorithm is RS256|384|512, PS256|384|512 or ES256|384|512; empty means
	// the key's own (RS256 for RSA, ES256/384/512 by the curve). HMAC
	// algorithms are refused: a shared secret in the gateway's config could
	// sign bundles too.
	Algorithm string
}

// withDefaults applies defaults and validates; errors name the field.
func (c BundleConfig) withDefaults() (BundleConfig, error) {
	u, err := url.Parse(c.URL)
	switch {
	case c.URL == "":
		return c, fmt.Errorf("policy: bundle.url: empty")
	case err != nil:
		return c, fmt.Errorf("policy: bundle.url: %w", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return c, fmt.Errorf("policy: bundle.url: %q: scheme must be http or https", c.URL)
	case u.Host == "":
		return c, fmt.Errorf("policy: bundle.url: %q has no host", c.URL)
	case u.User != nil:
		return c, fmt.Errorf("policy: bundle.url: carries credentials; give a bearer token from the secrets file instead")
	case u.Fragment != "":
		return c, fmt.Errorf("policy: bundle.url: %q has a fragment", c.URL)
	}
	if c.MinDelay == 0 && c.MaxDelay == 0 {
		c.MinDelay, c.MaxDelay = DefaultBundleMinDelay, DefaultBundleMaxDelay
	}
	for _, d := range []struct {
		name string
		v    time.Duration
		zero bool
	}{{"min_delay", c.MinDelay, false}, {"max_delay", c.MaxDelay, false}, {"long_polling_timeout", c.LongPollingTimeout, true}} {
		if d.v == 0 && d.zero {
			continue
		}
		if d.v < time.Second || d.v%time.Second != 0 {
			return c, fmt.Errorf("policy: bundle.%s: %v must be a whole number of seconds, at least 1s", d.name, d.v)
		}
	}
	if c.MaxDelay < c.MinDelay {
		return c, fmt.Errorf("policy: bundle.max_delay: %v is below min_delay %v", c.MaxDelay, c.MinDelay)
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultBundleStartTimeout
	}
	if c.StartTimeout < 0 {
		return c, fmt.Errorf("policy: bundle.start_timeout: %v must be positive", c.StartTimeout)
	}
	if c.Signing != nil {
		s := *c.Signing
		if err := s.check(); err != nil {
			return c, err
		}
		c.Signing = &s
	}
	return c, nil
}

// check validates the key and fills Algorithm from it when empty.
func (s *BundleSigning) check() error {
	if s.KeyID == "" {
		return fmt.Errorf("policy: bundle.signing.key_id: empty")
	}
	block, _ := pem.Decode([]byte(s.PublicKey))
	if block == nil {
		return fmt.Errorf("policy: bundle.signing.public_key: not PEM")
	}
	var pub any
	var err error
	switch block.Type {
	case "PUBLIC KEY":
		pub, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		pub, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
			pub = cert.PublicKey
		}
	default:
		return fmt.Errorf("policy: bundle.signing.public_key: a %s block; want PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE", block.Type)
	}
	if err != nil {
		return fmt.Errorf("policy: bundle.signing.public_key: %w", err)
	}
	var family, own string
	switch k := pub.(type) {
	case *rsa.PublicKey:
		family, own = "RSA", "RS256"
	case *ecdsa.PublicKey:
		family = "EC"
		switch k.Curve {
		case elliptic.P256():
			own = "ES256"
		case elliptic.P384():
			own = "ES384"
		case elliptic.P521():
			own = "ES512"
		default:
			return fmt.Errorf("policy: bundle.signing.public_key: curve %s is not one of P-256, P-384, P-521", k.Curve.Params().Name)
		}
	default:
		return fmt.Errorf("policy: bundle.signing.public_key: a %T key; want RSA or ECDSA", pub)
	}
	if s.Algorithm == "" {
		s.Algorithm = own
	}
	alg := strings.ToUpper(s.Algorithm)
	switch {
	case strings.HasPrefix(alg, "HS"):
		return fmt.Errorf("policy: bundle.signing.algorithm: %s is HMAC, a shared secret that could sign bundles too; use a key pair", s.Algorithm)
	case family == "RSA" && (alg == "RS256" || alg == "RS384" || alg == "RS512" || alg == "PS256" || alg == "PS384" || alg == "PS512"):
	case family == "EC" && alg == own:
	default:
		return fmt.Errorf("policy: bundle.signing.algorithm: %q does not fit the %s key (want %s)", s.Algorithm, family, own)
	}
	s.Algorithm = alg
	return nil
}

// RedactBundleURL is a bundle URL as logs, the status and audit records show
// it: the query, which may carry a credential (a presigned URL's signature,
// a token), replaced by REDACTED.
func RedactBundleURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.RawQuery == "" {
		return raw
	}
	u.RawQuery = "REDACTED"
	return u.String()
}

// redactQuery removes the URL's query from a message (an HTTP error quotes
// the URL it failed on).
func redactQuery(rawURL, msg string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.RawQuery == "" {
		return msg
	}
	msg = strings.ReplaceAll(msg, u.RawQuery, "REDACTED")
	if q, err := url.QueryUnescape(u.RawQuery); err == nil && q != "" {
		msg = strings.ReplaceAll(msg, q, "REDACTED")
	}
	return msg
}
