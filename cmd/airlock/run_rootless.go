//go:build !airlock_front

package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/daemon"
	"github.com/airlock-dev/airlock/sandboxd"
)

// Rootless `airlock run` (daemon/rootless.go, sandboxd/rootless.go): chosen
// with --rootless, or when the caller is not root and no daemon answers.

// rootlessFiles are the subordinate id files newuidmap reads.
var rootlessFiles = struct{ subuid, subgid string }{"/etc/subuid", "/etc/subgid"}

// rootlessMode checks the host and builds the executor's rootless mode for
// the calling user, or says exactly what to change.
func rootlessMode(why error) (*sandboxd.Rootless, error) {
	if err := sandboxd.CheckUserNamespaces("/proc/sys"); err != nil {
		return nil, &exitError{Code: exitUsage, Msg: fmt.Sprintf("run: %v.\n%s", err, notRootMessage(why))}
	}
	r := &sandboxd.Rootless{UID: os.Getuid(), GID: os.Getgid()}
	name := strconv.Itoa(r.UID)
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	if _, err := exec.LookPath("newuidmap"); err == nil {
		if _, err := exec.LookPath("newgidmap"); err == nil {
			r.SubUID, r.SubGID = sandboxd.LookupSubIDs(rootlessFiles.subuid, rootlessFiles.subgid, name, r.UID)
		}
	}
	for _, d := range []string{os.Getenv("HOME"), os.Getenv("XDG_RUNTIME_DIR")} {
		if d != "" && filepath.IsAbs(d) && filepath.Clean(d) != "/" {
			r.HideHome = append(r.HideHome, filepath.Clean(d))
		}
	}
	return r, nil
}

// rootlessDefaults moves what the defaults put where only root may write
// (the audit log) to the user's directories, unless the config or a flag
// chose a place.
func rootlessDefaults(cfg *config.Config) {
	if cfg.Audit.File == config.DefaultAuditFile {
		cfg.Audit.File = filepath.Join(rootlessStateDir(), "audit.jsonl")
	}
}

// rootlessStateDir is $XDG_STATE_HOME/airlock, else ~/.local/state/airlock,
// else the rootless run directory.
func rootlessStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "airlock")
	}
	if h := os.Getenv("HOME"); filepath.IsAbs(h) && h != "/" {
		if st, err := os.Stat(h); err == nil && st.IsDir() && canWrite(h) {
			return filepath.Join(h, ".local", "state", "airlock")
		}
	}
	return daemon.RootlessRunDir()
}

// canWrite reports whether this process may create files in dir.
func canWrite(dir string) bool {
	f, err := os.CreateTemp(dir, ".airlock-probe-*")
	if err != nil {
		return false
	}
	f.Close()
	os.Remove(f.Name())
	return true
}

// rootlessNotice is the one line run prints on stderr in rootless mode: how
// the sandbox is kept from the gateway and what bounds it.
func rootlessNotice(w io.Writer, r *sandboxd.Rootless, missing []string) {
	limits := "rlimits only (no delegated cgroup v2: processes, files and time are bounded; memory, CPU and I/O are not)"
	if r.Cgroup != "" {
		limits = "cgroup v2 delegated to you at " + r.Cgroup
		if len(missing) > 0 {
			limits += " (not delegated there, so not bounded: " + strings.Join(missing, ", ") + ")"
		}
	}
	fmt.Fprintf(w, "airlock: rootless: island in a user namespace of your own; %s; limits: %s\n", r.Mode(), limits)
}

// rootlessCgroup points r at the cgroup v2 subtree delegated to the user,
// when there is one, and returns the limit controllers it lacks.
func rootlessCgroup(r *sandboxd.Rootless) (missing []string) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	r.Cgroup = sandboxd.DelegatedCgroup(sandboxd.Cgroup2Mount(string(mi)), string(self))
	if r.Cgroup == "" {
		return nil
	}
	have, _ := os.ReadFile(filepath.Join(r.Cgroup, "cgroup.controllers"))
	for _, c := range sandboxd.LimitControllers {
		if !slices.Contains(strings.Fields(string(have)), c) {
			missing = append(missing, c)
		}
	}
	return missing
}
