package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/report"
	"github.com/airlock-dev/airlock/termtext"
)

// queryCSVHeader names the columns of audit query --format csv.
// decision is the record's; outcome is would_deny for a report-mode denial
// (let through), the decision otherwise.
var queryCSVHeader = []string{"time", "seq", "sandbox", "kind", "decision", "destination", "request", "status", "reason", "bytes_up", "bytes_down", "mode", "outcome", "owner", "findings"}

// csvEmitter writes one CSV row per record; flush ends the output.
func csvEmitter(out io.Writer) (emit func(*audit.Record) error, flush func() error) {
	w := csv.NewWriter(out)
	_ = w.Write(queryCSVHeader)
	emit = func(r *audit.Record) error {
		dest, req, status, reason := recordCells(r)
		return w.Write(csvSafe([]string{r.TS.UTC().Format(time.RFC3339Nano), strconv.FormatUint(r.Seq, 10), r.Sandbox, r.Kind, r.Decision,
			dest, req, status, reason, strconv.FormatInt(r.BytesUp, 10), strconv.FormatInt(r.BytesDown, 10), r.Mode, audit.Outcome(r), r.Owner, audit.FindingsText(r)}))
	}
	flush = func() error {
		w.Flush()
		return w.Error()
	}
	return emit, flush
}

// csvSafe makes logged values safe to open: each cell is escaped as the
// table's are (a spreadsheet, or a terminal showing the file, gets no control,
// bidi or invisible character), and a cell starting with = + - or @ gets a
// leading ' so a spreadsheet does not run it as a formula. Numbers are left
// alone (a negative count is still a number).
func csvSafe(cells []string) []string {
	for i, c := range cells {
		c = termtext.Escape(c)
		cells[i] = c
		if c == "" || strings.IndexByte("=+-@", c[0]) < 0 {
			continue
		}
		if _, err := strconv.ParseFloat(c, 64); err == nil {
			continue
		}
		cells[i] = "'" + c
	}
	return cells
}

// runQueryBy prints audit query --by: one row per host, sandbox, reason or
// kind with requests allowed, denied (enforced), would-deny (report mode: let
// through) and failed, and bytes up and down.
func runQueryBy(cmd *cobra.Command, paths []string, f audit.Filter, by, format string, limit int) error {
	rows, err := report.Summarize(cmd.Context(), paths, f, by)
	if err != nil {
		return &exitError{Code: 2, Msg: err.Error()}
	}
	if limit > 0 && len(rows) > limit {
		rows = rows[:limit]
	}
	out := cmd.OutOrStdout()
	switch format {
	case "json":
		enc := json.NewEncoder(out)
		for _, r := range rows {
			if err := enc.Encode(struct {
				By string `json:"by"`
				report.Row
			}{by, r}); err != nil {
				return err
			}
		}
		return nil
	case "csv":
		w := csv.NewWriter(out)
		_ = w.Write([]string{by, "allowed", "denied", "would_deny", "errors", "bytes_up", "bytes_down"})
		for _, r := range rows {
			_ = w.Write(append(csvSafe([]string{r.Key}), countCells(r)...))
		}
		w.Flush()
		return w.Error()
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tALLOWED\tDENIED\tWOULD DENY\tERRORS\tBYTES UP\tBYTES DOWN\t\n", strings.ToUpper(by))
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t\n", termtext.Escape(r.Key), strings.Join(countCells(r), "\t"))
	}
	return tw.Flush()
}

func countCells(r report.Row) []string {
	return []string{strconv.FormatInt(r.Allowed, 10), strconv.FormatInt(r.Denied, 10), strconv.FormatInt(r.WouldDeny, 10), strconv.FormatInt(r.Errors, 10),
		strconv.FormatInt(r.BytesUp, 10), strconv.FormatInt(r.BytesDown, 10)}
}
