//go:build !airlock_front

package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy/learn"
	"github.com/airlock-dev/airlock/termtext"
)

func newPolicySuggestCmd() *cobra.Command {
	var (
		from      []string
		out       string
		sandbox   string
		labels    []string
		threshold int
	)
	cmd := &cobra.Command{
		Use:   "suggest --from FILE... --out DIR",
		Short: "Write a policy directory that allows what an audit log shows was allowed, or refused only by the allowlist",
		Long: `Suggest reads the records of a report-mode run (or the denials of an enforce-mode
run) and writes a policy directory airlock loads as it is:

  http_allow.rego      hosts reached only over HTTP(S) on 443/80: the library's
                       http_allow table, per host the methods and their paths
                       ("/v1/*" a prefix where several paths share it); DNS,
                       CONNECT/TLS and interception are derived from it
  data.json            data.suggested.hosts: every other host (or *.parent),
                       the kinds and ports seen, DNS, and per HTTP method its
                       ports and paths; data.suggested.presets: hosts the
                       presets already allow
  suggested.rego       the rules that read data.json
  airlock-policy.yaml  the presets the log's hosts needed (none: presets: [none])
  suggested_test.rego  one test per distinct decision of the log: what was let
                       through must be allowed, what was refused for another
                       reason (an address guard, a DNS port, a secret, a deny
                       rule) must stay denied
  README.md            what was learned, and what was flagged

A destination that looks like exfiltration (a paste, webhook, tunnel or
file-drop service, an address instead of a name, a label that looks generated)
is flagged on stderr and in the README, and neither allowed nor tested: a
person who knows it adds it.

In report mode the gateway intercepts the TLS connections it lets through only
because they are reported (where the sandbox trusts its CA: airlock run and the
daemon), so the log has methods and paths to learn from.

A request refused with default_deny, port_not_allowed, read_only_body or
git_fetch_not_git_host only is learned. Sibling names become one "*.parent"
entry when --wildcard-threshold or more were seen, never on a public suffix or
directly under one (*.example.com, *.github.io are never suggested). The
directory is loaded with the real engine before suggest exits, and its tests
pass.`,
		Example: `  airlock run --mode report --audit audit.jsonl -- ./agent.sh
  airlock policy suggest --from audit.jsonl --out ./suggested
  airlock policy suggest --from audit.jsonl --label team=ml --out ./ml-policy
  airlock run --policy ./suggested -- ./agent.sh`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lm, err := parseLabels(labels)
			if err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			base, err := learn.NewEngine("")
			if err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			defer base.Close()
			s, err := learn.Suggest(cmd.Context(), from, learn.SuggestConfig{
				Filter: audit.Filter{Sandbox: sandbox}, Labels: lm, Baseline: base, WildcardThreshold: threshold,
			})
			if err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			if len(s.Allowed) == 0 {
				return &exitError{Code: 1, Msg: fmt.Sprintf("no allowed or learnable decisions in %d records: nothing to suggest", s.Records)}
			}
			if err := learn.Write(cmd.Context(), out, s); err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "wrote %s: %d host entries, %d preset(s), %d allowed and %d denied tests\n",
				out, len(s.Hosts), len(s.Presets), min(len(s.Allowed), learn.DefaultMaxTests), min(len(s.Denied), learn.DefaultMaxTests))
			fmt.Fprintf(w, "records %d: allowed %d, learned %d, denied for other reasons %d\n", s.Records, s.AllowedAlready, s.Learned, s.OtherDenied)
			printSkipped(w, s.Skipped)
			for _, k := range sortedFlagged(s.Flagged) {
				fmt.Fprintf(cmd.ErrOrStderr(), "flagged, not suggested: %s: %s\n", termtext.Escape(k), termtext.Escape(strings.Join(s.Flagged[k], "; ")))
			}
			for _, h := range s.Withheld {
				fmt.Fprintf(cmd.ErrOrStderr(), "withheld: %s was only ever seen carrying content findings; not suggested (airlock audit query --findings any --host %s)\n", termtext.Escape(h), termtext.Escape(h))
			}
			for _, c := range s.Conflicts {
				fmt.Fprintf(cmd.ErrOrStderr(), "conflict: seq %d was refused but looks like an allowed request to a policy; not tested\n", c.Seq)
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&from, "from", nil, "audit log file, oldest first (repeatable)")
	cmd.Flags().StringVar(&out, "out", "", "policy directory to write (must not exist or be empty)")
	cmd.Flags().StringVar(&sandbox, "sandbox", "", "learn from this sandbox's records only")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "learn from sandboxes with label K=V only (repeatable; from their creation records)")
	cmd.Flags().IntVar(&threshold, "wildcard-threshold", learn.DefaultWildcardThreshold, "sibling names seen before they become one *.parent entry")
	_ = cmd.MarkFlagRequired("from")
	_ = cmd.MarkFlagRequired("out")
	cmd.MarkFlagsMutuallyExclusive("sandbox", "label")
	return cmd
}

func sortedFlagged(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
