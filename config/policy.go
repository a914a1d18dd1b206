package config

import (
	"fmt"
	"time"
)

// Policy defaults and bounds.
const (
	DefaultPolicyMode = "enforce"
	// MaxEvalTimeout bounds policy.eval_timeout: every request waits for its
	// decision.
	MaxEvalTimeout = 10 * time.Second
)

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

func (p *Policy) applyDefaults() {
	if p.Mode == "" {
		p.Mode = DefaultPolicyMode
	}
	p.Bundle.applyDefaults()
}

// validate checks mode and eval_timeout (the bundle: validateBundle).
func (p *Policy) validate() error {
	switch p.Mode {
	case "enforce", "report":
	default:
		return fmt.Errorf("policy.mode: %q is not one of enforce, report", p.Mode)
	}
	if t := time.Duration(p.EvalTimeout); t < 0 || t > MaxEvalTimeout {
		return fmt.Errorf("policy.eval_timeout: %s is not between 0 (the default, 100ms) and %s", t, MaxEvalTimeout)
	}
	return nil
}
