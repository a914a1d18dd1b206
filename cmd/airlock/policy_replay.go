//go:build !airlock_front

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/learn"
	"github.com/airlock-dev/airlock/termtext"
)

// exitNewlyAllowed is the exit status of replay and diff when the new policy
// allows a decision the old one denied: a CI gate fails on it.
const exitNewlyAllowed = 3

const replayExitDoc = `Exit status: 0 when nothing is newly allowed (newly denied decisions are
listed, and still exit 0), 3 when anything is newly allowed, 2 on an error
(a policy that does not load, an unreadable log).`

const replayInputDoc = `Each http, connect, tls, tcp and dns record that policy decided is rebuilt into
its input: the destination, method, path and query keys, the DNS question, the
sandbox (with the labels, mode and allow list of its creation record). What a
record does not keep is absent: header and query values, the body size, and
the scheme (https on port 443). Other records (close, exec, sandbox, drop,
checkpoint, summaries) and decisions policy never made (a malformed request)
are skipped and counted by reason and kind. Identical inputs are evaluated
once.`

// replayFlags are the flags replay and diff share.
type replayFlags struct {
	from    []string
	sandbox string
	labels  []string
	format  string
	limit   int
}

func (f *replayFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&f.from, "from", nil, "audit log file, oldest first (repeatable)")
	cmd.Flags().StringVar(&f.sandbox, "sandbox", "", "replay this sandbox's records only")
	cmd.Flags().StringArrayVar(&f.labels, "label", nil, "replay records of sandboxes with label K=V only (repeatable)")
	cmd.Flags().StringVar(&f.format, "format", "text", "output: text or json")
	cmd.Flags().IntVar(&f.limit, "examples", learn.DefaultExamples, "example records listed per destination")
}

// run replays with newDir against the records (oldDir "" with hasOld false:
// the records' own decisions).
func (f *replayFlags) run(cmd *cobra.Command, oldDir string, hasOld bool, newDir string) error {
	if f.format != "text" && f.format != "json" {
		return &exitError{Code: 2, Msg: fmt.Sprintf("--format %q: want text or json", f.format)}
	}
	lm, err := parseLabels(f.labels)
	if err != nil {
		return &exitError{Code: 2, Msg: err.Error()}
	}
	cfg := learn.ReplayConfig{Filter: audit.Filter{Sandbox: f.sandbox}, Labels: lm, Examples: f.limit}
	load := func(dir string) (*policy.Engine, error) {
		e, err := learn.NewEngine(dir)
		if err != nil {
			return nil, &exitError{Code: 2, Msg: fmt.Sprintf("policy %s: %v", dir, err)}
		}
		return e, nil
	}
	ne, err := load(newDir)
	if err != nil {
		return err
	}
	defer ne.Close()
	cfg.New = ne
	if hasOld {
		oe, err := load(oldDir)
		if err != nil {
			return err
		}
		defer oe.Close()
		cfg.Old = oe
	}
	rep, err := learn.Replay(cmd.Context(), f.from, cfg)
	if err != nil {
		return &exitError{Code: 2, Msg: err.Error()}
	}
	if f.format == "json" {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printReplay(cmd.OutOrStdout(), rep)
	}
	if rep.NewlyAllowed > 0 {
		return &exitError{Code: exitNewlyAllowed, Msg: fmt.Sprintf("%d decision(s) newly allowed", rep.NewlyAllowed)}
	}
	return nil
}

