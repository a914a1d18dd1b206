package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/termtext"
)

// inProcessFlags are run's flags only a gateway of run's own can honour;
// any of them makes run work in-process.
var inProcessFlags = []string{"config", "policy", "preset", "secrets", "audit", "id"}

// Bounds of run's talk with a daemon.
const (
	dialTimeout   = 2 * time.Second  // connecting to the socket
	deleteTimeout = 30 * time.Second // removing the sandbox at the end
	eventsDrain   = 5 * time.Second  // -v: the last decisions after the delete
)

// createTimeout bounds the daemon's answer to run's create (a cold sandbox
// on a loaded host included); a variable for the test of a daemon that never
// answers.
var createTimeout = 30 * time.Second

// inProcessFlag names the first in-process-only flag given, or "".
func inProcessFlag(cmd *cobra.Command) string {
	for _, f := range inProcessFlags {
		if cmd.Flags().Changed(f) {
			return f
		}
	}
	return ""
}

// chooseDaemon returns a client of the daemon run should try, or nil and why
// run works in-process instead (a flag asks for it). Whether a daemon
// answers is learnt from the create itself (runViaDaemon): no probe first.
func chooseDaemon(cmd *cobra.Command, o runOptions) (*client.Client, error) {
	if o.noDaemon {
		return nil, &inProcessRequest{"--no-daemon asks for it"}
	}
	if o.rootless {
		return nil, &inProcessRequest{"--rootless asks for it"}
	}
	if flag := inProcessFlag(cmd); flag != "" {
		return nil, &inProcessRequest{"--" + flag + " configures a gateway of run's own"}
	}
	return client.New(socketOf(cmd), client.WithDialTimeout(dialTimeout)), nil
}

// noDaemon is a create that reached no daemon (no socket, nothing
// listening, no permission to connect): nothing was sent, so run may work
// in-process instead. Err says why, naming the socket.
type noDaemon struct{ Err error }

func (e *noDaemon) Error() string { return e.Err.Error() }
func (e *noDaemon) Unwrap() error { return e.Err }

// daemonAbsent wraps a create's error in *noDaemon when it failed before
// any byte reached a daemon, else returns it as it is.
func daemonAbsent(err error) error {
	var ce *client.ConnError
	if errors.As(err, &ce) {
		return &noDaemon{Err: ce}
	}
	return err
}

// inProcessRequest is a flag that makes run work in-process.
type inProcessRequest struct{ why string }

func (e *inProcessRequest) Error() string { return e.why }

// notRootMessage is run's refusal for a caller that is not root, saying why
// no daemon was used and what to do.
func notRootMessage(why error) string {
	const need = "run: running in-process as a user who is not root needs unprivileged user namespaces"
	var ipr *inProcessRequest
	if errors.As(why, &ipr) {
		return fmt.Sprintf("%s (%v); without it run uses the daemon (airlock serve), whose policy applies", need, why)
	}
	return fmt.Sprintf("%s, or a daemon, and no daemon answers: %v.\nStart one (sudo airlock serve) and have your user added to its group "+
		"(api.group, default airlock: sudo usermod -aG airlock $USER), or run as root", need, why)
}

// daemonCreateRequest is the sandbox run asks the daemon for.
func daemonCreateRequest(cmd *cobra.Command, o runOptions) (api.CreateSandboxRequest, error) {
	labels, err := parseLabels(o.labels)
	if err != nil {
		return api.CreateSandboxRequest{}, err
	}
	ws, err := runWorkspace(o.workspace)
	if err != nil {
		return api.CreateSandboxRequest{}, err
	}
	req := api.CreateSandboxRequest{Labels: labels, Workspace: ws, Env: o.env, Mode: o.mode, Allow: o.allow}
	f := cmd.Flags()
	if f.Changed("memory") {
		req.Limits.Memory = o.memory
	}
	if f.Changed("cpus") {
		req.Limits.CPUs = o.cpus
	}
	if f.Changed("pids") {
		req.Limits.Pids = int64(o.pids)
	}
	if f.Changed("timeout") {
		req.Limits.ExecTimeout = o.timeout
	}
	if f.Changed("tmp-size") {
		req.Limits.TmpSize = o.tmpSize
	}
	return req, nil
}

