package hostcheck

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// limitControllers are the cgroup controllers airlock's limits use.
var limitControllers = []string{"memory", "pids", "cpu"}

// cgroupVersion is v2 (unified), hybrid (v1 controllers with a cgroup2 mount
// beside them), v1, or "" when no cgroup filesystem is mounted.
func cgroupVersion(h Host) string {
	root := filepath.Join(h.Sys, "fs/cgroup")
	exists := func(p string) bool { _, err := os.Stat(filepath.Join(root, p)); return err == nil }
	switch {
	case exists("cgroup.controllers"):
		return "v2"
	case exists("memory") && exists("unified/cgroup.controllers"):
		return "hybrid"
	case exists("memory") || exists("pids"):
		return "v1"
	}
	return ""
}

// checkCgroup reports the version, the controllers root mode's limits use,
// and whether the user has a delegated cgroup v2 subtree (rootless limits by
// cgroup; rlimits otherwise).
func checkCgroup(h Host) []Check {
	root := filepath.Join(h.Sys, "fs/cgroup")
	ver := cgroupVersion(h)
	vc := Check{Name: "cgroup", Modes: rootModes}
	var missing []string
	switch ver {
	case "":
		vc.Status = StatusFail
		vc.Detail = "no cgroup filesystem under " + root + ": the executor cannot bound a sandbox"
		vc.Fix = "mount cgroup2 at /sys/fs/cgroup (mount -t cgroup2 none /sys/fs/cgroup)"
	case "v2":
		have := fields(filepath.Join(root, "cgroup.controllers"))
		for _, c := range limitControllers {
			if !have[c] {
				missing = append(missing, c)
			}
		}
	default:
		for _, c := range limitControllers {
			if _, err := os.Stat(filepath.Join(root, c)); err != nil {
				missing = append(missing, c)
			}
		}
	}
	if ver != "" {
		vc.Status = StatusOK
		vc.Detail = "cgroup " + ver + " with " + strings.Join(limitControllers, ", ")
		if len(missing) > 0 {
			vc.Status = StatusFail
			vc.Detail = "cgroup " + ver + " lacks the " + strings.Join(missing, ", ") + " controller(s): limits would be silently off, so the executor refuses"
			vc.Fix = "enable them (cgroup_enable= on the kernel command line, or a kernel with them built)"
		}
	}
	return []Check{vc, checkDelegation(h, ver)}
}

