//go:build !airlock_front

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/secrets"
	"github.com/airlock-dev/airlock/termtext"
)

const explainDoc = `For each host the policy names (the active presets, --allow, the secrets
file's bindings, and every host name in the directory's rules and data) it
prints what a sandbox may do: the DNS question, CONNECT/TLS per port and
whether it is intercepted, raw TCP, and per port the HTTP methods with the
paths they may use ("*": any path; "every request (tunnel, not seen)": the
CONNECT is allowed without interception), and the secrets bound to the host.
It asks the policy itself (ports 443, 80, 22, 8443 and those the policy names;
the paths and globs the policy names), so a host only a computed name matches
is not listed.`

// explainFlags are the flags explain and diff (without --from) share.
type explainFlags struct {
	presets, allow, labels []string
	secretsFile            string
}

func (f *explainFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&f.presets, "preset", nil, "active preset (repeatable; default: the directory's airlock-policy.yaml, else all)")
	cmd.Flags().StringArrayVar(&f.allow, "allow", nil, "host pattern reachable for every kind and method, as run --allow (repeatable)")
	cmd.Flags().StringArrayVar(&f.labels, "label", nil, "the sandbox's label K=V, for rules that read labels (repeatable)")
	cmd.Flags().StringVar(&f.secretsFile, "secrets", "", "secrets file whose bindings are listed per host")
}

func (f *explainFlags) explain(cmd *cobra.Command, dir string) (*policy.Explanation, error) {
	labels, err := parseLabels(f.labels)
	if err != nil {
		return nil, &exitError{Code: 2, Msg: err.Error()}
	}
	bound, err := boundSecrets(f.secretsFile)
	if err != nil {
		return nil, &exitError{Code: 2, Msg: err.Error()}
	}
	x, err := policy.Explain(cmd.Context(), policy.ExplainConfig{
		Policy: policy.Config{Dir: dir, Presets: f.presets, AllowHosts: f.allow, FailingTests: func(err error) {
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s: %s (run and serve refuse this policy)\n", orEmbedded(dir), termtext.Escape(err.Error()))
		}},
		Labels:  labels,
		Secrets: bound,
	})
	if err != nil {
		return nil, &exitError{Code: 2, Msg: fmt.Sprintf("policy %s: %v", orEmbedded(dir), err)}
	}
	return x, nil
}

// boundSecrets maps each binding's host to its secret ids.
func boundSecrets(file string) (map[string][]string, error) {
	if file == "" {
		return nil, nil
	}
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	cfg, err := secrets.Parse(src)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, b := range cfg.Bindings {
		h := strings.TrimPrefix(b.Host, "https://")
		if i := strings.LastIndexByte(h, ':'); i > 0 {
			h = h[:i]
		}
		out[strings.ToLower(h)] = append(out[strings.ToLower(h)], b.Secret)
	}
	return out, nil
}

func orEmbedded(dir string) string {
	if dir == "" {
		return "(embedded)"
	}
	return dir
}

func newPolicyExplainCmd() *cobra.Command {
	var f explainFlags
	var format string
	cmd := &cobra.Command{
		Use:   "explain [DIR]",
		Short: "Print what each host may do under a policy: kinds, ports, interception, methods, paths, secrets",
		Long:  "Explain prints what the policy in DIR (default: the embedded one) lets a sandbox do.\n\n" + explainDoc,
		Example: `  airlock policy explain ./policies
  airlock policy explain ./policies --label team=ml --secrets secrets.yaml --format json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "text" && format != "json" {
				return &exitError{Code: 2, Msg: fmt.Sprintf("--format %q: want text or json", format)}
			}
			x, err := f.explain(cmd, dirArg(args))
			if err != nil {
				return err
			}
			if format == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(x)
			}
			printExplanation(cmd.OutOrStdout(), x)
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json")
	return cmd
}

func printExplanation(w io.Writer, x *policy.Explanation) {
	ps := strings.Join(x.Presets, ", ")
	if ps == "" {
		ps = policy.PresetNone
	}
	fmt.Fprintf(w, "presets: %s\n", ps)
	if len(x.Hosts) == 0 {
		fmt.Fprintln(w, "no host is reachable")
	}
	for _, h := range x.Hosts {
		fmt.Fprintln(w, termtext.Escape(h.Host))
		for _, f := range h.Facts() {
			fmt.Fprintf(w, "  %s\n", termtext.Escape(f))
		}
	}
	if x.NotProbed > 0 {
		fmt.Fprintf(w, "(%d more host names not asked about: at most %d are)\n", x.NotProbed, policy.MaxExplainHosts)
	}
}

// explainDiff prints what NEW changes against OLD host by host; exit 3 when
// NEW lets anything more through.
func explainDiff(cmd *cobra.Command, f *explainFlags, oldDir, newDir, format string) error {
	if format != "text" && format != "json" {
		return &exitError{Code: 2, Msg: fmt.Sprintf("--format %q: want text or json", format)}
	}
	ox, err := f.explain(cmd, oldDir)
	if err != nil {
		return err
	}
	nx, err := f.explain(cmd, newDir)
	if err != nil {
		return err
	}
	ds := policy.DiffExplain(ox, nx)
	w := cmd.OutOrStdout()
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(ds); err != nil {
			return err
		}
	} else {
		if len(ds) == 0 {
			fmt.Fprintln(w, "no difference")
		}
		for _, d := range ds {
			fmt.Fprintln(w, termtext.Escape(d.Host))
			for _, a := range d.Added {
				fmt.Fprintf(w, "  + %s\n", termtext.Escape(a))
			}
			for _, r := range d.Removed {
				fmt.Fprintf(w, "  - %s\n", termtext.Escape(r))
			}
		}
	}
	if n := widened(ds); n > 0 {
		return &exitError{Code: exitNewlyAllowed, Msg: fmt.Sprintf("%d thing(s) newly allowed", n)}
	}
	return nil
}

// widened counts added facts that let more through: everything added but an
// interception that replaces a tunnel on the same port.
func widened(ds []policy.HostDiff) int {
	n := 0
	for _, d := range ds {
		removed := map[string]bool{}
		for _, r := range d.Removed {
			removed[r] = true
		}
		for _, a := range d.Added {
			if p, ok := strings.CutSuffix(a, " intercepted"); ok && removed[p+" tunnel"] {
				continue
			}
			n++
		}
	}
	return n
}
