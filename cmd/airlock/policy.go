//go:build !airlock_front

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/termtext"
)

func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Test, check, evaluate, suggest and replay Rego egress policies (the embedded default when no directory is given)",
	}
	cmd.AddCommand(newPolicyTestCmd(), newPolicyCheckCmd(), newPolicyEvalCmd(),
		newPolicySuggestCmd(), newPolicyReplayCmd(), newPolicyDiffCmd(), newPolicyExplainCmd(), newPolicyBundleCmd())
	return cmd
}

func newPolicyTestCmd() *cobra.Command {
	var coverage, quiet, asJSON bool
	cmd := &cobra.Command{
		Use:   "test [DIR]",
		Short: "Run the *_test.rego tests of DIR (and DIR/examples/*) with the embedded library, presets and default policy",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := policy.RunTests(cmd.Context(), dirArg(args))
			if err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				printTestReport(out, rep, coverage, !quiet)
			}
			if !rep.OK() {
				return &exitError{Code: 1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&coverage, "coverage", true, "report line coverage per file")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print failing tests only")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func printTestReport(w io.Writer, rep *policy.TestReport, coverage, verbose bool) {
	for _, r := range rep.Results {
		if r.Pass && !verbose {
			continue
		}
		status := "PASS"
		if !r.Pass {
			status = "FAIL"
		}
		unit := ""
		if r.Unit != "" {
			unit = "[" + r.Unit + "] "
		}
		fmt.Fprintf(w, "%s %s%s.%s (%s) %v\n", status, unit, r.Package, r.Name, r.Location, r.Duration)
		if !r.Pass && r.Error != "" {
			fmt.Fprintf(w, "    %s\n", r.Error)
		}
	}
	if coverage {
		for _, f := range rep.Files {
			fmt.Fprintf(w, "coverage %6.1f%%  %s\n", f.Percent, f.File)
		}
		fmt.Fprintf(w, "coverage %.1f%%\n", rep.Coverage)
	}
	fmt.Fprintf(w, "PASS: %d/%d\n", rep.Passed, rep.Passed+rep.Failed)
	if rep.Failed > 0 {
		fmt.Fprintf(w, "FAIL: %d/%d\n", rep.Failed, rep.Passed+rep.Failed)
	}
}

func newPolicyCheckCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "check [DIR]",
		Short: "Compile DIR (and DIR/examples/*) in strict mode against the input schema; print file:line problems",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			probs, err := policy.Check(dirArg(args))
			if err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			for _, p := range probs {
				fmt.Fprintln(cmd.ErrOrStderr(), p.String())
			}
			if len(probs) > 0 {
				return &exitError{Code: 1, Msg: fmt.Sprintf("%d problem(s)", len(probs))}
			}
			fmt.Fprintln(cmd.OutOrStdout(), "ok")
			return nil
		},
	}
}

func newPolicyEvalCmd() *cobra.Command {
	var input, dir, mode string
	var presets, allow []string
	cmd := &cobra.Command{
		Use:   "eval --input FILE",
		Short: "Evaluate one input document (FILE, or - for stdin) and print the decision",
		Long: `eval evaluates one policy input document (FILE, or - for stdin) and prints the
decision as JSON, its reasons on stderr.

FILE may instead be one audit record (a line of the audit log): eval then
rebuilds the input the record stands for, as policy replay does, evaluates it
and prints it beside the decision. What a record does not keep is absent from
that input: header and query values, and a daemon sandbox's labels, mode and
allow list (only its creation record has them).

The policy's own tests run first; if some fail, eval warns on stderr and still
answers (run and serve refuse such a policy).`,
		Example: `  airlock policy eval --input req.json
  sed -n 12p /var/log/airlock/audit.jsonl | airlock policy eval --policy ./policies -i -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			src, err := readInput(cmd.InOrStdin(), input)
			if err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			var in *policy.Input
			fromRecord := isAuditRecord(src)
			if fromRecord {
				in, err = recordInput(src)
			} else {
				in, err = policy.ParseInput(src)
			}
			if err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			// A policy being fixed still answers: failing tests are a warning.
			warn := func(err error) {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s (run and serve refuse this policy)\n", termtext.Escape(err.Error()))
			}
			e, err := policy.New(policy.Config{Dir: dir, Mode: policy.Mode(mode), Presets: presets, AllowHosts: allow, CacheSize: -1, FailingTests: warn}, nil)
			if err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			defer e.Close()
			d := e.Decide(context.Background(), in)
			doc := struct {
				policy.Decision
				Permit bool   `json:"permit"`
				Error  string `json:"error,omitempty"`
				// Input is the input rebuilt from an audit record.
				Input *policy.Input `json:"input,omitempty"`
			}{Decision: d, Permit: d.Permit()}
			if fromRecord {
				doc.Input = in
			}
			if d.Err != nil {
				doc.Error = d.Err.Error()
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			if err := enc.Encode(doc); err != nil {
				return err
			}
			for _, r := range d.Reasons {
				// A rule's message may quote the input: a host, a path.
				fmt.Fprintf(cmd.ErrOrStderr(), "reason %s: %s\n", termtext.Escape(r.ID), termtext.Escape(r.Msg))
			}
			if d.Err != nil {
				return &exitError{Code: 2}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&input, "input", "i", "", "input document (JSON) or one audit record, - for stdin")
	cmd.Flags().StringVar(&dir, "policy", "", "policy directory (default: the embedded default policy)")
	cmd.Flags().StringVar(&mode, "mode", "", "global mode: enforce (default) or report")
	cmd.Flags().StringArrayVar(&presets, "preset", nil, "active preset (repeatable; default all, none for none)")
	cmd.Flags().StringArrayVar(&allow, "allow", nil, "host pattern reachable for every kind and method (repeatable)")
	_ = cmd.MarkFlagRequired("input")
	return cmd
}

func readInput(stdin io.Reader, name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(io.LimitReader(stdin, 1<<20))
	}
	return os.ReadFile(name)
}

func dirArg(args []string) string {
	if len(args) == 1 {
		return args[0]
	}
	return ""
}
