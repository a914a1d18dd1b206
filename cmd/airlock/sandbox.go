package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/termtext"
)

// Exit statuses of the sandbox commands (exec and run have their own: the
// command's status, 125 when airlock failed).
const (
	exitFailed = 1 // the daemon refused, or could not be reached
	exitUsage  = 2 // a bad flag or argument (nothing was done)
)

// socketFlag is the root's persistent flag naming the daemon's socket.
const socketFlag = "socket"

// socketOf is the --socket flag's value ("" when unset or absent: the
// client then uses $AIRLOCK_SOCKET or the default socket).
func socketOf(cmd *cobra.Command) string {
	if f := cmd.Flag(socketFlag); f != nil {
		return f.Value.String()
	}
	return ""
}

func newClient(cmd *cobra.Command) *client.Client {
	return client.New(socketOf(cmd))
}

// apiFailure turns a client error into the command's exit: a request the
// daemon refused as malformed is a usage error, anything else other.
func apiFailure(err error, other int) error {
	switch client.Code(err) {
	case api.CodeBadRequest, api.CodeInvalidField, api.CodeInvalidPath:
		return &exitError{Code: exitUsage, Msg: err.Error()}
	}
	return &exitError{Code: other, Msg: err.Error()}
}

func usageError(format string, args ...any) error {
	return &exitError{Code: exitUsage, Msg: fmt.Sprintf(format, args...)}
}

func newSandboxCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Create, use and remove long-lived sandboxes through the daemon (airlock serve)",
		Long: `sandbox talks to the daemon's API on its unix socket (--socket, $AIRLOCK_SOCKET,
default /run/airlock/airlock.sock). Root and members of the daemon's group
(api.group, default airlock) may use it; a caller sees and controls only the
sandboxes it created, root all of them.

Exit status: 0 done; 1 the daemon refused or could not be reached; 2 a bad flag
or argument (also when the daemon refuses a field). exec exits with the
command's own status instead.`,
		Example: `  id=$(airlock sandbox create --label agent=coder --memory 1G)
  airlock sandbox cp ./src $id:/workspace
  airlock sandbox exec $id -- sh -c 'cd src && make test'
  airlock sandbox cp $id:/workspace/src/out ./results
  airlock sandbox rm $id`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newSandboxCreateCmd(), newSandboxExecCmd(), newSandboxCpCmd(), newSandboxLsCmd(),
		newSandboxInspectCmd(), newSandboxUpdateCmd(), newSandboxLogsCmd(), newSandboxRmCmd())
	return cmd
}

// createOptions are the flags of `airlock sandbox create`.
type createOptions struct {
	labels, env, allow       []string
	secretBindings           []string
	memory, tmpSize          config.Size
	cpus                     float64
	pids                     int64
	execTimeout              config.Duration
	idleTimeout, maxLifetime config.Duration
	workspace, mode          string
	json                     bool
}

func newSandboxCreateCmd() *cobra.Command {
	var o createOptions
	cmd := &cobra.Command{
		Use:   "create [flags]",
		Short: "Create a sandbox and print its id",
		Long: `create asks the daemon for a new sandbox (taken from its warm pool when one is
ready) and prints its id once it can run commands. Limits not given are the
daemon's defaults. The workspace is a host directory the caller owns, bound
read-write at the same path; without one the sandbox gets an empty tmpfs
workspace at /workspace. It lives until rm, --idle-timeout with nothing
running, or --max-lifetime. --secret-binding attaches a binding of the
daemon's secrets file by its id: root may attach any binding with an attach
block, another user only one whose attach.uids lists them; the sandbox gets
its placeholder (if any), never the value (docs/CREDENTIALS.md).`,
		Example: `  airlock sandbox create --label agent=coder --memory 1G --cpus 2 --allow api.openai.com
  airlock sandbox create --workspace "$PWD" --idle-timeout 10m --json
  airlock sandbox create --secret-binding billing-api`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSandboxCreate(cmd, o) },
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.labels, "label", nil, "label KEY=VALUE for policy, secret bindings and ls --label (repeatable)")
	f.Var(&o.memory, "memory", "memory limit, e.g. 512M")
	f.Float64Var(&o.cpus, "cpus", 0, "CPU quota in cores, e.g. 1.5")
	f.Int64Var(&o.pids, "pids", 0, "process and thread limit")
	f.Var(&o.tmpSize, "tmp-size", "size of each of /tmp and $HOME (and a tmpfs workspace), e.g. 256M")
	f.Var(&o.execTimeout, "exec-timeout", "default timeout of each exec, e.g. 10m")
	f.StringVar(&o.workspace, "workspace", "", "host directory bound read-write at the same path (default: an empty /workspace)")
	f.StringArrayVar(&o.env, "env", nil, "KEY=VALUE every exec gets (repeatable)")
	f.StringVar(&o.mode, "mode", "", "enforce or report for this sandbox (default: the daemon's)")
	f.StringArrayVar(&o.allow, "allow", nil, "allow HOST, HOST:PORT, *.domain or **.domain for this sandbox only, written as enforced (repeatable; if you are not root, a wildcard must stay inside one registrable domain: *.example.com, **.api.example.com)")
	f.StringArrayVar(&o.secretBindings, "secret-binding", nil, "attach the secrets file's binding ID to this sandbox (repeatable; the binding needs an attach block granting you)")
	f.Var(&o.idleTimeout, "idle-timeout", "remove the sandbox after this long with nothing running (default: the daemon's)")
	f.Var(&o.maxLifetime, "max-lifetime", "remove the sandbox this long after creation (default: the daemon's)")
	f.BoolVar(&o.json, "json", false, "print the whole sandbox as JSON instead of its id")
	return cmd
}

