package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/client"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	return execute(newRootCmd(), args)
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "airlock",
		Short:         "Egress gateway and executor for AI-agent sandboxes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersionCmd())
	root.AddCommand(newAuditCmd())
	root.AddCommand(newPolicyCmd())
	root.AddCommand(newCACmd())
	root.AddCommand(newSandboxInitCmd())
	root.AddCommand(newAttachCmd())
	root.AddCommand(newRunCmd())
	root.AddCommand(newServeCmd())
	root.AddCommand(newSandboxCmd())
	root.AddCommand(newConfigCmd())
	root.PersistentFlags().String(socketFlag, "", "the daemon's API socket (default $"+client.SocketEnv+", else "+client.DefaultSocket+")")
	return root
}

// execute runs the command tree on args and returns the exit status, with
// the error printed to the tree's stderr.
func execute(root *cobra.Command, args []string) int {
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		var ec exitCoder
		if asExitCoder(err, &ec) {
			if msg := err.Error(); msg != "" {
				root.PrintErrln("airlock:", msg)
			}
			return ec.ExitCode()
		}
		root.PrintErrln("airlock:", err)
		return 2
	}
	return 0
}