// runViaDaemon is run through a daemon: create, exec with the output
// streamed and stdin sent, delete, then the summary from the sandbox's final
// counters. It returns a *noDaemon when the create reached no daemon, and
// an error after createTimeout when a daemon took the connection but never
// answered (a hung daemon does not hang run, nor is it taken for none: its
// policy might apply).
func runViaDaemon(cmd *cobra.Command, c *client.Client, o runOptions, argv []string) error {
	req, err := daemonCreateRequest(cmd, o)
	if err != nil {
		return &exitError{Code: 2, Msg: err.Error()}
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cctx, ccancel := context.WithTimeout(ctx, createTimeout)
	sb, err := c.CreateSandbox(cctx, req)
	timedOut := cctx.Err() == context.DeadlineExceeded && ctx.Err() == nil
	ccancel()
	var ae *api.Error
	if errors.As(err, &ae) && ae.Field == "workspace" {
		return &exitError{Code: exitUsage, Msg: fmt.Sprintf("run: %s: run from a directory of yours, or give --workspace DIR, or --workspace none", ae.Message)}
	}
	if nd := daemonAbsent(err); nd != err {
		return nd
	}
	if timedOut {
		return &exitError{Code: exitSetupFailed, Msg: fmt.Sprintf("run: the daemon at %s took the connection but did not answer the create within %s: %v",
			c.Socket(), createTimeout, err)}
	}
	if err != nil {
		return apiFailure(err, exitSetupFailed)
	}
	var decisions chan struct{}
	if o.verbose {
		decisions = printDecisions(ctx, c, sb.ID, cmd.ErrOrStderr())
	}
	res, execErr := c.Exec(ctx, sb.ID, api.ExecRequest{Argv: argv}, client.ExecIO{
		Stdin: streamedStdin(cmd.InOrStdin()), Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr()})
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deleteTimeout)
	defer cancel()
	final, delErr := c.DeleteSandbox(dctx, sb.ID)
	if decisions != nil {
		select {
		case <-decisions:
		case <-time.After(eventsDrain):
		}
	}
	var se *client.StdinError
	switch {
	case errors.As(execErr, &se):
		fmt.Fprintln(cmd.ErrOrStderr(), "airlock:", termtext.Escape(execErr.Error()))
	case execErr != nil && ctx.Err() != nil && cmd.Context().Err() == nil:
		return &exitError{Code: exitInterrupted, Msg: "run: interrupted; the command was killed and sandbox " + sb.ID + " removed"}
	case execErr != nil:
		return apiFailure(execErr, exitSetupFailed)
	}
	if delErr != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "airlock: removing sandbox %s: %s\n", termtext.Escape(sb.ID), termtext.Escape(delErr.Error()))
		final = sb
	}
	if !o.quiet {
		writeDaemonSummary(cmd.ErrOrStderr(), res, final)
	}
	if res.Error != "" {
		// The command's stderr already said why, as a shell would.
		return &exitError{Code: res.ExitStatus}
	}
	return execExit(res)
}

// streamedStdin is the stdin run streams to the command: r, or nil when r
// is /dev/null, which the command's own empty stdin already is (it saves
// the daemon a stdin call per run).
func streamedStdin(r io.Reader) io.Reader {
	f, ok := r.(*os.File)
	if !ok {
		return r
	}
	var st, null unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR ||
		unix.Stat(os.DevNull, &null) != nil || st.Rdev != null.Rdev {
		return r
	}
	return nil
}

// printDecisions prints the sandbox's decisions to w as the daemon audits
// them, until the stream ends (after the sandbox is deleted) or ctx does; the
// channel is closed then.
func printDecisions(ctx context.Context, c *client.Client, id string, w io.Writer) chan struct{} {
	done := make(chan struct{})
	es, err := c.Events(ctx, id)
	if err != nil {
		fmt.Fprintln(w, "airlock: -v: no events stream:", termtext.Escape(err.Error()))
		close(done)
		return done
	}
	go func() {
		defer close(done)
		defer es.Close()
		for ev, err := range es.All() {
			if err != nil {
				return
			}
			if ev.Record != nil {
				fmt.Fprintln(w, "airlock:", decisionLine(ev.Record))
			}
		}
	}()
	return done
}

// writeDaemonSummary is run's closing lines for a sandbox of the daemon: how
// the command ended, its egress counters, its usage.
func writeDaemonSummary(w io.Writer, res *api.ExecResult, sb *api.Sandbox) {
	switch {
	case res.TimedOut:
		fmt.Fprintf(w, "airlock: timed out after %s; the command's processes were killed\n",
			time.Duration(sb.Limits.ExecTimeoutMS)*time.Millisecond)
	case res.OOMKilled:
		fmt.Fprintf(w, "airlock: out of memory (limit %s); the command was killed\n", config.Size(sb.Limits.MemoryBytes))
	}
	// The in-process run's printer: counts, then the destinations.
	e := sb.Egress
	s := audit.Summary{Allowed: e.Allowed, Denied: e.Denied, WouldDeny: e.WouldDeny, Omitted: e.DestinationsOmitted}
	for _, r := range e.Destinations {
		s.Rows = append(s.Rows, audit.TallyRow{Decision: r.Decision, Kind: r.Kind, Host: r.Host, Port: r.Port, Count: r.Count})
	}
	s.Write(w, summaryRows)
	fmt.Fprintf(w, "airlock: exit %d, wall %s, cpu %s, peak memory %s, sandbox %s\n", res.ExitStatus,
		time.Duration(res.WallMS*1e6).Round(time.Millisecond), time.Duration(res.CPUMS*1e6).Round(time.Millisecond),
		config.Size(res.PeakMemory), termtext.Escape(sb.ID))
}