func newPolicyReplayCmd() *cobra.Command {
	var f replayFlags
	var dir string
	cmd := &cobra.Command{
		Use:   "replay --policy DIR --from FILE...",
		Short: "Evaluate a policy against the decisions of an audit log and print what would change",
		Long: "Replay compares DIR's decision on every past input with the decision the log\nrecords (the policy's: a request the address guard or the secrets check refused\nafter policy allowed it counts as allowed).\n\n" +
			replayInputDoc + "\n\n" + replayExitDoc,
		Example: `  airlock policy replay --policy ./policies --from /var/log/airlock/audit.jsonl
  airlock policy replay --policy ./policies --from audit.jsonl.1 --from audit.jsonl --format json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd, "", false, dir)
		},
	}
	cmd.Flags().StringVar(&dir, "policy", "", "policy directory to replay (required; the embedded default policy is always underneath)")
	_ = cmd.MarkFlagRequired("policy")
	f.add(cmd)
	_ = cmd.MarkFlagRequired("from")
	return cmd
}

func newPolicyDiffCmd() *cobra.Command {
	var f replayFlags
	var ef explainFlags
	cmd := &cobra.Command{
		Use:   "diff OLD NEW [--from FILE...]",
		Short: "Print what policy directory NEW changes against OLD: per host, or against an audit log's decisions",
		Long: "Without --from, diff compares what OLD and NEW let a sandbox do, host by host,\nas `policy explain` prints it: + lines NEW adds, - lines it removes.\n\n" +
			explainDoc + "\n\nWith --from, diff evaluates OLD and NEW on every past input of the log and lists\nthe decisions NEW allows that OLD denied, and the reverse.\n\n" + replayInputDoc + "\n\n" + replayExitDoc +
			" Without --from the same: 3 when NEW lets anything more through (an\ninterception replacing a tunnel does not count).",
		Example: `  git worktree add /tmp/main main
  airlock policy diff /tmp/main/policies ./policies
  airlock policy diff /tmp/main/policies ./policies --from audit.jsonl`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(f.from) == 0 {
				return explainDiff(cmd, &ef, args[0], args[1], f.format)
			}
			return f.run(cmd, args[0], true, args[1])
		},
	}
	f.add(cmd)
	cmd.Flags().StringArrayVar(&ef.presets, "preset", nil, "without --from: active preset (repeatable; default: each directory's airlock-policy.yaml, else all)")
	cmd.Flags().StringArrayVar(&ef.allow, "allow", nil, "without --from: host pattern reachable for every kind and method (repeatable)")
	cmd.Flags().StringVar(&ef.secretsFile, "secrets", "", "without --from: secrets file whose bindings are listed per host")
	return cmd
}

func printReplay(w io.Writer, rep *learn.Report) {
	fmt.Fprintf(w, "records %d, replayed %d (%d distinct evaluations), unchanged %d, newly allowed %d, newly denied %d\n",
		rep.Records, rep.Replayed, rep.Evaluations, rep.Unchanged, rep.NewlyAllowed, rep.NewlyDenied)
	if rep.PolicyErrors > 0 {
		fmt.Fprintf(w, "policy errors: %d evaluations failed closed\n", rep.PolicyErrors)
	}
	printSkipped(w, rep.Skipped)
	printChanges(w, "newly allowed", rep.Allowed)
	printChanges(w, "newly denied", rep.Denied)
}

func printChanges(w io.Writer, title string, cs []learn.Change) {
	if len(cs) == 0 {
		return
	}
	fmt.Fprintf(w, "%s:\n", title)
	for _, c := range cs {
		fmt.Fprintf(w, "  %6d  %s\n", c.Count, termtext.Escape(c.Destination()))
		for _, x := range c.Examples {
			what := strings.TrimSpace(x.Method + " " + x.Path + " " + x.QType)
			fmt.Fprintf(w, "          seq %d %s %s (was: %s; now: %s)\n", x.Seq, termtext.Escape(x.Sandbox), termtext.Escape(what),
				termtext.Escape(reasonsOr(x.Before, "allowed")), termtext.Escape(reasonsOr(x.After, "allowed")))
		}
	}
}

func reasonsOr(ids []string, none string) string {
	if len(ids) == 0 {
		return none
	}
	return strings.Join(ids, ",")
}

func printSkipped(w io.Writer, skipped map[string]map[string]int) {
	reasons := make([]string, 0, len(skipped))
	for r := range skipped {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		kinds := make([]string, 0, len(skipped[r]))
		for k, n := range skipped[r] {
			kinds = append(kinds, fmt.Sprintf("%s %d", termtext.Escape(k), n))
		}
		sort.Strings(kinds)
		fmt.Fprintf(w, "skipped (%s): %s\n", termtext.Escape(r), strings.Join(kinds, ", "))
	}
}
