package audit

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// checkpointDomain prefixes every signed checkpoint message.
const checkpointDomain = "airlock-audit-v1\n"

// CheckpointMessage is the exact byte string a checkpoint signs:
// "airlock-audit-v1\n<seq>\n<head>".
func CheckpointMessage(seq uint64, head string) []byte {
	b := make([]byte, 0, len(checkpointDomain)+20+1+len(head))
	b = append(b, checkpointDomain...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, '\n')
	return append(b, head...)
}

// KeyID is the hex of the first 16 bytes of SHA-256 over the public key.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:16])
}

// LoadOrCreateSigningKey reads the Ed25519 key at path, or creates one (mode
// 0600, PKCS#8 PEM) with its public key at path+".pub" (PKIX PEM) when path does
// not exist. An existing key readable by group or others is refused.
func LoadOrCreateSigningKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return createSigningKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("audit: signing key: %w", err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("audit: signing key: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("audit: signing key %s has mode %#o: want 0600 (no group or other access)", path, st.Mode().Perm())
	}
	k, err := ParseSigningKey(b)
	if err != nil {
		return nil, fmt.Errorf("audit: signing key %s: %w", path, err)
	}
	return k, nil
}

func createSigningKey(path string) (ed25519.PrivateKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("audit: generate signing key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("audit: encode signing key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit: create signing key: %w", err)
	}
	if err := pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der}); err != nil {
		f.Close()
		return nil, fmt.Errorf("audit: write signing key %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("audit: sync signing key %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("audit: write signing key %s: %w", path, err)
	}
	if err := os.WriteFile(path+".pub", MarshalPublicKey(pub), 0o644); err != nil {
		return nil, fmt.Errorf("audit: write public key: %w", err)
	}
	return priv, nil
}

// ParseSigningKey accepts a PKCS#8 "PRIVATE KEY" PEM, a PEM block whose bytes are
// the 32-byte seed, or the raw 32-byte seed.
func ParseSigningKey(b []byte) (ed25519.PrivateKey, error) {
	if blk, _ := pem.Decode(b); blk != nil {
		if len(blk.Bytes) == ed25519.SeedSize {
			return ed25519.NewKeyFromSeed(blk.Bytes), nil
		}
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("pem block %q: %w", blk.Type, err)
		}
		ek, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("pem block %q holds a %T, want an Ed25519 key", blk.Type, k)
		}
		return ek, nil
	}
	if len(b) == ed25519.SeedSize {
		return ed25519.NewKeyFromSeed(b), nil
	}
	return nil, fmt.Errorf("not an Ed25519 key: want PKCS#8 PEM, a PEM seed or a raw %d-byte seed, got %d bytes", ed25519.SeedSize, len(b))
}

// MarshalPublicKey encodes pub as a PKIX "PUBLIC KEY" PEM block.
func MarshalPublicKey(pub ed25519.PublicKey) []byte {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		// MarshalPKIXPublicKey cannot fail for a well-formed Ed25519 key.
		panic(fmt.Sprintf("audit: marshal public key: %v", err))
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// ParsePublicKey accepts a PKIX "PUBLIC KEY" PEM, a private key in any form
// ParseSigningKey accepts (its public half is used), the raw 32-byte key, or
// the key as 64 hex digits or base64 text.
func ParsePublicKey(b []byte) (ed25519.PublicKey, error) {
	if blk, _ := pem.Decode(b); blk != nil {
		if blk.Type == "PUBLIC KEY" {
			k, err := x509.ParsePKIXPublicKey(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("audit: public key: %w", err)
			}
			ek, ok := k.(ed25519.PublicKey)
			if !ok {
				return nil, fmt.Errorf("audit: public key is a %T, want Ed25519", k)
			}
			return ek, nil
		}
		priv, err := ParseSigningKey(b)
		if err != nil {
			return nil, fmt.Errorf("audit: public key: %w", err)
		}
		return priv.Public().(ed25519.PublicKey), nil
	}
	if len(b) == ed25519.PublicKeySize {
		return ed25519.PublicKey(b), nil
	}
	t := strings.TrimSpace(string(b))
	if k, err := hex.DecodeString(t); err == nil && len(k) == ed25519.PublicKeySize {
		return ed25519.PublicKey(k), nil
	}
	if k, err := base64.StdEncoding.DecodeString(t); err == nil && len(k) == ed25519.PublicKeySize {
		return ed25519.PublicKey(k), nil
	}
	return nil, errors.New("audit: public key: want a PKIX PEM, 32 raw bytes, 64 hex digits or base64 of 32 bytes")
}
