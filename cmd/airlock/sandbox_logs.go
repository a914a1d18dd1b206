package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/termtext"
)

func newSandboxLogsCmd() *cobra.Command {
	var follow, asJSON bool
	cmd := &cobra.Command{
		Use:   "logs [-f] [--json] ID",
		Short: "Show a sandbox's state and egress; with -f, every decision as it is made",
		Long: `logs reads the sandbox's events stream. Without -f it prints the sandbox's state
and egress counters now. With -f it then prints one line per egress decision as
the daemon audits it (time, decision, kind, destination, request, status,
reason) and each lifecycle change, until the sandbox ends or you interrupt it.
--json prints the events' data as the daemon sends it, one JSON object a line.

The daemon keeps no history of a sandbox's decisions; the audit log has them all
(airlock audit query --sandbox ID, for root).`,
		Example: `  airlock sandbox logs sb-1a2b3c
  airlock sandbox logs -f sb-1a2b3c
  airlock sandbox logs -f --json sb-1a2b3c | jq -r 'select(.record.decision == "deny") | .record.host'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runSandboxLogs(ctx, cmd, args[0], follow, asJSON)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "print every decision and lifecycle change until the sandbox ends")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print each event's data as JSON, one a line")
	return cmd
}

func runSandboxLogs(ctx context.Context, cmd *cobra.Command, id string, follow, asJSON bool) error {
	c := newClient(cmd)
	defer c.Close()
	if !follow {
		// The state now, without a stream: nothing to wait for.
		sb, err := c.GetSandbox(ctx, id)
		if err != nil {
			return apiFailure(err, exitFailed)
		}
		printEvent(cmd.OutOrStdout(), client.Event{Type: client.EventSandbox, Event: api.Event{Sandbox: sb}}, asJSON)
		return nil
	}
	// The stream's first event is the sandbox's state now; it ends after
	// the sandbox has stopped.
	es, err := c.Events(ctx, id)
	if err != nil {
		return apiFailure(err, exitFailed)
	}
	defer es.Close()
	out := cmd.OutOrStdout()
	var dropped int64
	for ev, err := range es.All() {
		if err != nil {
			if ctx.Err() != nil && cmd.Context().Err() == nil {
				return nil // interrupted: the usual way to stop following
			}
			return &exitError{Code: exitFailed, Msg: err.Error()}
		}
		printEvent(out, ev, asJSON)
		if ev.Dropped > dropped {
			fmt.Fprintf(cmd.ErrOrStderr(), "airlock: %d events were dropped (read too slowly)\n", ev.Dropped-dropped)
			dropped = ev.Dropped
		}
	}
	return nil
}

// printEvent writes ev as a line for people, or its data as one JSON line.
func printEvent(w io.Writer, ev client.Event, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(ev.Event)
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	fmt.Fprintln(w, eventLine(ev))
}

// eventLine is one event as a line for people.
func eventLine(ev client.Event) string {
	switch {
	case ev.Sandbox != nil:
		return sandboxLine(ev.Sandbox)
	case ev.Record != nil:
		return decisionLine(ev.Record)
	}
	return termtext.Escape(ev.Type)
}

func sandboxLine(sb *api.Sandbox) string {
	return fmt.Sprintf("%s sandbox %s %s, egress %s", time.Now().Format("15:04:05.000"), termtext.Escape(sb.ID),
		termtext.Escape(stateText(sb)), termtext.Escape(egressText(sb.Egress)))
}

// stateText is the sandbox's state, with why it ended.
func stateText(sb *api.Sandbox) string {
	if sb.EndReason != "" {
		return sb.State + " (" + sb.EndReason + ")"
	}
	return sb.State
}

// egressText is "N allowed, M denied (kind n, ...)", to be printed escaped.
func egressText(e api.Egress) string {
	s := fmt.Sprintf("%d allowed, %d denied", e.Allowed, e.Denied)
	if len(e.DeniedByKind) == 0 {
		return s
	}
	kinds := make([]string, 0, len(e.DeniedByKind))
	for k, n := range e.DeniedByKind {
		kinds = append(kinds, k+" "+strconv.FormatInt(n, 10))
	}
	sort.Strings(kinds)
	return s + " (" + strings.Join(kinds, ", ") + ")"
}

// decisionLine reads an event's record as an audit record: time, decision,
// kind, destination, request, status, reason.
func decisionLine(m map[string]any) string {
	var r audit.Record
	b, _ := json.Marshal(m)
	if err := json.Unmarshal(b, &r); err != nil {
		return termtext.Escape(string(b))
	}
	cells := []string{r.TS.Local().Format("15:04:05.000"), fmt.Sprintf("%-5s", termtext.Escape(r.Decision)), fmt.Sprintf("%-7s", termtext.Escape(r.Kind))}
	dest, req, status, reason := recordCells(&r)
	for _, c := range []string{dest, req, status, reason} {
		if c != "" {
			cells = append(cells, termtext.Escape(c))
		}
	}
	return strings.Join(cells, " ")
}
