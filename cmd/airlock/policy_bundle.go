//go:build !airlock_front

package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/policy"
)

func newPolicyBundleCmd() *cobra.Command {
	var out, keyFile string
	var o policy.BundleBuild
	cmd := &cobra.Command{
		Use:   "bundle DIR --out FILE",
		Short: "Write policy directory DIR as a (signed) OPA bundle for policy.bundle, after compiling it and running its tests",
		Long: `Write policy directory DIR as an OPA bundle tarball that policy.bundle serves to
airlock: every *.rego and *_test.rego at its path, data.json/data.yaml merged at
their directory's path, presets/NAME.json as data at airlock/presets/NAME, and a
manifest with --revision. DIR is first loaded as a downloaded bundle would be
(strict compile over the embedded library, DIR's own tests); a failure writes
nothing. With --signing-key (a PEM RSA or ECDSA private key) the bundle carries
an OPA signature with --key-id and --scope, as policy.bundle.signing expects.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if keyFile != "" {
				pem, err := os.ReadFile(keyFile)
				if err != nil {
					return &exitError{Code: 2, Msg: fmt.Sprintf("--signing-key: %v", err)}
				}
				o.SigningKey = string(pem)
			} else if o.KeyID != "" || o.Scope != "" || o.Algorithm != "" {
				return &exitError{Code: 2, Msg: "--key-id, --scope and --signing-alg need --signing-key"}
			}
			var buf bytes.Buffer
			if err := policy.BuildBundle(cmd.Context(), args[0], o, &buf); err != nil {
				return &exitError{Code: 1, Msg: err.Error()}
			}
			tmp, err := os.CreateTemp(filepath.Dir(out), ".airlock-bundle-*")
			if err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			_, err = tmp.Write(buf.Bytes())
			if cerr := tmp.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = os.Rename(tmp.Name(), out)
			}
			if err != nil {
				os.Remove(tmp.Name())
				return &exitError{Code: 2, Msg: err.Error()}
			}
			signed := "unsigned"
			if o.SigningKey != "" {
				signed = "signed with key " + o.KeyID
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%d bytes, revision %q, %s)\n", out, buf.Len(), o.Revision, signed)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&out, "out", "o", "", "bundle file to write (required)")
	f.StringVar(&o.Revision, "revision", "", "the manifest's revision, stamped (with a content hash) on every audit record")
	f.StringVar(&keyFile, "signing-key", "", "PEM private key (RSA or ECDSA) to sign the bundle with")
	f.StringVar(&o.KeyID, "key-id", "", "the signing key's id (policy.bundle.signing.key_id)")
	f.StringVar(&o.Scope, "scope", "", "the signature's scope claim (policy.bundle.signing.scope)")
	f.StringVar(&o.Algorithm, "signing-alg", "", "RS256|384|512, PS256|384|512, ES256|384|512 (default: the key's)")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}
