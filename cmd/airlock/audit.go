package main

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/termtext"
)

func newAuditCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Verify, query and follow the tamper-evident egress audit log",
	}
	cmd.AddCommand(newAuditVerifyCmd(), newAuditQueryCmd(), newAuditTailCmd(), newAuditPubkeyCmd())
	cmd.AddCommand(newAuditReportCmd())
	cmd.AddCommand(newAuditExportCmd())
	return cmd
}

func newAuditVerifyCmd() *cobra.Command {
	var (
		pubkeyFile  string
		requireSigs bool
		partial     bool
		rotated     bool
		maxUnsigned int
		complete    bool
	)
	cmd := &cobra.Command{
		Use:   "verify FILE...",
		Short: "Check the hash chain (and, with --pubkey, the signed checkpoints) of FILE..., in the order given",
		Long: `Verify checks that FILE... (oldest first) form one unbroken chain: every line whole
and valid JSON, seq rising by one, prev the SHA-256 of the previous line, every
checkpoint consistent. With --pubkey every checkpoint signature is checked and at
most --max-unsigned records may follow the last checkpoint, so a rewrite of the
whole chain by someone without the signing key is caught. Without --pubkey only
the chain is checked, and a warning on stderr says the signatures were not;
--require-signatures makes that an error (exit 2). Exit 0 when the chain is
intact, 1 naming FILE:LINE and the reason otherwise.

With retention (audit.max_files, audit.max_bytes) the oldest rotated files are
deleted; the chain then starts past seq 1, which is accepted only where a
retention record in the chain (covered by a signed checkpoint, with --pubkey)
says the deleted part ended, with the hash it recorded. Cutting more from the
front, or deleting a kept file, is still a seq gap.

Records removed from the end of the newest file leave a shorter chain that is
still whole. With --pubkey, --complete (for the log of a stopped airlock, or
rotated files) requires the chain to end in a signed checkpoint, as a clean stop
and every rotation leave it, which catches a cut after the last checkpoint. A
cut exactly after an earlier checkpoint is only visible against a head kept
elsewhere: compare the printed "head" and last seq with a copy taken earlier.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := audit.VerifyOptions{Partial: partial, MaxUnsigned: maxUnsigned, Complete: complete}
			if complete && pubkeyFile == "" {
				return &exitError{Code: 2, Msg: "--complete needs --pubkey (it checks for a final signed checkpoint)"}
			}
			if requireSigs && pubkeyFile == "" {
				return &exitError{Code: 2, Msg: "--require-signatures: no --pubkey given, so the checkpoint signatures cannot be checked"}
			}
			if pubkeyFile != "" {
				pub, err := readPublicKey(pubkeyFile)
				if err != nil {
					return &exitError{Code: 2, Msg: err.Error()}
				}
				opts.PublicKey = pub
			}
			files := args
			if rotated {
				files = nil
				for _, a := range args {
					chain, err := audit.ChainFiles(a)
					if err != nil {
						return &exitError{Code: 2, Msg: err.Error()}
					}
					if len(chain) == 0 {
						return &exitError{Code: 2, Msg: fmt.Sprintf("%s: no such audit file or rotated siblings", a)}
					}
					files = append(files, chain...)
				}
			}
			rep, err := audit.VerifyFiles(opts, files...)
			var ve *audit.VerifyError
			if errors.As(err, &ve) {
				return &exitError{Code: 1, Msg: fmt.Sprintf("%v (%d lines before it verified)", ve, rep.Lines)}
			}
			if err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			fmt.Fprintln(cmd.OutOrStdout(), verifySummary(rep))
			if !rep.SignaturesChecked && rep.Lines > 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), unsignedWarning)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&pubkeyFile, "pubkey", "", "Ed25519 public key (PEM, raw, hex or base64; a private key file also works) to check checkpoint signatures")
	f.BoolVar(&partial, "partial", false, "the first file may start mid-chain (older rotated files were removed)")
	f.BoolVar(&rotated, "rotated", false, "expand each FILE to its rotated siblings (FILE.1, FILE.2, ...) followed by FILE")
	f.BoolVar(&complete, "complete", false, "with --pubkey, the chain must end in a signed checkpoint (its writer has stopped): catches records cut from the end after the last checkpoint")
	f.BoolVar(&requireSigs, "require-signatures", false, "exit 2 when the signatures would not be checked (no --pubkey)")
	f.IntVar(&maxUnsigned, "max-unsigned", audit.DefaultCheckpointEvery, "with --pubkey, most records allowed after the last signed checkpoint (-1: no limit)")
	return cmd
}

// unsignedWarning is verify's word on a chain checked without --pubkey.
const unsignedWarning = "airlock: warning: signatures were NOT checked (no --pubkey): an intact chain shows the records were not edited in place, " +
	"not that airlock wrote them; anyone can write a new chain. Give --pubkey (airlock audit pubkey --key KEY) to check them, " +
	"and --require-signatures to make their absence an error."

func verifySummary(rep audit.Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d records, %d checkpoints, chain ok", rep.Records, rep.Checkpoints)
	if rep.Lines > 0 {
		fmt.Fprintf(&b, " (seq %d..%d in %d file(s)", rep.FirstSeq, rep.LastSeq, rep.Files)
		if rep.SignaturesChecked {
			fmt.Fprintf(&b, "; signatures ok, signed through seq %d, %d unsigned after", rep.SignedThrough, rep.Unsigned)
		} else {
			b.WriteString("; signatures not checked: no --pubkey")
		}
		fmt.Fprintf(&b, "; head %s)", rep.Head)
	}
	if rep.PrunedThrough > 0 {
		fmt.Fprintf(&b, "\nretention deleted seq 1..%d (%d file(s) named by the retention records kept)", rep.PrunedThrough, rep.PrunedFiles)
		if rep.FirstSeq > 1 {
			fmt.Fprintf(&b, "; the kept chain starts at seq %d, anchored by the checkpoint through seq %d", rep.FirstSeq, rep.AnchorSeq)
		}
	}
	if rep.ExportGaps > 0 {
		fmt.Fprintf(&b, "\nexported copy: %d export_gap marker(s) stand for %d records retention deleted before they were shipped (each matches a retention record)", rep.ExportGaps, rep.ExportGapRecords)
	}
	return b.String()
}

func readPublicKey(path string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--pubkey: %w", err)
	}
	pub, err := audit.ParsePublicKey(b)
	if err != nil {
		return nil, fmt.Errorf("--pubkey %s: %w", path, err)
	}
	return pub, nil
}

func newAuditQueryCmd() *cobra.Command {
	var (
		files        []string
		f            audit.Filter
		since, until string
		format       string
		limit        int
		noRotated    bool
		by           string
		labels       []string
		owner        string
	)
	cmd := &cobra.Command{
		Use:   "query --file FILE [--sandbox ID] [--owner U] [--label K=V] [--kind K] [--decision D] [--mode M] [--reason R] [--host H] [--since T] [--until T] [--by host|sandbox|reason|kind] [--format table|json|csv]",
		Short: "Print the audit records that match every given filter (rotated siblings included)",
		Long: `Query streams the audit file and its rotated siblings (FILE.1, FILE.2, ...; oldest
first) and prints the records matching every filter. --host pypi.org is exact;
--host .pypi.org or '*.pypi.org' also matches every name under it. --since and
--until take an RFC 3339 time or a duration back from now (30m, 24h).
Checkpoints are shown only with --kind checkpoint.

A denial in report mode was let through: the table shows it as would_deny with
mode report, apart from an enforced deny, and --mode report (or enforce) selects
one side. --label K=V selects the sandboxes whose creation record carried the
label (daemon sandboxes and airlock run's); --owner takes a uid or a user name.
--findings selects records content inspection found something in (any, a
class such as canary or credential, or a detector); the FINDINGS column names
each finding's detector and place, never its value.
--by host|sandbox|reason|kind|detector prints one row per group instead (requests
allowed, denied, would-deny in report mode and failed, bytes up and down;
summary records count the events they stand for, as in audit report).
Values from the log are shown escaped in the table and CSV (a control, bidi or
invisible character as \x1b, \u202e; a backslash as \\), so none can drive the
terminal; --format json is the records exactly. --format csv also neutralizes
cells a spreadsheet would run as formulas.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return &exitError{Code: 2, Msg: "--file is required"}
			}
			if format != "json" && format != "table" && format != "csv" {
				return &exitError{Code: 2, Msg: fmt.Sprintf("--format %q: want table, json or csv", format)}
			}
			now := time.Now()
			var err error
			if f.Since, err = parseWhen("--since", since, now); err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			if f.Until, err = parseWhen("--until", until, now); err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			if err := queryFilterFlags(&f, labels, owner); err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			var paths []string
			for _, p := range files {
				if noRotated {
					paths = append(paths, p)
					continue
				}
				chain, err := audit.ChainFiles(p)
				if err != nil {
					return &exitError{Code: 2, Msg: err.Error()}
				}
				if len(chain) == 0 {
					return &exitError{Code: 2, Msg: fmt.Sprintf("%s: no such audit file or rotated siblings", p)}
				}
				paths = append(paths, chain...)
			}
			if by != "" {
				return runQueryBy(cmd, paths, f, by, format, limit)
			}
			out := cmd.OutOrStdout()
			var emit func(*audit.Record) error
			var tw *tabwriter.Writer
			var flushCSV func() error
			if format == "csv" {
				emit, flushCSV = csvEmitter(out)
			} else if format == "json" {
				buf := make([]byte, 0, 1024)
				emit = func(r *audit.Record) error {
					buf = append(audit.AppendJSON(buf[:0], r), '\n')
					_, err := out.Write(buf)
					return err
				}
			} else {
				tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TIME\tSEQ\tSANDBOX\tKIND\tDECISION\tMODE\tDESTINATION\tREQUEST\tSTATUS\tREASON\tFINDINGS")
				emit = func(r *audit.Record) error {
					_, err := fmt.Fprintln(tw, tableRow(r))
					return err
				}
			}
			n := 0
			errLimit := errors.New("limit reached")
			err = audit.Query(cmd.Context(), paths, f, func(r *audit.Record) error {
				if limit > 0 && n >= limit {
					return errLimit
				}
				n++
				return emit(r)
			})
			if tw != nil {
				if ferr := tw.Flush(); ferr != nil && err == nil {
					err = ferr
				}
			}
			if flushCSV != nil {
				if ferr := flushCSV(); ferr != nil && err == nil {
					err = ferr
				}
			}
			if err != nil && !errors.Is(err, errLimit) {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&files, "file", nil, "audit file (repeatable); its rotated siblings are read first")
	fl.BoolVar(&noRotated, "no-rotated", false, "read only the given files, not their rotated siblings")
	fl.StringVar(&f.Sandbox, "sandbox", "", "sandbox id")
	fl.StringVar(&f.Node, "node", "", "node name (audit.node): one node's records in a stream collected from many")
	fl.StringVar(&f.Kind, "kind", "", "record kind: http, connect, tls, tcp, dns, drop, exec, close, checkpoint")
	fl.StringVar(&f.Decision, "decision", "", "allow, deny or error (a report-mode would_deny is a deny: add --mode)")
	fl.StringVar(&f.Mode, "mode", "", "report (decisions report mode let through) or enforce (every other decision)")
	fl.StringVar(&f.Reason, "reason", "", "reason id, e.g. default_deny (any of a record's reasons)")
	fl.StringArrayVar(&labels, "label", nil, "sandbox label K=V from its creation record (repeatable: every one must match)")
	fl.StringVar(&owner, "owner", "", "the sandbox owner's uid or user name")
	fl.StringVar(&f.Host, "host", "", "destination host (or DNS qname); a leading '.' or '*.' matches names under it too")
	fl.StringVar(&f.Findings, "findings", "", "records with a content finding: any, a class (credential, canary, encoded, entropy, injection, malformed, oversize) or a detector name")
	fl.StringVar(&since, "since", "", "records at or after this RFC 3339 time, or this long ago (1h)")
	fl.StringVar(&until, "until", "", "records before this RFC 3339 time, or this long ago")
	fl.StringVar(&format, "format", "table", "table, json (one record per line) or csv")
	fl.StringVar(&by, "by", "", "summarize instead: one row per host, sandbox, reason, kind or detector (content findings)")
	fl.IntVar(&limit, "limit", 0, "stop after this many records (0: no limit)")
	return cmd
}

// queryFilterFlags checks --mode and fills the label and owner filters.
func queryFilterFlags(f *audit.Filter, labels []string, owner string) error {
	if f.Mode != "" && f.Mode != audit.ModeEnforce && f.Mode != audit.ModeReport {
		return fmt.Errorf("--mode %q: want enforce or report", f.Mode)
	}
	lm, err := parseLabels(labels)
	if err != nil {
		return err
	}
	f.Labels = lm
	if owner == "" {
		return nil
	}
	if _, err := strconv.ParseUint(owner, 10, 32); err == nil {
		f.Owner = owner
		return nil
	}
	u, err := user.Lookup(owner)
	if err != nil {
		return fmt.Errorf("--owner %q: not a uid or a known user name", owner)
	}
	f.Owner = u.Uid
	return nil
}

// parseWhen reads an RFC 3339 time or a duration back from now.
func parseWhen(flag, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%s %q: want an RFC 3339 time (2025-06-01T12:00:00Z) or a duration ago (30m, 24h)", flag, s)
}

// recordCells describes r for a table or a log line: its destination (host or
// DNS name, with the port), request (method and path, DNS type and answer
// code, or the exec), HTTP status and first reason.
func recordCells(r *audit.Record) (dest, req, status, reason string) {
	dest = r.Host
	if dest == "" {
		dest = r.QName
	}
	if r.Port != 0 {
		dest += ":" + strconv.Itoa(r.Port)
	}
	req = strings.TrimSpace(r.Method + " " + r.Path)
	if r.QType != "" {
		req = strings.TrimSpace(r.QType + " " + r.RCode)
	}
	if r.Exec != nil {
		req = "exec " + r.Exec.Phase + " " + strings.Join(r.Exec.Argv, " ")
	}
	if r.Status != 0 {
		status = strconv.Itoa(r.Status)
	}
	reason = r.Error
	if len(r.Reasons) > 0 {
		reason = r.Reasons[0].ID
	}
	return dest, req, status, reason
}

func tableRow(r *audit.Record) string {
	dest, req, status, reason := recordCells(r)
	cells := []string{r.TS.UTC().Format(time.RFC3339), strconv.FormatUint(r.Seq, 10), r.Sandbox, r.Kind, audit.Outcome(r), r.Mode, dest, req, status, reason, audit.FindingsText(r)}
	for i, c := range cells {
		// One record per row, and nothing a terminal acts on: logged
		// values are escaped (tabs and newlines too).
		cells[i] = termtext.Escape(c)
		if cells[i] == "" {
			cells[i] = "-"
		}
	}
	return strings.Join(cells, "\t")
}

func newAuditTailCmd() *cobra.Command {
	var (
		follow bool
		lines  int
	)
	cmd := &cobra.Command{
		Use:   "tail [-f] [-n N] FILE",
		Short: "Print the last lines of an audit file; with -f follow appends and rotation until interrupted",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			err := audit.Tail(ctx, args[0], audit.TailOptions{Lines: lines, Follow: follow}, func(line []byte) error {
				// Still JSON with the same values, but what JSON leaves
				// raw (DEL, C1, bidi and other invisible characters) is
				// written as \u escapes, so the terminal shows it.
				if _, err := out.Write(termtext.EscapeJSON(line)); err != nil {
					return err
				}
				_, err := io.WriteString(out, "\n")
				return err
			})
			if err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing appended lines, across rotation, until interrupted")
	cmd.Flags().IntVarP(&lines, "lines", "n", 10, "print this many existing lines first (-1: all)")
	return cmd
}

func newAuditPubkeyCmd() *cobra.Command {
	var keyFile string
	cmd := &cobra.Command{
		Use:   "pubkey --key FILE",
		Short: "Print the PEM public key of an audit signing key, for verify --pubkey",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keyFile == "" {
				return &exitError{Code: 2, Msg: "--key is required"}
			}
			b, err := os.ReadFile(keyFile)
			if err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			k, err := audit.ParseSigningKey(b)
			if err != nil {
				return &exitError{Code: 2, Msg: fmt.Sprintf("%s: %v", keyFile, err)}
			}
			_, err = cmd.OutOrStdout().Write(audit.MarshalPublicKey(k.Public().(ed25519.PublicKey)))
			return err
		},
	}
	cmd.Flags().StringVar(&keyFile, "key", "", "the signing key file (audit signing_key_file)")
	return cmd
}
