package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/config"
)

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Print the example configuration file, or check one",
		Long: `One YAML file configures airlock run, serve and attach (--config FILE);
flags override it. Unknown keys are errors that name the key.`,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "example",
		Short: "Print a commented configuration file holding every key at its default",
		Long: `Print a commented configuration file holding every key at its default value,
a starting point for --config:

  airlock config example | sudo tee /etc/airlock/airlock.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := cmd.OutOrStdout().Write(config.Example())
			return err
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "check FILE",
		Short: "Check a configuration file: exit 0 and print ok, or name the bad key and exit 1",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := config.Load(args[0]); err != nil {
				return &exitError{Code: 1, Msg: err.Error()}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok\n", args[0])
			return nil
		},
	})
	return cmd
}