// checkDelegation finds the user's cgroup v2 directory (its own, from
// /proc/self/cgroup, when the checker is the user; its systemd user
// manager's otherwise) and checks it is the user's with the limit
// controllers available.
func checkDelegation(h Host, ver string) Check {
	c := Check{Name: "cgroup.delegation", Modes: userModes}
	fallback := "rootless limits are rlimits (per process: the memory of the whole tree, CPU share and I/O are not bounded)"
	fix := "on a cgroup v2 host (systemd.unified_cgroup_hierarchy=1) run under a systemd user session: systemd-run --user --scope -p Delegate=yes airlock run ..."
	if h.UID < 0 {
		c.Status, c.Detail = StatusSkip, "no user named"
		return c
	}
	unified := filepath.Join(h.Sys, "fs/cgroup")
	switch ver {
	case "hybrid":
		c.Status, c.Detail, c.Fix = StatusWarn, "cgroup hybrid: the limit controllers are bound to v1, which cannot be delegated: "+fallback, fix
		return c
	case "v2":
	default:
		c.Status, c.Detail, c.Fix = StatusWarn, "cgroup "+orNone(ver)+" has no unified hierarchy to delegate: "+fallback, fix
		return c
	}
	var dir string
	if h.Self {
		if p, ok := ownCgroup(h); ok {
			dir = filepath.Join(unified, p)
		}
	}
	if dir == "" {
		uid := strconv.Itoa(h.UID)
		dir = filepath.Join(unified, "user.slice", "user-"+uid+".slice", "user@"+uid+".service")
	}
	fi, err := os.Stat(dir)
	if err != nil {
		c.Status, c.Detail, c.Fix = StatusWarn, "no cgroup of uid "+strconv.Itoa(h.UID)+" ("+err.Error()+"): "+fallback, fix
		return c
	}
	// Delegated: the directory is the user's, and so is the file that
	// enables controllers for its children.
	sub, serr := os.Stat(filepath.Join(dir, "cgroup.subtree_control"))
	if ownerOf(fi) != h.UID || serr != nil || ownerOf(sub) != h.UID {
		c.Status = StatusWarn
		c.Detail = fmt.Sprintf("%s is not delegated to uid %d: %s", dir, h.UID, fallback)
		c.Fix = fix
		return c
	}
	have := fields(filepath.Join(dir, "cgroup.controllers"))
	var missing []string
	for _, ctl := range limitControllers {
		if !have[ctl] {
			missing = append(missing, ctl)
		}
	}
	if len(missing) > 0 {
		c.Status = StatusWarn
		c.Detail = fmt.Sprintf("%s is delegated without %s: those limits are rlimits", dir, strings.Join(missing, ", "))
		c.Fix = "systemctl edit user@.service: [Service] Delegate=" + strings.Join(limitControllers, " ")
		return c
	}
	c.Status = StatusOK
	c.Detail = dir + " is delegated to uid " + strconv.Itoa(h.UID) + " with " + strings.Join(limitControllers, ", ") + ": rootless sandboxes are bounded there"
	return c
}

func orNone(v string) string {
	if v == "" {
		return "(none)"
	}
	return v
}

// ownCgroup is the checking process's cgroup v2 path (the "0::" line).
func ownCgroup(h Host) (string, bool) {
	b, err := os.ReadFile(filepath.Join(h.Proc, "self/cgroup"))
	if err != nil {
		return "", false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok && p != "" {
			return p, true
		}
	}
	return "", false
}

// fields reads a space-separated list file into a set.
func fields(path string) map[string]bool {
	s, _ := readTrim(path)
	out := map[string]bool{}
	for _, f := range strings.Fields(s) {
		out[f] = true
	}
	return out
}

// checkIPTables: root mode loads the island's rules with iptables-legacy or
// iptables-nft (auto prefers legacy); as root each is tried read-only.
func checkIPTables(ctx context.Context, h Host) Check {
	c := Check{Name: "iptables", Modes: rootModes}
	var installed, works, fails []string
	for _, b := range []string{"legacy", "nft"} {
		if _, err := h.LookPath("iptables-" + b + "-restore"); err != nil {
			continue
		}
		installed = append(installed, b)
		if h.EUID != 0 {
			continue
		}
		if out, err := h.Run(ctx, "iptables-"+b, "-w", "-n", "-L", "OUTPUT"); err != nil {
			fails = append(fails, fmt.Sprintf("%s: %v %s", b, err, firstLine(out)))
		} else {
			works = append(works, b)
		}
	}
	switch {
	case len(installed) == 0:
		c.Status, c.Detail, c.Fix = StatusFail, "neither iptables-legacy-restore nor iptables-nft-restore is installed", "apt-get install iptables"
	case h.EUID != 0:
		c.Status, c.Detail = StatusOK, "installed: "+strings.Join(installed, ", ")+" (tried as root)"
	case len(works) == 0:
		c.Status = StatusFail
		c.Detail = "no backend works: " + strings.Join(fails, "; ")
		c.Fix = "modprobe ip_tables (legacy) or nf_tables (nft)"
	default:
		c.Status = StatusOK
		c.Detail = "works: " + strings.Join(works, ", ") + " (auto uses " + works[0] + ")"
		if len(fails) > 0 {
			c.Detail += "; " + strings.Join(fails, "; ")
		}
	}
	return c
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}
