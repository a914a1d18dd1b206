package inspect

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Class values of Finding.Class.
const (
	ClassCredential = "credential" // a known credential format
	ClassCanary     = "canary"     // a decoy planted by airlock: certain exfiltration
	ClassEncoded    = "encoded"    // encoded text found where plain text was expected
	ClassEntropy    = "entropy"    // a high-entropy DNS label or URL path segment
	ClassInjection  = "injection"  // instructions injected into a response
	ClassMalformed  = "malformed"  // input a parser refused
	ClassOversize   = "oversize"   // input larger than the scanner examines
)

// Confidence values of Finding.Confidence.
const (
	High   = "high"
	Medium = "medium"
	Low    = "low"
)

// Detector names that are not gitleaks rule ids.
const (
	DetectorCanary      = "canary"
	DetectorDNSEntropy  = "dns-entropy"
	DetectorPathEntropy = "path-entropy"
	DetectorInjection   = "prompt-injection"
	DetectorHiddenText  = "hidden-text"
	DetectorToolPoison  = "tool-description"
	DetectorMalformed   = "malformed"
	DetectorOversize    = "oversize"
)

// Finding is one thing a detector found. It never carries the matched value:
// Fingerprint is a keyed hash of it, so two findings of one secret can be told
// to be the same without the audit log holding the secret.
type Finding struct {
	Detector    string  `json:"detector"`              // rule id ("aws-access-token") or a Detector* name
	Class       string  `json:"class"`                 // a Class* value
	Where       string  `json:"where"`                 // "url.query", "header:authorization", "body", "dns.qname", ...
	Encoding    string  `json:"encoding,omitempty"`    // "" or the decoding chain that revealed it: "base64", "url+hex", "reversed"
	Confidence  string  `json:"confidence"`            // High, Medium or Low
	Score       float64 `json:"score,omitempty"`       // entropy-style detectors: the score; else 0
	Fingerprint string  `json:"fingerprint,omitempty"` // HMAC-SHA256 under Config.Key of the value, 16 hex chars
	Split       bool    `json:"split,omitempty"`       // assembled from several pieces (fields, writes, requests)
}

// Field is one piece of a message: a query parameter, a header, a JSON string
// leaf, a frame. Where is the Finding.Where for it; Name is the parameter,
// header or JSON path (not scanned as content).
type Field struct {
	Where string
	Name  string
	Value []byte
}

// Defaults of Config.
const (
	DefaultMaxDepth        = 3       // decoding layers below the raw bytes
	DefaultMaxBytes        = 8 << 20 // bytes one Scan examines; past this an oversize finding
	DefaultMaxDecoded      = 1 << 20 // decoded bytes one Scan produces, over all layers
	DefaultWindow          = 2 * time.Minute
	DefaultWindowBytes     = 1024 // bytes of recent small values kept per sandbox
	DefaultWindowSandboxes = 4096 // sandboxes a Scanner keeps windows for
	DefaultOverlap         = 4096 // bytes a Stream carries from one write into the next scan
	MinKeyBytes            = 16
)

// Config configures a Scanner. Zero values take the Default* constants.
type Config struct {
	// Key keys the fingerprints (HMAC-SHA256) and, when Canaries is nil,
	// the canaries. Required, at least MinKeyBytes.
	Key []byte
	// Disabled lists detectors (rule ids or Detector* names) that never report.
	Disabled []string
	// MaxDepth bounds nested decoding (base64 of hex of ...); 0 takes the
	// default, a negative value turns decoding off.
	MaxDepth int
	// MaxBytes bounds what one Scan examines; the rest is reported as one
	// oversize finding and not scanned.
	MaxBytes int
	// MaxDecoded bounds the decoded bytes one Scan rescans, over all layers.
	MaxDecoded int
	// Canaries recognizes canary credentials. Nil: NewCanaries(Key).
	Canaries *Canaries
	// Window, WindowBytes and WindowSandboxes bound Window: how long a
	// sandbox's recent values are kept, how many bytes of them, for how many
	// sandboxes (least recently used evicted first).
	Window          time.Duration
	WindowBytes     int
	WindowSandboxes int
	// Overlap is how many bytes a Stream carries between writes; a token
	// straddling two writes is found when it is no longer than this.
	Overlap int
	// Now is the clock for Window; nil is time.Now.
	Now func() time.Time
}

// Scanner runs the detectors. It is safe for concurrent use.
type Scanner struct {
	cfg      Config
	disabled map[string]bool
	// compiled holds the rule set and which of its rules are enabled,
	// compiled on first use (compileRules): a start that never scans (a
	// short `airlock run`) does not compile ~220 regexps.
	compiled func() compiledRules
	canaries *Canaries
	windows  *windows
	clean    *cleanCache // small inputs known to give no finding
}

