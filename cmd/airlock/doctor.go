package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/hostcheck"
)

// The hidden --probe values: the child inside the namespaces, and (from
// root, for --user) the user's process that makes them.
const (
	probeChild  = "child"
	probeUserns = "userns"
)

func newDoctorCmd() *cobra.Command {
	var mode, userName, cfgPath, probe string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor [--mode root|rootless|user-daemon|cni] [--user NAME] [--json]",
		Short: "Check this host for what each mode needs: one line per check, what works and what to change",
		Long: `doctor checks the host for what each way of running airlock needs and prints
one line per check: its status (OK, WARN, FAIL, SKIP), what it found and, after
"->", what to change. The modes: root (airlock run and serve as root), rootless
(airlock run as an ordinary user), user-daemon (airlock serve --user) and cni
(the CNI plugin and attach, through the root daemon). The checks: root or not;
the kernel and its build options for the link-layer guard (5.17+, netdev
egress, route classid); the sysctls that restrict unprivileged user namespaces
(kernel.unprivileged_userns_clone, user.max_user_namespaces,
kernel.apparmor_restrict_unprivileged_userns); a real probe that makes a user
namespace owning a network namespace, brings lo up and tries each iptables
backend inside; newuidmap, newgidmap and the user's /etc/subuid and subgid
ranges; the cgroup version (v1, v2, hybrid), its controllers and a delegated
v2 subtree for the user; iptables-legacy and iptables-nft as root; the
descriptor limit; the system trust store; the audit directories; the runtime
directory serve --user puts its socket in; airlock-cni.

A FAIL stops the modes it concerns; a WARN is a weaker or slower setup (no
subordinate uids: the sandbox shares your uid; no delegated cgroup: rlimits).
The last line says which modes work. The exit status is 0 when --mode works
(default: root as root, rootless otherwise), 1 when it does not. As root,
--user NAME checks the rootless modes for that user (the probe runs as it).`,
		Example: `  airlock doctor                    # as yourself: can I run rootless?
  sudo airlock doctor               # root and cni modes
  sudo airlock doctor --user alice  # alice's rootless modes too, probed as alice
  airlock doctor --json | jq .works`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch probe {
			case "":
			case probeChild:
				return hostcheck.ProbeChild(cmd.Context(), cmd.OutOrStdout())
			case probeUserns:
				return printProbe(cmd)
			default:
				return &exitError{Code: 2, Msg: fmt.Sprintf("doctor: --probe %q: must be %s or %s", probe, probeChild, probeUserns)}
			}
			return runDoctor(cmd, mode, userName, cfgPath, asJSON)
		},
	}
	cmd.Flags().StringVar(&mode, "mode", "", "the mode whose result is the exit status: root, rootless, user-daemon or cni (default: root as root, rootless otherwise)")
	cmd.Flags().StringVar(&userName, "user", "", "as root: the user whose rootless modes are checked (the probe runs as it)")
	cmd.Flags().StringVar(&cfgPath, "config", "", "airlock.yaml whose audit.file is checked (default: built-in defaults)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().StringVar(&probe, "probe", "", "internal: the user-namespace probe's child")
	_ = cmd.Flags().MarkHidden("probe")
	return cmd
}

func runDoctor(cmd *cobra.Command, modeName, userName, cfgPath string, asJSON bool) error {
	euid := os.Geteuid()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return &exitError{Code: 2, Msg: err.Error()}
	}
	h := hostcheck.Host{EUID: euid, UID: -1, AuditDir: filepath.Dir(cfg.Audit.File)}
	exe, err := os.Executable()
	if err != nil {
		return &exitError{Code: 2, Msg: "doctor: " + err.Error()}
	}
	switch {
	case userName != "" && euid != 0:
		return &exitError{Code: 2, Msg: "doctor: --user is for root; as yourself, doctor checks you"}
	case userName != "":
		u, err := lookupUser(userName)
		if err != nil {
			return &exitError{Code: 2, Msg: "doctor: --user: " + err.Error()}
		}
		h.User, h.UID, h.GID = u.Username, atoi(u.Uid), atoi(u.Gid)
		if h.UID == 0 {
			return &exitError{Code: 2, Msg: "doctor: --user: name a user other than root"}
		}
		h.Probe = func(ctx context.Context) (hostcheck.ProbeResult, error) {
			return hostcheck.ProbeAs(ctx, exe, h.UID, h.GID, "doctor", "--probe", probeUserns)
		}
	case euid != 0:
		h.UID, h.GID, h.Self = os.Getuid(), os.Getgid(), true
		if u, err := user.LookupId(strconv.Itoa(h.UID)); err == nil {
			h.User = u.Username
		}
		h.Probe = func(ctx context.Context) (hostcheck.ProbeResult, error) {
			return hostcheck.ProbeUserns(ctx, exe, "doctor", "--probe", probeChild)
		}
		if d, err := config.ResolveUserDirs(os.Getenv, h.UID, homeOf(h.UID)); err == nil {
			h.UserAuditDir = filepath.Join(d.State, "audit")
			h.UserRuntimeDir = filepath.Dir(d.Runtime)
		}
	}
	mode := hostcheck.ModeRoot
	if euid != 0 || userName != "" {
		mode = hostcheck.ModeRootless
	}
	if modeName != "" {
		if mode, err = hostcheck.ParseMode(modeName); err != nil {
			return &exitError{Code: 2, Msg: "doctor: --" + err.Error()}
		}
	}
	r := hostcheck.Run(cmd.Context(), h, mode)
	if asJSON {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		fmt.Fprint(cmd.OutOrStdout(), r.Text())
	}
	if !r.OK {
		return &exitError{Code: 1}
	}
	return nil
}

// printProbe is the user's side of root's --user probe: it makes the
// namespaces as itself and prints what the child found.
func printProbe(cmd *cobra.Command) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	res, err := hostcheck.ProbeUserns(cmd.Context(), exe, "doctor", "--probe", probeChild)
	if err != nil {
		return err
	}
	return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
}

func lookupUser(name string) (*user.User, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if _, numeric := strconv.Atoi(name); numeric == nil {
			return user.LookupId(name)
		}
	}
	return u, err
}

func homeOf(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.HomeDir
	}
	return ""
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}
