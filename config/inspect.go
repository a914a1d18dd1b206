package config

import (
	"fmt"
	"regexp"
	"sync"
	"time"
)

// Defaults of the inspect section.
const (
	DefaultInspectMaxBodyBytes = 8 << 20
	DefaultInspectWindow       = 2 * time.Minute
	// MaxInspectMaxBodyBytes bounds inspect.max_body_bytes: a body is
	// scanned as it streams, so this is scan time, not memory.
	MaxInspectMaxBodyBytes = 1 << 30
	MaxInspectWindow       = time.Hour
)

// Inspect configures content inspection: the detectors the gateway and the
// DNS filter run on what leaves a sandbox through an allowed destination
// (package inspect). Findings are policy input (input.content.findings); the
// library's content rules deny high-confidence credentials and canaries.
type Inspect struct {
	// Enable turns inspection on (the default) or off.
	Enable *bool `yaml:"enable"`
	// MaxBodyBytes is how much of one request body is scanned; the rest
	// streams unscanned and the request carries one "oversize" finding
	// (recorded by default; a policy may deny it).
	MaxBodyBytes Size `yaml:"max_body_bytes"`
	// Disable lists detectors that never run: gitleaks rule ids
	// (aws-access-token, github-pat, ...) or inspect's own names (canary,
	// dns-entropy, path-entropy, prompt-injection, hidden-text,
	// tool-description, malformed, oversize). A policy may instead turn one
	// off for some requests (data.airlock.content.disabled).
	Disable []string `yaml:"disable"`
	// Canaries plants decoy credentials in every sandbox (environment
	// variables and files under $HOME) bound to no host; any request or DNS
	// name carrying one is denied. On by default.
	Canaries *bool `yaml:"canaries"`
	// Window is how long a sandbox's recent small values are kept to find a
	// secret split across consecutive requests.
	Window Duration `yaml:"window"`
}

// On reports whether inspection runs.
func (i Inspect) On() bool { return i.Enable == nil || *i.Enable }

// CanariesOn reports whether canaries are planted (and inspection runs).
func (i Inspect) CanariesOn() bool { return i.On() && (i.Canaries == nil || *i.Canaries) }

func (i *Inspect) applyDefaults() {
	t := true
	if i.Enable == nil {
		i.Enable = &t
	}
	if i.Canaries == nil {
		c := true
		i.Canaries = &c
	}
	if i.MaxBodyBytes == 0 {
		i.MaxBodyBytes = DefaultInspectMaxBodyBytes
	}
	if i.Window == 0 {
		i.Window = Duration(DefaultInspectWindow)
	}
}

// detectorName is what a detector name looks like (gitleaks ids and
// inspect's own); inspect.New checks the name is known.
var detectorName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`) })

func (i *Inspect) validate() error {
	if i.MaxBodyBytes < 0 || i.MaxBodyBytes > MaxInspectMaxBodyBytes {
		return fmt.Errorf("inspect.max_body_bytes: %d is not between 1 and %d", i.MaxBodyBytes, MaxInspectMaxBodyBytes)
	}
	if w := time.Duration(i.Window); w < 0 || w > MaxInspectWindow {
		return fmt.Errorf("inspect.window: %s is not between 0 (the default, %s) and %s", w, DefaultInspectWindow, MaxInspectWindow)
	}
	for n, d := range i.Disable {
		if !detectorName().MatchString(d) {
			return fmt.Errorf("inspect.disable[%d]: %q is not a detector name (a gitleaks rule id such as aws-access-token, or canary, dns-entropy, path-entropy, prompt-injection, hidden-text, tool-description, malformed, oversize)", n, d)
		}
	}
	return nil
}