// New applies defaults to cfg, validates it and compiles the rule set.
func New(cfg Config) (*Scanner, error) {
	if len(cfg.Key) < MinKeyBytes {
		return nil, fmt.Errorf("inspect: key: %d bytes, want at least %d", len(cfg.Key), MinKeyBytes)
	}
	if cfg.MaxDepth == 0 {
		cfg.MaxDepth = DefaultMaxDepth
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.MaxDecoded == 0 {
		cfg.MaxDecoded = DefaultMaxDecoded
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.WindowBytes == 0 {
		cfg.WindowBytes = DefaultWindowBytes
	}
	if cfg.WindowSandboxes == 0 {
		cfg.WindowSandboxes = DefaultWindowSandboxes
	}
	if cfg.Overlap == 0 {
		cfg.Overlap = DefaultOverlap
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	switch {
	case cfg.MaxBytes < 0:
		return nil, fmt.Errorf("inspect: max_bytes: %d, want a positive number of bytes", cfg.MaxBytes)
	case cfg.MaxDecoded < 0:
		return nil, fmt.Errorf("inspect: max_decoded: %d, want a positive number of bytes", cfg.MaxDecoded)
	case cfg.Window < 0:
		return nil, fmt.Errorf("inspect: window: %v, want a positive duration", cfg.Window)
	case cfg.WindowBytes < 0 || cfg.WindowSandboxes < 0:
		return nil, errors.New("inspect: window_bytes and window_sandboxes must be positive")
	case cfg.Overlap < 0:
		return nil, fmt.Errorf("inspect: overlap: %d, want a positive number of bytes", cfg.Overlap)
	}
	s := &Scanner{cfg: cfg, disabled: map[string]bool{}}
	for _, d := range cfg.Disabled {
		s.disabled[d] = true
	}
	s.compiled = sync.OnceValue(s.compileRules)
	if len(cfg.Disabled) > 0 {
		// Naming a detector that does not exist is New's error: compile now.
		c := s.compiled()
		if c.err != nil {
			return nil, c.err
		}
		for _, d := range cfg.Disabled {
			if !c.rules.known(d) && !builtinDetector(d) {
				return nil, fmt.Errorf("inspect: disabled: unknown detector %q (a gitleaks rule id or one of %v)", d, builtinDetectors)
			}
		}
	}
	s.canaries = cfg.Canaries
	if s.canaries == nil {
		s.canaries = NewCanaries(cfg.Key)
	}
	s.windows = newWindows(cfg.WindowSandboxes)
	s.clean = newCleanCache()
	return s, nil
}

// compiledRules is the compiled rule set, which of its rules are enabled
// (by index), or why it did not compile.
type compiledRules struct {
	rules   *ruleSet
	enabled []bool
	err     error
}

// compileRules compiles the built-in rule set. It runs once, on the first
// scan or Warm; the rules are embedded, so an error is a broken build
// (TestRules), and every scan then reports a malformed finding (fail closed).
func (s *Scanner) compileRules() compiledRules {
	rules, err := defaultRules()
	if err != nil {
		return compiledRules{err: err}
	}
	c := compiledRules{rules: rules}
	for _, r := range rules.rules {
		name := r.id
		if r.class == ClassCanary {
			name = DetectorCanary
		}
		c.enabled = append(c.enabled, !s.disabled[name])
	}
	return c
}

// Warm compiles the rule set now, so the first scan does not wait for it.
// Scans compile it themselves when it is not; a daemon calls Warm once it
// serves, off the path of a sandbox's start.
func (s *Scanner) Warm() error { return s.compiled().err }

// builtinDetectors are the detector names besides the gitleaks rule ids.
var builtinDetectors = []string{DetectorCanary, DetectorDNSEntropy, DetectorPathEntropy, DetectorInjection, DetectorHiddenText, DetectorToolPoison, DetectorMalformed, DetectorOversize}

func builtinDetector(name string) bool {
	for _, d := range builtinDetectors {
		if d == name {
			return true
		}
	}
	return false
}

// Detectors lists every detector name the scanner knows, for a config
// validator and for documentation.
func (s *Scanner) Detectors() []string {
	c := s.compiled()
	if c.err != nil {
		return append([]string{}, builtinDetectors...)
	}
	return append(append([]string{}, builtinDetectors...), c.rules.ids()...)
}

// fingerprint is the keyed hash of a matched value.
func (s *Scanner) fingerprint(v []byte) string {
	m := hmac.New(sha256.New, s.cfg.Key)
	m.Write(v)
	return hex.EncodeToString(m.Sum(nil)[:8])
}

// Scan runs every request-side detector over one piece of data found at
// where. A where of "dns.qname" or "url.path" also runs the entropy detector
// over its labels or segments.
func (s *Scanner) Scan(where string, data []byte) []Finding {
	return s.scan(where, data)
}

// ScanFields scans each field, then the fields joined in order, so a secret
// split across query parameters, JSON string leaves, headers or frames is
// found; a finding only the joined text shows has Split set and the Where of
// the field it starts in.
func (s *Scanner) ScanFields(fields []Field) []Finding {
	return s.scanFields(fields)
}

// Canaries returns the canary maker the scanner recognizes: the one to
// plant with (Config.Canaries, or NewCanaries(Config.Key)).
func (s *Scanner) Canaries() *Canaries { return s.canaries }
