package config

import (
	"fmt"
	"math"
	"slices"

	"gopkg.in/yaml.v3"
)

// API defaults.
const (
	DefaultAPISocket = "/run/airlock/airlock.sock"
	DefaultAPIGroup  = "airlock"
)

// API is the daemon's control socket (never reachable from a sandbox).
type API struct {
	Socket string `yaml:"socket"`
	// Group owns the socket (mode 0660): its members may create and use
	// sandboxes of their own. Absent means DefaultAPIGroup; "" means root
	// only (mode 0600). A name or a numeric gid.
	Group string `yaml:"group"`
	// MaxConns bounds the API's open connections together, and
	// MaxConnsPerUID those of one caller other than root; a connection past
	// either is answered 429 and closed. Root may always use a share of
	// MaxConns no other caller can take. 0 derives each from the process's
	// RLIMIT_NOFILE (README.md, "Configuration"); a value that would
	// leave the gateway too few descriptors is refused when serve starts.
	MaxConns       int `yaml:"max_conns"`
	MaxConnsPerUID int `yaml:"max_conns_per_uid"`
	// MaxStreamsPerUID bounds the long-lived requests (exec output, stdin,
	// events) one caller other than root holds open at once; 0 derives it
	// (half of the per-uid connections).
	MaxStreamsPerUID int `yaml:"max_streams_per_uid"`
	// CallerLimits bounds what all the sandboxes of one caller other than
	// root book together.
	CallerLimits CallerLimits `yaml:"caller_limits"`
	// groupSet: the file named group (so "" is kept, not defaulted).
	groupSet bool
}

// CallerLimits is a ceiling on the sum of the limits of one caller's live
// sandboxes (root's are exempt). A create that would take the sum past it
// is refused naming the limit. Zero fields take the daemon's defaults,
// derived from the host: memory its RAM, pids a quarter of the kernel's
// pid_max (pids are one table for the whole host), cpus no ceiling (CPU
// quotas share the host's cores, they cannot use them up for others).
type CallerLimits struct {
	Memory Size    `yaml:"memory"`
	CPUs   float64 `yaml:"cpus"`
	Pids   int64   `yaml:"pids"`
}

// Bounds of the api keys.
const (
	MaxAPIConns = 1 << 20
)

// UnmarshalYAML tells an absent group (the default) from an empty one (root
// only).
func (a *API) UnmarshalYAML(n *yaml.Node) error {
	var raw struct {
		Socket           string       `yaml:"socket"`
		Group            *string      `yaml:"group"`
		MaxConns         int          `yaml:"max_conns"`
		MaxConnsPerUID   int          `yaml:"max_conns_per_uid"`
		MaxStreamsPerUID int          `yaml:"max_streams_per_uid"`
		CallerLimits     CallerLimits `yaml:"caller_limits"`
	}
	// n.Decode does not inherit the file decoder's KnownFields: check here,
	// one level down too.
	if err := knownKeys(n, "config.API", "socket", "group", "max_conns", "max_conns_per_uid", "max_streams_per_uid", "caller_limits"); err != nil {
		return err
	}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "caller_limits" {
				if err := knownKeys(n.Content[i+1], "config.CallerLimits", "memory", "cpus", "pids"); err != nil {
					return err
				}
			}
		}
	}
	if err := n.Decode(&raw); err != nil {
		return err
	}
	a.Socket = raw.Socket
	a.MaxConns, a.MaxConnsPerUID, a.MaxStreamsPerUID = raw.MaxConns, raw.MaxConnsPerUID, raw.MaxStreamsPerUID
	a.CallerLimits = raw.CallerLimits
	if raw.Group != nil {
		a.Group, a.groupSet = *raw.Group, true
	}
	return nil
}

// knownKeys refuses a key of mapping n that is not one of keys.
func knownKeys(n *yaml.Node, typ string, keys ...string) error {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i].Value; !slices.Contains(keys, k) {
			return fmt.Errorf("line %d: field %s not found in type %s", n.Content[i].Line, k, typ)
		}
	}
	return nil
}

func (a *API) applyDefaults() {
	if a.Socket == "" {
		a.Socket = DefaultAPISocket
	}
	if !a.groupSet {
		a.Group, a.groupSet = DefaultAPIGroup, true
	}
}

func (a *API) validate() error {
	if !validGroup(a.Group) {
		return fmt.Errorf("api.group: %q is not a group name or a numeric gid (\"\" means root only)", a.Group)
	}
	switch {
	case a.MaxConns < 0 || a.MaxConns > MaxAPIConns:
		return fmt.Errorf("api.max_conns: %d is not between 0 (derived from RLIMIT_NOFILE) and %d", a.MaxConns, MaxAPIConns)
	case a.MaxConnsPerUID < 0 || a.MaxConnsPerUID > MaxAPIConns:
		return fmt.Errorf("api.max_conns_per_uid: %d is not between 0 (derived) and %d", a.MaxConnsPerUID, MaxAPIConns)
	case a.MaxConns > 0 && a.MaxConnsPerUID > a.MaxConns:
		return fmt.Errorf("api.max_conns_per_uid: %d is more than api.max_conns (%d)", a.MaxConnsPerUID, a.MaxConns)
	case a.MaxStreamsPerUID < 0 || a.MaxStreamsPerUID > MaxAPIConns:
		return fmt.Errorf("api.max_streams_per_uid: %d is not between 0 (derived) and %d", a.MaxStreamsPerUID, MaxAPIConns)
	case a.MaxConnsPerUID > 0 && a.MaxStreamsPerUID > a.MaxConnsPerUID:
		return fmt.Errorf("api.max_streams_per_uid: %d is more than api.max_conns_per_uid (%d): each stream holds a connection", a.MaxStreamsPerUID, a.MaxConnsPerUID)
	}
	cl := a.CallerLimits
	switch {
	case cl.Memory < 0 || cl.Memory > 0 && cl.Memory < 4<<20:
		return fmt.Errorf("api.caller_limits.memory: %s is not 0 (the host's memory) or at least 4M", cl.Memory)
	case !(cl.CPUs == 0 || cl.CPUs >= 0.01) || math.IsInf(cl.CPUs, 0):
		return fmt.Errorf("api.caller_limits.cpus: %v is not 0 (no ceiling) or at least 0.01", cl.CPUs)
	case cl.Pids < 0:
		return fmt.Errorf("api.caller_limits.pids: %d is not 0 (a quarter of the kernel's pid_max) or a positive number", cl.Pids)
	}
	return nil
}

// SetGroup sets Group explicitly ("" is root only), as a flag would.
func (a *API) SetGroup(g string) { a.Group, a.groupSet = g, true }

// validGroup accepts "" (root only), a numeric gid or a POSIX-style group
// name (letters, digits, '_', '-', '.', not starting with '-', at most 32).
func validGroup(g string) bool {
	if g == "" {
		return true
	}
	if len(g) > 32 || g[0] == '-' {
		return false
	}
	for _, r := range g {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}
