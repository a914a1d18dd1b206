package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/termtext"
)

// exitInterrupted is exec's status when a second interrupt made it give up
// on the command (which the daemon then kills), as a shell reports SIGINT.
const exitInterrupted = 130

// execOptions are the flags of `airlock sandbox exec`.
type execOptions struct {
	env         []string
	cwd         string
	timeout     config.Duration
	interactive bool
}

func newSandboxExecCmd() *cobra.Command {
	var o execOptions
	cmd := &cobra.Command{
		Use:   "exec [flags] ID -- COMMAND [ARG...]",
		Short: "Run a command in a sandbox, streaming its output; exit with its status",
		Long: `exec runs COMMAND in sandbox ID (in its workspace unless --cwd) and writes its
stdout and stderr here as they are produced. With -i this process's standard
input is streamed to the command; without it the command's stdin is empty.
Several execs may run in one sandbox at once.

An interrupt (Ctrl-C) or SIGTERM is passed to the command; a second one
disconnects, and the daemon kills the command's process group.

Exit status: the command's (124 timed out, 137 OOM-killed, 128+n killed by
signal n); 126 or 127 when it could not be executed; 2 for a bad flag or a
request the daemon refused (bad --cwd, --timeout); 125 when airlock failed
(no such sandbox, daemon unreachable, the stream broke); 130 after a second
interrupt.`,
		Example: `  airlock sandbox exec sb-1a2b3c -- pip install -r requirements.txt
  airlock sandbox exec --cwd /workspace/src --timeout 5m sb-1a2b3c -- make test
  git diff | airlock sandbox exec -i sb-1a2b3c -- git apply`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usageError("exec: want a sandbox id and a command (airlock sandbox exec ID -- COMMAND [ARG...])")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runSandboxExec(cmd, o, args[0], args[1:]) },
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.env, "env", nil, "KEY=VALUE for the command, after the sandbox's own (repeatable)")
	f.StringVar(&o.cwd, "cwd", "", "working directory inside the sandbox (default: its workspace)")
	f.Var(&o.timeout, "timeout", "kill the command's process group after this long (default: the sandbox's exec timeout)")
	f.BoolVarP(&o.interactive, "interactive", "i", false, "stream this process's standard input to the command")
	return cmd
}

func runSandboxExec(cmd *cobra.Command, o execOptions, id string, argv []string) error {
	c := newClient(cmd)
	defer c.Close()
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	s, err := c.StartExec(ctx, id, api.ExecRequest{Argv: argv, Env: o.env, Cwd: o.cwd, Timeout: o.timeout, StdinStream: o.interactive})
	if err != nil {
		return apiFailure(err, exitSetupFailed)
	}
	defer s.Close()
	stopSignals := forwardSignals(ctx, func(sig string) {
		// The daemon's answer does not matter: a command that has ended
		// needs no signal.
		_ = s.Signal(context.WithoutCancel(ctx), sig)
	}, cancel)
	defer stopSignals()
	if o.interactive {
		go func() {
			if err := s.Stdin(ctx, cmd.InOrStdin()); err != nil && ctx.Err() == nil && !stdinEndedWithExec(err) {
				fmt.Fprintln(cmd.ErrOrStderr(), "airlock: stdin:", termtext.Escape(err.Error()))
			}
		}()
	}
	res, err := s.Wait(cmd.OutOrStdout(), cmd.ErrOrStderr())
	if err != nil {
		if ctx.Err() != nil && cmd.Context().Err() == nil {
			return &exitError{Code: exitInterrupted, Msg: "exec: interrupted; the daemon kills the command"}
		}
		return apiFailure(err, exitSetupFailed)
	}
	return execExit(res)
}

// execExit is the command's exit: its status, with the reason it could not
// be started said.
func execExit(res *api.ExecResult) error {
	switch {
	case res.Error != "":
		return &exitError{Code: res.ExitStatus, Msg: "exec: " + res.Error}
	case res.ExitStatus != 0:
		return &exitError{Code: res.ExitStatus}
	}
	return nil
}

// stdinEndedWithExec says a stdin stream failed only because its command had
// already ended.
func stdinEndedWithExec(err error) bool {
	code := client.Code(err)
	return code == api.CodeConflict || code == api.CodeNotFound
}

// forwardSignals passes the first SIGINT, SIGTERM or SIGHUP to send (by
// name) and calls giveUp on the next one. The returned func stops it.
func forwardSignals(ctx context.Context, send func(sig string), giveUp func()) func() {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		forwarded := false
		for {
			select {
			case sig := <-ch:
				if forwarded {
					giveUp()
					return
				}
				forwarded = true
				send(signalName(sig))
			case <-done:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "TERM"
	case syscall.SIGHUP:
		return "HUP"
	}
	return "INT"
}
