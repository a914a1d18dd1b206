package config

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sandbox defaults and bounds.
const (
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
	MaxSandboxes      = 1000 // the executor's default uid range
)

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

func (s *Sandbox) applyDefaults() {
	s.PoolSize = cmp.Or(s.PoolSize, DefaultPoolSize)
	s.IdleTimeout = cmp.Or(s.IdleTimeout, Duration(DefaultIdleTimeout))
	s.MaxLifetime = cmp.Or(s.MaxLifetime, Duration(DefaultMaxLifetime))
	s.MaxUpload = cmp.Or(s.MaxUpload, DefaultMaxUpload)
	s.MaxSandboxes = cmp.Or(s.MaxSandboxes, DefaultMaxSandboxes)
	s.MaxSandboxesPerOwner = cmp.Or(s.MaxSandboxesPerOwner, min(DefaultMaxSandboxesPerOwner, s.MaxSandboxes))
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
