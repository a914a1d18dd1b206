package config

import (
	"fmt"
	"path/filepath"
	"strconv"
)

// The per-user daemon's (`airlock serve --user`) directories follow the XDG
// base directory rules: each variable when it is set to an absolute path,
// else its default under the user's home or /run/user/UID.
const (
	// UserRuntimeEnv holds the user's runtime directory (the socket's).
	UserRuntimeEnv = "XDG_RUNTIME_DIR"
	// UserStateEnv holds the user's state directory (run dir, audit log).
	UserStateEnv = "XDG_STATE_HOME"
	// UserConfigEnv holds the user's config directory (airlock.yaml, CA).
	UserConfigEnv = "XDG_CONFIG_HOME"
	// UserSubdir is airlock's directory inside each of them.
	UserSubdir = "airlock"
	// UserSocketName is the per-user daemon's socket in its runtime dir.
	UserSocketName = "airlock.sock"
	// DefaultUserMetricsListen is the per-user daemon's metrics listener
	// when the config leaves the system daemon's: any free port, so a
	// user's daemon never takes (or fails on) the system one's.
	DefaultUserMetricsListen = "127.0.0.1:0"
)

// UserDirs are the directories of one user's daemon, each already ending in
// UserSubdir.
type UserDirs struct {
	UID int
	// Runtime holds the API socket (XDG_RUNTIME_DIR, else /run/user/UID).
	Runtime string
	// State holds the run directory and the audit log (XDG_STATE_HOME,
	// else HOME/.local/state).
	State string
	// Config holds airlock.yaml and the interception CA (XDG_CONFIG_HOME,
	// else HOME/.config).
	Config string
}

// ResolveUserDirs returns uid's directories from its environment (getenv):
// the XDG variables, else $HOME, else pwHome (the password database's home).
// A relative XDG variable is ignored, as the spec says; no absolute home is
// an error naming what to set.
func ResolveUserDirs(getenv func(string) string, uid int, pwHome string) (UserDirs, error) {
	d := UserDirs{UID: uid, Runtime: UserRuntimeDir(getenv, uid)}
	home := getenv("HOME")
	if !filepath.IsAbs(home) {
		home = pwHome
	}
	base := func(env, rel string) (string, error) {
		if v := getenv(env); filepath.IsAbs(v) {
			return filepath.Join(filepath.Clean(v), UserSubdir), nil
		}
		if !filepath.IsAbs(home) {
			return "", fmt.Errorf("$%s is unset and the home directory %q is not absolute: set $%s or $HOME", env, home, env)
		}
		return filepath.Join(home, rel, UserSubdir), nil
	}
	var err error
	if d.State, err = base(UserStateEnv, ".local/state"); err != nil {
		return UserDirs{}, err
	}
	if d.Config, err = base(UserConfigEnv, ".config"); err != nil {
		return UserDirs{}, err
	}
	return d, nil
}

// UserRuntimeDir is uid's airlock runtime directory: $XDG_RUNTIME_DIR/airlock,
// else /run/user/UID/airlock.
func UserRuntimeDir(getenv func(string) string, uid int) string {
	if v := getenv(UserRuntimeEnv); filepath.IsAbs(v) {
		return filepath.Join(filepath.Clean(v), UserSubdir)
	}
	return filepath.Join("/run/user", strconv.Itoa(uid), UserSubdir)
}

// UserSocket is uid's per-user daemon socket (UserRuntimeDir/airlock.sock).
func UserSocket(getenv func(string) string, uid int) string {
	return filepath.Join(UserRuntimeDir(getenv, uid), UserSocketName)
}

// Socket is the API socket.
func (d UserDirs) Socket() string { return filepath.Join(d.Runtime, UserSocketName) }

// RunDir is the daemon's run directory (namespace state, ephemeral CA).
func (d UserDirs) RunDir() string { return filepath.Join(d.State, "serve") }

// ConfigFile is the config the per-user daemon loads when it exists.
func (d UserDirs) ConfigFile() string { return filepath.Join(d.Config, "airlock.yaml") }

// ApplyUser moves every path c left at the system daemon's default into
// the user's directories: the socket (mode 0600, no group), the audit log,
// the CA, the bundle cache, and a metrics port of its own. Paths the file
// names are kept as written.
func (c *Config) ApplyUser(d UserDirs) {
	if c.API.Socket == DefaultAPISocket {
		c.API.Socket = d.Socket()
	}
	// Only the user may connect: no group shares the socket.
	c.API.Group = ""
	if c.Audit.File == DefaultAuditFile {
		c.Audit.File = filepath.Join(d.State, "audit", "audit.jsonl")
	}
	if c.CA.Cert == DefaultCACert && c.CA.Key == DefaultCAKey {
		c.CA.Cert = filepath.Join(d.Config, "ca.pem")
		c.CA.Key = filepath.Join(d.Config, "ca.key")
	}
	if b := c.Policy.Bundle; b != nil && b.PersistDir == DefaultBundlePersistDir {
		b.PersistDir = filepath.Join(d.State, "bundle")
	}
	if c.Metrics.Listen == DefaultMetricsListen {
		c.Metrics.Listen = DefaultUserMetricsListen
	}
}
