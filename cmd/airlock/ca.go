//go:build !airlock_front

package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/gateway"
)

// defaultCADir is where `airlock ca init` writes and `airlock ca show` reads.
const defaultCADir = "/etc/airlock"

func newCACmd() *cobra.Command {
	ca := &cobra.Command{
		Use:   "ca",
		Short: "Manage the TLS interception CA",
	}
	var dir string
	var force bool
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Make a new ECDSA P-256 interception CA (ca.key 0600, ca.pem 0644)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			certPath, keyPath, err := gateway.InitCA(dir, force, time.Now())
			if err != nil {
				return err
			}
			c, err := gateway.LoadCACert(certPath)
			if err != nil {
				return err
			}
			info := gateway.Describe(c)
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s\nfingerprint (SHA-256): %s\nexpires: %s\n",
				certPath, keyPath, info.Fingerprint, info.NotAfter.UTC().Format(time.RFC3339))
			return nil
		},
	}
	initCmd.Flags().StringVar(&dir, "dir", defaultCADir, "directory for ca.pem and ca.key")
	initCmd.Flags().BoolVar(&force, "force", false, "replace an existing CA")

	var showDir, certFile string
	showCmd := &cobra.Command{
		Use:   "show",
		Short: "Print the CA's subject, fingerprint, expiry and PEM certificate",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path := certFile
			if path == "" {
				path = filepath.Join(showDir, gateway.CACertFileName)
			}
			c, err := gateway.LoadCACert(path)
			if err != nil {
				return err
			}
			info := gateway.Describe(c)
			fmt.Fprintf(cmd.OutOrStdout(), "subject: %s\nfingerprint (SHA-256): %s\nnot before: %s\nexpires: %s\n%s",
				info.Subject, info.Fingerprint, info.NotBefore.UTC().Format(time.RFC3339),
				info.NotAfter.UTC().Format(time.RFC3339), info.PEM)
			return nil
		},
	}
	showCmd.Flags().StringVar(&showDir, "dir", defaultCADir, "directory holding ca.pem")
	showCmd.Flags().StringVar(&certFile, "cert", "", "CA certificate file (overrides --dir)")
	ca.AddCommand(initCmd, showCmd)
	return ca
}
