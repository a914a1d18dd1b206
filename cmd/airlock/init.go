//go:build !airlock_front

package main

import (
	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/netns"
	"github.com/airlock-dev/airlock/sandboxd"
)

// newSandboxInitCmd is the hidden subcommand the executor re-executes the binary as
// (the sandbox's init, PID 1 of its namespaces). It is not for people: it refuses to run unless the
// executor's stage marker is set, and its configuration arrives on fd 3.
func newSandboxInitCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "__sandbox-init",
		Hidden:             true,
		DisableFlagParsing: true,
		Args:               cobra.ArbitraryArgs,
		Run: func(cmd *cobra.Command, args []string) {
			sandboxd.InitMainWith(sandboxd.InitHooks{Island: netns.BuildIsland})
		},
	}
}