func runSandboxCreate(cmd *cobra.Command, o createOptions) error {
	labels, err := parseLabels(o.labels)
	if err != nil {
		return usageError("%v", err)
	}
	ws, err := absWorkspace(o.workspace)
	if err != nil {
		return usageError("%v", err)
	}
	req := api.CreateSandboxRequest{
		Labels:    labels,
		Limits:    api.Limits{Memory: o.memory, CPUs: o.cpus, Pids: o.pids, TmpSize: o.tmpSize, ExecTimeout: o.execTimeout},
		Workspace: ws, Env: o.env, Mode: o.mode, Allow: o.allow,
		IdleTimeout: o.idleTimeout, MaxLifetime: o.maxLifetime, SecretBindings: o.secretBindings,
	}
	c := newClient(cmd)
	defer c.Close()
	sb, err := c.CreateSandbox(cmd.Context(), req)
	if err != nil {
		return apiFailure(err, exitFailed)
	}
	if o.json {
		return printJSON(cmd.OutOrStdout(), sb)
	}
	fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
	return nil
}

// parseLabels turns KEY=VALUE flags into a map; keys must be non-empty and unique.
func parseLabels(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--label %q: want KEY=VALUE", kv)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("--label %q: key %q given twice", kv, k)
		}
		out[k] = v
	}
	return out, nil
}

// absWorkspace makes a --workspace absolute and checks it is a directory.
func absWorkspace(ws string) (string, error) {
	if ws == "" {
		return "", nil
	}
	abs, err := filepath.Abs(ws)
	if err != nil {
		return "", fmt.Errorf("--workspace %s: %w", ws, err)
	}
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		return "", fmt.Errorf("--workspace %s: not a directory", ws)
	}
	return abs, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newSandboxLsCmd() *cobra.Command {
	var labels []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls [--label KEY=VALUE ...] [--json]",
		Aliases: []string{"list"},
		Short:   "List the sandboxes you may see (root: all)",
		Long: `ls prints one line per sandbox: id, state, age, idle time, running/total execs,
egress decisions allowed/denied and labels. --label keeps the sandboxes that carry
every given label.`,
		Example: `  airlock sandbox ls --label agent=coder
  airlock sandbox ls --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			want, err := parseLabels(labels)
			if err != nil {
				return usageError("%v", err)
			}
			c := newClient(cmd)
			defer c.Close()
			list, err := c.ListSandboxes(cmd.Context(), want)
			if err != nil {
				return apiFailure(err, exitFailed)
			}
			if asJSON {
				if list == nil {
					list = []api.Sandbox{}
				}
				return printJSON(cmd.OutOrStdout(), list)
			}
			return printSandboxTable(cmd.OutOrStdout(), list)
		},
	}
	cmd.Flags().StringArrayVar(&labels, "label", nil, "only sandboxes with label KEY=VALUE (repeatable: all of them)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the sandboxes as a JSON array")
	return cmd
}

func printSandboxTable(w io.Writer, list []api.Sandbox) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tAGE\tIDLE\tEXECS\tEGRESS\tLABELS")
	for _, sb := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%d/%d\t%s\n", termtext.Escape(sb.ID), termtext.Escape(sb.State), msDuration(sb.AgeMS), msDuration(sb.IdleMS),
			sb.ExecsRunning, sb.ExecsTotal, sb.Egress.Allowed, sb.Egress.Denied, termtext.Escape(labelList(sb.Labels)))
	}
	return tw.Flush()
}

func msDuration(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	if d >= time.Minute {
		return d.Round(time.Second).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// labelList is the labels as K=V,K=V, sorted. Any API user may set them and
// root sees every sandbox's: print it escaped.
func labelList(labels map[string]string) string {
	if len(labels) == 0 {
		return "-"
	}
	kv := make([]string, 0, len(labels))
	for k, v := range labels {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

func newSandboxInspectCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect [--json] ID",
		Short: "Show one sandbox: state, limits, usage now, egress counters",
		Long: `inspect prints what the daemon knows of one sandbox now, one field a line:
state, owner, labels, limits in force, workspace, mode and extra allowed hosts,
age and idle time, execs, CPU, memory and pids now, and its egress decisions
(allowed, denied by kind). --json prints the API's Sandbox object instead.`,
		Example: `  airlock sandbox inspect sb-1a2b3c
  airlock sandbox inspect --json sb-1a2b3c | jq .usage`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := newClient(cmd)
			defer c.Close()
			sb, err := c.GetSandbox(cmd.Context(), args[0])
			if err != nil {
				return apiFailure(err, exitFailed)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), sb)
			}
			return printSandboxFields(cmd.OutOrStdout(), sb)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the sandbox as JSON (the API's Sandbox object)")
	return cmd
}

