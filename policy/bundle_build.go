package policy

import (
	"context"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/bundle"
)

// BundleBuild says how BuildBundle writes a bundle.
type BundleBuild struct {
	// Revision is the manifest's revision (printable ASCII, at most
	// MaxBundleRevisionLen bytes; empty: none).
	Revision string
	// SigningKey is a PEM private key (RSA or ECDSA); empty writes an
	// unsigned bundle.
	SigningKey string
	// KeyID names the key in the signature; Scope is its scope claim.
	KeyID string
	Scope string
	// Algorithm: RS256|384|512, PS256|384|512, ES256|384|512; empty: the
	// key's own (RS256 for RSA, ES256/384/512 by the curve).
	Algorithm string
}

// BuildBundle writes the policy directory dir as an OPA bundle to w: first it
// loads dir exactly as a bundle is activated (strict compile over the
// embedded library, dir's own tests), then writes every *.rego at its path
// and the data (data.json/yaml merged at their directory's path, presets/NAME.json
// at airlock/presets/NAME) with a manifest, signed when a key is given. OPA's
// `opa build` cannot check such a directory on its own: its rules call the
// library airlock embeds.
func BuildBundle(ctx context.Context, dir string, o BundleBuild, w io.Writer) error {
	if err := checkRevision(o.Revision); err != nil {
		return fmt.Errorf("policy: bundle: %w", err)
	}
	files, err := dirFiles(dir)
	if err != nil {
		return err
	}
	if _, ok := files[schemaFile]; ok {
		return fmt.Errorf("policy: bundle: %s: a bundle cannot carry the input schema (the embedded one applies)", filepath.Join(dir, schemaFile))
	}
	if _, ok := files[ManifestFile]; ok {
		return fmt.Errorf("policy: bundle: %s: a bundle cannot carry a manifest yet; set policy.presets in the gateways' configuration instead", filepath.Join(dir, ManifestFile))
	}
	// The directory as a bundle of it would be activated: compiled, tested.
	e, err := New(Config{Dir: dir}, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	e.Close()
	b := bundle.Bundle{Manifest: bundle.Manifest{Revision: o.Revision}, Data: map[string]any{}}
	rels := make([]string, 0, len(files))
	for rel := range files {
		rels = append(rels, rel)
	}
	sort.Strings(rels)
	for _, rel := range rels {
		f := files[rel]
		var (
			doc any
			at  []string
		)
		switch {
		case strings.HasSuffix(rel, ".rego"):
			b.Modules = append(b.Modules, bundle.ModuleFile{URL: "/" + rel, Path: "/" + rel, Raw: f.Src})
			continue
		case path.Dir(rel) == presetsDir:
			if err := json.Unmarshal(f.Src, &doc); err != nil {
				return fmt.Errorf("%s: %w", f.Name, err)
			}
			at = []string{"airlock", "presets", strings.TrimSuffix(path.Base(rel), ".json")}
			doc = map[string]any{at[2]: doc}
			at = at[:2]
		default:
			if doc, err = decodeData(f); err != nil {
				return err
			}
			if d := path.Dir(rel); d != "." {
				at = strings.Split(d, "/")
			}
		}
		if err := mergeAt(b.Data, at, doc, f.Name); err != nil {
			return err
		}
	}
	if o.SigningKey != "" {
		if err := signBundle(&b, o); err != nil {
			return err
		}
	}
	if err := bundle.NewWriter(w).UseModulePath(true).DisableFormat(true).Write(b); err != nil {
		return fmt.Errorf("policy: bundle: %w", err)
	}
	return ctx.Err()
}

// signBundle adds the signature of o's key to b.
func signBundle(b *bundle.Bundle, o BundleBuild) error {
	if o.KeyID == "" {
		return fmt.Errorf("policy: bundle: a signing key needs a key id")
	}
	alg, err := signingAlgorithm(o.SigningKey, o.Algorithm)
	if err != nil {
		return err
	}
	// OPA's signer reads extra claims from a file: the scope and key id.
	claims, err := json.Marshal(map[string]string{"scope": o.Scope, "keyid": o.KeyID})
	if err != nil {
		return err
	}
	f, err := os.CreateTemp("", "airlock-bundle-claims-*.json")
	if err != nil {
		return fmt.Errorf("policy: bundle: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(claims)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("policy: bundle: %w", err)
	}
	if err := b.GenerateSignature(bundle.NewSigningConfig(o.SigningKey, alg, f.Name()), o.KeyID, true); err != nil {
		return fmt.Errorf("policy: bundle: sign: %w", err)
	}
	return nil
}

// signingAlgorithm checks a PEM private key and returns the algorithm to
// sign with: want when given (it must fit the key), else the key's own.
func signingAlgorithm(keyPEM, want string) (string, error) {
	block, _ := pem.Decode([]byte(keyPEM))
	if block == nil {
		return "", fmt.Errorf("policy: bundle: signing key: not PEM")
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return "", fmt.Errorf("policy: bundle: signing key: a %s block; want PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY", block.Type)
	}
	if err != nil {
		return "", fmt.Errorf("policy: bundle: signing key: %w", err)
	}
	var pub any
	switch k := key.(type) {
	case *rsa.PrivateKey:
		pub = &k.PublicKey
	case *ecdsa.PrivateKey:
		pub = &k.PublicKey
	default:
		return "", fmt.Errorf("policy: bundle: signing key: a %T; want RSA or ECDSA", key)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	// The same check a verifier applies to the public half.
	s := BundleSigning{PublicKey: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), KeyID: "k", Algorithm: want}
	if err := s.check(); err != nil {
		return "", fmt.Errorf("%s", strings.Replace(err.Error(), "bundle.signing.", "bundle: signing ", 1))
	}
	return s.Algorithm, nil
}

// checkRevision is the rule a manifest revision follows.
func checkRevision(rev string) error {
	if len(rev) > MaxBundleRevisionLen {
		return fmt.Errorf("manifest revision is %d bytes, more than %d", len(rev), MaxBundleRevisionLen)
	}
	for _, r := range rev {
		if r <= ' ' || r == 0x7f || r > '~' {
			return fmt.Errorf("manifest revision %q has a character that is not printable ASCII", rev)
		}
	}
	return nil
}
