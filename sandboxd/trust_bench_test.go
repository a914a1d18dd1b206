package sandboxd

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkWriteTrustDir: the system bundle plus one interception CA (what
// `airlock run` writes per process), step by step.
func BenchmarkWriteTrustDir(b *testing.B) {
	sys, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		b.Skipf("no system bundle: %v", err)
	}
	bundle := append(sys, bundleOf(selfSigned(b, rawName(b, []rawATV{{oidCN, 12, []byte("Airlock bench CA")}})))...)
	dir := filepath.Join(b.TempDir(), "trust")
	b.Run("whole", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := WriteTrustDir(dir, bundle); err != nil {
				b.Fatal(err)
			}
		}
	})
	certs, _ := parseBundle(bundle)
	b.Run("parse", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			parseBundle(bundle)
		}
	})
	b.Run("hashed", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			writeHashedDir(filepath.Join(dir, TrustCertsDir), certs, "")
		}
	})
	b.Run("java", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			writeJavaStore(filepath.Join(dir, TrustJavaStore), certs)
		}
	})
}

// BenchmarkOpenTrustDir: a start whose bundle an earlier one built (the
// cache entry is read and checked) against WriteTrustDir in the same run.
func BenchmarkOpenTrustDir(b *testing.B) {
	sys, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		b.Skipf("no system bundle: %v", err)
	}
	bundle := append(sys, bundleOf(selfSigned(b, rawName(b, []rawATV{{oidCN, 12, []byte("Airlock bench CA")}})))...)
	cache := filepath.Join(b.TempDir(), "trust-cache")
	if _, _, release, err := OpenTrustDir(cache, bundle); err != nil {
		b.Fatal(err)
	} else {
		release()
	}
	b.Run("cached", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_, _, release, err := OpenTrustDir(cache, bundle)
			if err != nil {
				b.Fatal(err)
			}
			release()
		}
	})
	b.Run("new-ca", func(b *testing.B) {
		// An ephemeral CA: a new bundle every start, built beside the
		// previous one (its hashed files linked), which is then evicted.
		cas := make([][]byte, b.N)
		for i := range cas {
			cas[i] = append(sys[:len(sys):len(sys)], bundleOf(selfSigned(b, rawName(b, []rawATV{{oidCN, 12, []byte("Airlock bench CA")}})))...)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			_, _, release, err := OpenTrustDir(cache, cas[i])
			if err != nil {
				b.Fatal(err)
			}
			release()
		}
	})
	b.Run("overlay", func(b *testing.B) {
		// An ephemeral CA over the system roots' entry (OverlayTrustDir):
		// the base read and checked, the overlay written and removed (a
		// run's directory goes with it).
		cas := make([][]byte, b.N)
		for i := range cas {
			cas[i] = bundleOf(selfSigned(b, rawName(b, []rawATV{{oidCN, 12, []byte("Airlock bench CA")}})))
		}
		runs := b.TempDir()
		if _, _, release, err := OpenTrustDir(cache, sys); err != nil {
			b.Fatal(err)
		} else {
			release()
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			base, _, release, err := OpenTrustDir(cache, sys)
			if err != nil {
				b.Fatal(err)
			}
			dir := filepath.Join(runs, "trust")
			if _, err := OverlayTrustDir(dir, base, sys, cas[i]); err != nil {
				b.Fatal(err)
			}
			release()
			if err := os.RemoveAll(dir); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("write", func(b *testing.B) {
		dir := filepath.Join(b.TempDir(), "trust")
		for i := 0; i < b.N; i++ {
			if _, err := WriteTrustDir(dir, bundle); err != nil {
				b.Fatal(err)
			}
		}
	})
}
