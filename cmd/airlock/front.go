//go:build airlock_front

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/sandboxd"
)

// The front's stand-ins for the core's commands (core.go): each one has the
// real command's name and one-line help and executes the core.
func newAttachCmd() *cobra.Command      { return coreStub("attach") }
func newAuditExportCmd() *cobra.Command { return coreStub("audit export") }
func newCACmd() *cobra.Command          { return coreStub("ca") }
func newPolicyCmd() *cobra.Command      { return coreStub("policy") }
func newServeCmd() *cobra.Command       { return coreStub("serve") }
func newSandboxInitCmd() *cobra.Command { return coreStub("__sandbox-init") }

// coreStub is the stand-in for the core command at path. Its flags are the
// core's to parse (--help included), so it parses none.
func coreStub(path string) *cobra.Command {
	i := slices.IndexFunc(coreCommands, func(c coreCommand) bool { return c.path == path })
	if i < 0 {
		panic("front: " + path + " is no row of coreCommands")
	}
	c := coreCommands[i]
	fields := strings.Fields(c.path)
	cmd := &cobra.Command{
		Use:                fields[len(fields)-1],
		Short:              c.short,
		Hidden:             c.hidden,
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return execCore(os.Args[1:])
		},
	}
	// `airlock help policy explain` and the shell's completion requests
	// (`airlock __complete policy ...`): the core answers the same line.
	cmd.SetHelpFunc(func(c *cobra.Command, _ []string) { mustExecCore(c) })
	cmd.ValidArgsFunction = func(c *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		mustExecCore(c)
		return nil, cobra.ShellCompDirectiveError
	}
	return cmd
}

// mustExecCore is execCore where cobra expects no error: a failure is
// printed and ends the process with status 2.
func mustExecCore(c *cobra.Command) {
	err := execCore(os.Args[1:])
	c.PrintErrln("airlock:", errorText(err.Error()))
	os.Exit(2)
}

// runInProcess hands `airlock run` to the core when it works in-process:
// the core parses the same command line and runs the gateway of its own.
func runInProcess(_ *cobra.Command, _ runOptions, _ []string, _ error) error {
	return execCore(os.Args[1:])
}

// execCore replaces this process with the core, args its command line
// after the program name. It returns only on failure: a core that is missing,
// not ours (sandboxd.OpenSibling), or a front itself.
func execCore(args []string) error {
	self, err := os.Executable()
	if err != nil {
		return coreError(fmt.Errorf("find this executable: %w", err))
	}
	f, bi, err := sandboxd.OpenSibling(self, coreBinary, 3)
	if err != nil {
		return coreError(err)
	}
	if builtAsFront(bi) {
		f.Close()
		return coreError(fmt.Errorf("%s: built as the front (-tags %s), not the core", f.Name(), frontTag))
	}
	argv := append([]string{os.Args[0]}, args...)
	err = unix.Exec(sandboxd.FDExe(f), argv, os.Environ())
	f.Close()
	return coreError(fmt.Errorf("execute %s: %w", f.Name(), err))
}

// coreError is the front's refusal when it cannot run the core: usage
// status 2 (nothing ran), naming the file and the fix.
func coreError(err error) error {
	msg := err.Error()
	if errors.Is(err, fs.ErrNotExist) {
		msg += " (this command runs in " + coreBinary + ", which make build writes beside airlock: install both)"
	}
	return &exitError{Code: 2, Msg: msg}
}

// builtAsFront reports whether bi is a front's build.
func builtAsFront(bi *debug.BuildInfo) bool {
	for _, s := range bi.Settings {
		if s.Key == "-tags" && slices.Contains(strings.Split(s.Value, ","), frontTag) {
			return true
		}
	}
	return false
}
