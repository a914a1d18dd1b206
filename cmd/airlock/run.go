package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/config"
)

// summaryRows is how many destinations run's egress summary lists.
const summaryRows = 12

// exitSetupFailed is airlock run's status when it could not set the sandbox up
// (as docker and podman use 125), distinct from any status of the command.
const exitSetupFailed = 125

// runOptions are the flags of `airlock run` (daemon/DESIGN.md). Each one, when given, overrides the config file.
type runOptions struct {
	config    string
	policyDir string
	allow     []string
	presets   []string
	secrets   string
	audit     string
	memory    config.Size
	cpus      float64
	pids      int
	timeout   config.Duration
	tmpSize   config.Size
	workspace string
	env       []string
	mode      string
	id        string
	labels    []string
	verbose   bool
	quiet     bool
	noDaemon  bool
	rootless  bool
}

func newRunCmd() *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run [flags] -- COMMAND [ARG...]",
		Short: "Run a command in a sandbox whose only way out is the airlock gateway",
		Long: `run starts the gateway and DNS filter in this process, makes an island network
namespace, and runs COMMAND in it as an unprivileged user with CPU, memory,
process, disk and time limits. HTTP(S) goes through policy (the embedded default:
package registries read-only, everything else denied), DNS is filtered, every
other packet is dropped, and every decision is written to the audit log.

When a daemon (airlock serve) answers on its socket (--socket, $AIRLOCK_SOCKET,
default /run/airlock/airlock.sock), run asks it for the sandbox instead, so any
member of the daemon's group can use it without root: the daemon's policy,
secrets and audit log apply, and the limits, --allow, --mode, --label, --env
and --workspace flags go with the request. Flags that configure a gateway of
its own (--config, --policy, --preset, --secrets, --audit, --id) and
--no-daemon make run work in-process. So does a socket that is missing,
refuses the connection or may not be used by the caller; a daemon that takes
the connection but does not answer the create within 30s fails the run (exit
125) instead of running it under another policy.

In-process, run needs no root: a user who is not root (or --rootless) gets
the same island in a user namespace of their own (the gateway's listeners are
made inside it, its connections leave from the user's network), the same
policy, audit, secrets and inspection; stderr says so in one line starting
"airlock: rootless:", and what bounds the sandbox: the cgroup v2 subtree
systemd delegates to the user where there is one, else rlimits and the
timeout (memory, CPU and I/O are then not bounded). The audit log goes to
$XDG_STATE_HOME/airlock (~/.local/state/airlock) unless configured. With a
range for the user in /etc/subuid and /etc/subgid the sandbox runs as a uid
of its own; a host that restricts user namespaces is named with the sysctl
to change.

COMMAND runs in the current directory: it is bound read-write at the same path
inside the sandbox and is the command's working directory, so ./agent.sh,
python3 agent.py and pytest see the project and what they write lands in it.
--workspace DIR binds DIR instead, --workspace none gives an empty /workspace.
A directory that is / or root's home, holds the audit log, or lies inside a
directory kept from sandboxes (the audit log's, the policy directory,
/etc/airlock, /var/lib/airlock, ...) is refused, naming the file and the fix;
the secrets file, config, CA key or audit log further down are hidden inside.
Through a daemon the directory must be yours.

It exits with the command's exit code (124 on timeout, 137 on OOM kill, 128+n on
signal n) and prints an egress summary to stderr. Its own failures have codes of
their own, so they are never mistaken for the command's: 2 for a usage or
configuration error (nothing ran), 125 when the sandbox could not be set up, 126
or 127 when the command could not be executed.`,
		Example: `  cd my-project && airlock run -- ./agent.sh
  airlock run --allow api.openai.com --memory 1G --timeout 10m -- python3 agent.py
  airlock run --workspace none -- pip install requests
  airlock run --rootless --allow pypi.org -- pip download requests
  sudo airlock run --no-daemon --policy ./policies --audit /var/tmp/agent.jsonl -- pytest`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &exitError{Code: 2, Msg: "run: missing command (airlock run [flags] -- COMMAND [ARG...])"}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRun(cmd, o, args)
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false)
	f.StringVar(&o.config, "config", "", "airlock.yaml (default: built-in defaults)")
	f.StringVar(&o.policyDir, "policy", "", "policy directory with package airlock.egress rules (overrides policy.dir)")
	f.StringArrayVar(&o.allow, "allow", nil, "allow HOST, *.domain or **.domain for every method on ports 443 and 80; HOST:PORT for PORT, HOST:* for every port but DNS's 53 and 853 (repeatable)")
	f.StringArrayVar(&o.presets, "preset", nil, "registry preset to allow read-only (GET, HEAD, OPTIONS without a body; git fetch to git hosts) on the ports it names, 443 and 80: python, node, go, rust, github, debian, ubuntu, none (repeatable)")
	f.StringVar(&o.secrets, "secrets", "", "secrets file (overrides secrets.file)")
	f.StringVar(&o.audit, "audit", "", "audit log file (overrides audit.file)")
	f.Var(&o.memory, "memory", "memory limit, e.g. 512M (overrides limits.memory)")
	f.Float64Var(&o.cpus, "cpus", 0, "CPU quota in cores, e.g. 1.5 (overrides limits.cpus)")
	f.IntVar(&o.pids, "pids", 0, "process and thread limit (overrides limits.pids)")
	f.Var(&o.timeout, "timeout", "wall-clock limit, e.g. 60s (overrides limits.timeout)")
	f.Var(&o.tmpSize, "tmp-size", "size of each of /tmp and $HOME, e.g. 256M (overrides limits.tmp_size)")
	f.StringVar(&o.workspace, "workspace", "", "host directory bound read-write at the same path, where COMMAND starts (default: the current directory; none: an empty /workspace)")
	f.StringArrayVar(&o.env, "env", nil, "KEY=VALUE for the command (repeatable)")
	f.StringVar(&o.mode, "mode", "", "enforce or report (overrides policy.mode)")
	f.StringVar(&o.id, "id", "", "sandbox id policy and audit see (default run-<random>)")
	f.StringArrayVar(&o.labels, "label", nil, "sandbox label KEY=VALUE for policy and secret bindings (repeatable)")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "log every decision to stderr")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "print no egress summary")
	f.BoolVar(&o.noDaemon, "no-daemon", false, "run in-process (root) even when a daemon answers")
	f.BoolVar(&o.rootless, "rootless", false, "run in-process without root (chosen by itself when you are not root and no daemon answers)")
	return cmd
}

// workspaceNone is --workspace's value for an empty workspace.
const workspaceNone = "none"

// runWorkspace is the directory run binds for --workspace ws: ws made
// absolute, the current directory when ws is empty, nothing for "none".
func runWorkspace(ws string) (string, error) {
	switch ws {
	case workspaceNone:
		return "", nil
	case "":
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("the current directory (the default workspace): %w; give --workspace DIR, or --workspace none", err)
		}
		return wd, nil
	}
	return absWorkspace(ws)
}

func runRun(cmd *cobra.Command, o runOptions, argv []string) error {
	if o.rootless && os.Geteuid() == 0 {
		return &exitError{Code: exitUsage, Msg: errRootlessAsRoot.Error()}
	}
	c, inProcess := chooseDaemon(cmd, o)
	if c != nil {
		err := runViaDaemon(cmd, c, o, argv)
		c.Close()
		var nd *noDaemon
		if !errors.As(err, &nd) {
			return err
		}
		inProcess = nd.Err
	}
	return runInProcess(cmd, o, argv, inProcess)
}

// errRootlessAsRoot refuses --rootless for root, which gets the full
// sandbox.
var errRootlessAsRoot = errors.New("run: --rootless is for users who are not root (as root, run makes the full sandbox)")
