package main

import (
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/termtext"
)

func main() {
	nameProcess()
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
	root.AddCommand(newApproveCmd())
	root.AddCommand(newConfigCmd())
	root.AddCommand(newDoctorCmd())
	root.PersistentFlags().String(socketFlag, "", "the daemon's API socket (default $"+client.SocketEnv+", else your own daemon's (serve --user) when it runs, else "+client.DefaultSocket+")")
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
				root.PrintErrln("airlock:", errorText(msg))
			}
			return ec.ExitCode()
		}
		root.PrintErrln("airlock:", errorText(err.Error()))
		return 2
	}
	return 0
}

// errorText is an error's text for a terminal: it may quote a host, a path
// or a file name from a sandbox, so each line is escaped; the line breaks
// of a joined error are kept.
func errorText(msg string) string {
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		lines[i] = termtext.Escape(l)
	}
	return strings.Join(lines, "\n")
}
