package main

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// version is stamped at build time: -ldflags "-X main.version=v0.1.0".
var version = "dev"

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the airlock version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "airlock %s %s/%s %s\n", version, runtime.GOOS, runtime.GOARCH, runtime.Version())
			return nil
		},
	}
}

// exitCoder is an error that carries the process exit code (a failed verify, the
// sandboxed command's own status). Subcommands return one instead of calling os.Exit.
type exitCoder interface {
	error
	ExitCode() int
}

// exitError is the plain exitCoder: Msg may be empty when the command already
// printed what went wrong.
type exitError struct {
	Code int
	Msg  string
}

func (e *exitError) Error() string { return e.Msg }
func (e *exitError) ExitCode() int { return e.Code }

func asExitCoder(err error, target *exitCoder) bool { return errors.As(err, target) }
