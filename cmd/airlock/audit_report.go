package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/report"
)

func newAuditReportCmd() *cobra.Command {
	var (
		out, format  string
		since, until string
		pubkeyFile   string
		cfg          report.Config
		rotated      bool
		mode, owner  string
		labels       []string
	)
	cmd := &cobra.Command{
		Use:   "report FILE... [--out report.html] [--format html|json] [--pubkey KEY] [--sandbox ID] [--owner U] [--label K=V] [--mode M] [--since T] [--until T]",
		Short: "Write a self-contained HTML (or JSON) report of FILE...: verification, traffic per sandbox and destination, denials, DNS flags, secret uses",
		Long: `Report verifies FILE... (oldest first) as one chain, as verify does, and in the
same run folds the records into aggregates: requests allowed, denied and failed
and bytes up and down per sandbox and per destination, a timeline of decisions,
the top denied destinations with their reason ids, DNS exfiltration flags,
every use of a secret (id, version, fingerprint, destination; never a value),
dropped packets, audit-budget summaries and the log's own events (crash
recovery, outages, retention).

The HTML page is one file: its style, script and data are inline, its charts
are SVG drawn by the page, and its Content-Security-Policy forbids every fetch,
so it can be mailed or archived and opened offline. Filters by sandbox, kind,
decision and time work in the page. It embeds aggregates, not records (the
page says what was folded), so a log of a million records stays a small page.
--format json writes exactly the JSON the page embeds.

Without --pubkey the signatures are not checked, and the page says so. A broken
chain does not stop the report: the page opens with the failure. --sandbox,
--owner, --label, --mode, --since and --until select the records aggregated
(the chain is verified whole), as they do for audit query; --since and --until
take an RFC 3339 time or a duration ago (24h).

A denial report mode let through is counted as would deny, apart from the
denials that were enforced, everywhere the page counts decisions.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "html" && format != "json" {
				return &exitError{Code: 2, Msg: fmt.Sprintf("--format %q: want html or json", format)}
			}
			now := time.Now()
			var err error
			if cfg.Since, err = parseWhen("--since", since, now); err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			if cfg.Until, err = parseWhen("--until", until, now); err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			filter := audit.Filter{Mode: mode}
			if err := queryFilterFlags(&filter, labels, owner); err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			cfg.Mode, cfg.Owner, cfg.Labels = filter.Mode, filter.Owner, filter.Labels
			if pubkeyFile != "" {
				if cfg.PublicKey, err = readPublicKey(pubkeyFile); err != nil {
					return &exitError{Code: 2, Msg: err.Error()}
				}
			}
			if cfg.Files, err = reportFiles(args, rotated); err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			rep, err := report.Build(cmd.Context(), cfg)
			if err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			write := rep.WriteHTML
			if format == "json" {
				write = rep.WriteJSON
			}
			if err := writeOut(cmd.OutOrStdout(), out, write); err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			if out != "" && out != "-" {
				fmt.Fprintf(cmd.ErrOrStderr(), "airlock: report of %d records written to %s (%s)\n", rep.Scope.Records, out, reportVerdict(rep.Verification))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&out, "out", "o", "", "write the report to this file (default: standard output)")
	f.StringVar(&format, "format", "html", "html (one self-contained page) or json (the aggregates the page embeds)")
	f.StringVar(&pubkeyFile, "pubkey", "", "Ed25519 public key to check checkpoint signatures (as for verify --pubkey)")
	f.BoolVar(&cfg.Partial, "partial", false, "the first file may start mid-chain (older rotated files were removed)")
	f.BoolVar(&rotated, "rotated", false, "expand each FILE to its rotated siblings (FILE.1, FILE.2, ...) followed by FILE")
	f.IntVar(&cfg.MaxUnsigned, "max-unsigned", audit.DefaultCheckpointEvery, "with --pubkey, most records allowed after the last signed checkpoint (-1: no limit)")
	f.StringVar(&cfg.Sandbox, "sandbox", "", "aggregate only this sandbox's records")
	f.StringVar(&owner, "owner", "", "aggregate only the records of this owner's sandboxes (uid or user name)")
	f.StringArrayVar(&labels, "label", nil, "aggregate only sandboxes with label K=V from their creation record (repeatable)")
	f.StringVar(&mode, "mode", "", "aggregate only report mode's decisions (report) or the others (enforce)")
	f.StringVar(&since, "since", "", "aggregate records at or after this RFC 3339 time, or this long ago (24h)")
	f.StringVar(&until, "until", "", "aggregate records before this RFC 3339 time, or this long ago")
	f.IntVar(&cfg.TopN, "top", report.DefaultTopN, "rows of the destination and denial tables before an (other) row")
	return cmd
}

func reportVerdict(v report.Verification) string {
	switch {
	case !v.OK:
		return "chain verification FAILED"
	case v.SignaturesChecked:
		return "chain and signatures ok"
	default:
		return "chain ok, signatures not checked: no --pubkey"
	}
}

// reportFiles is args, each expanded to its rotated siblings with rotated.
func reportFiles(args []string, rotated bool) ([]string, error) {
	if !rotated {
		return args, nil
	}
	var files []string
	for _, a := range args {
		chain, err := audit.ChainFiles(a)
		if err != nil {
			return nil, err
		}
		if len(chain) == 0 {
			return nil, fmt.Errorf("%s: no such audit file or rotated siblings", a)
		}
		files = append(files, chain...)
	}
	return files, nil
}

// writeOut writes to stdout for "" or "-", else to path through a temporary
// file renamed into place, so a failed run leaves no half report. The file is
// 0600, as the audit log is: it names every destination the sandboxes used.
func writeOut(stdout io.Writer, path string, write func(io.Writer) error) error {
	if path == "" || path == "-" {
		return write(stdout)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".airlock-report-*")
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("--out %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("--out %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	return nil
}