// printSandboxFields writes sb as a two-column table, one field a line.
func printSandboxFields(w io.Writer, sb *api.Sandbox) error {
	ms := func(n int64) string {
		if n == 0 {
			return "-"
		}
		return msDuration(n)
	}
	orDash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	l, u := sb.Limits, sb.Usage
	rows := [][2]string{
		{"ID", sb.ID},
		{"State", stateText(sb)},
		{"Owner", strconv.Itoa(sb.Owner)},
		{"Labels", labelList(sb.Labels)},
		{"Workspace", orDash(sb.Workspace)},
		{"WorkDir", sb.WorkDir},
		{"Mode", sb.Mode},
		{"Allow", orDash(strings.Join(sb.Allow, ","))},
		{"Secret bindings", orDash(bindingList(sb.SecretBindings))},
		{"Created", sb.CreatedAt.Local().Format(time.RFC3339)},
		{"Age", msDuration(sb.AgeMS)},
		{"Idle", msDuration(sb.IdleMS)},
		{"Idle timeout", ms(sb.IdleTimeoutMS)},
		{"Max lifetime", ms(sb.MaxLifetimeMS)},
		{"Limits", fmt.Sprintf("memory %s, cpus %g, pids %d, tmp %s, exec timeout %s", config.Size(l.MemoryBytes), l.CPUs,
			l.Pids, config.Size(l.TmpSizeBytes), ms(l.ExecTimeoutMS))},
		{"Execs", fmt.Sprintf("%d running, %d in all", sb.ExecsRunning, sb.ExecsTotal)},
		{"Usage", fmt.Sprintf("cpu %s, memory %s (peak %s), pids %d, oom kills %d",
			time.Duration(u.CPUMS*1e6).Round(time.Millisecond), config.Size(u.MemoryBytes), config.Size(u.MemoryPeakBytes),
			u.Pids, u.OOMKills)},
		{"Egress", egressText(sb.Egress)},
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s:\t%s\n", r[0], termtext.Escape(r[1]))
	}
	return tw.Flush()
}

func newSandboxRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID...",
		Aliases: []string{"delete"},
		Short:   "Remove sandboxes: kill every process, remove the namespace, cgroup and tmpfs",
		Long: `rm deletes each sandbox and prints its id with its final CPU time, peak memory
and egress decisions. A sandbox that cannot be removed (unknown, not yours) is
reported and the others are still removed; the exit status is then 1.`,
		Example: `  airlock sandbox rm sb-1a2b3c
  airlock sandbox rm $(airlock sandbox ls --json | jq -r '.[].id')`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := newClient(cmd)
			defer c.Close()
			var errs []error
			for _, id := range args {
				sb, err := c.DeleteSandbox(cmd.Context(), id)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", id, err))
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s\tcpu %s, peak memory %s, egress %d allowed, %d denied\n", termtext.Escape(sb.ID),
					time.Duration(sb.Usage.CPUMS*1e6).Round(time.Millisecond), config.Size(sb.Usage.MemoryPeakBytes),
					sb.Egress.Allowed, sb.Egress.Denied)
			}
			if len(errs) > 0 {
				return &exitError{Code: exitFailed, Msg: errors.Join(errs...).Error()}
			}
			return nil
		},
	}
}

// bindingList shows attached bindings as "id (secret -> host:port mode
// fingerprint)", comma-separated.
func bindingList(bs []api.SecretBinding) string {
	parts := make([]string, 0, len(bs))
	for _, b := range bs {
		fp := b.Fingerprint
		if fp == "" {
			fp = "source unreadable at creation"
		}
		parts = append(parts, fmt.Sprintf("%s (%s -> %s:%d %s, %s)", b.ID, b.Secret, b.Host, b.Port, b.Mode, fp))
	}
	return strings.Join(parts, ", ")
}
