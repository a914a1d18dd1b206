package sandboxd

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	pkcs12 "software.sslmate.com/src/go-pkcs12"
)

// TestOverlayTrustDir: the overlay of a cached base and a run's CA holds
// exactly what WriteTrustDir writes for the two bundles concatenated (the
// same hashed names and bytes, the same Java store), including a CA whose
// subject hashes like a base root (numbered after it) and one already in the
// base (not written twice); the base entry is left as it was.
func TestOverlayTrustDir(t *testing.T) {
	nameA := rawName(t, []rawATV{{oidCN, 12, []byte("Airlock overlay A")}})
	nameB := rawName(t, []rawATV{{oidCN, 12, []byte("Airlock overlay B")}})
	a, b := selfSigned(t, nameA), selfSigned(t, nameB)
	base := bundleOf(a, b)
	tests := []struct {
		name  string
		extra []byte
		want  int
	}{
		{"new subject", bundleOf(selfSigned(t, rawName(t, []rawATV{{oidCN, 12, []byte("Airlock run CA")}}))), 3},
		{"same subject as a base root", bundleOf(selfSigned(t, nameA)), 3},
		{"already in the base", bundleOf(b), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmp := t.TempDir()
			cached, _, release, err := OpenTrustDir(filepath.Join(tmp, "cache"), base)
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			got := filepath.Join(tmp, "run", "trust")
			if err := os.Mkdir(filepath.Dir(got), 0o755); err != nil {
				t.Fatal(err)
			}
			n, err := OverlayTrustDir(got, cached, base, tt.extra)
			if err != nil {
				t.Fatalf("OverlayTrustDir: %v", err)
			}
			want := filepath.Join(tmp, "want")
			wn, err := WriteTrustDir(want, append(append(append([]byte(nil), base...), '\n'), tt.extra...))
			if err != nil {
				t.Fatal(err)
			}
			if n != tt.want || wn != tt.want {
				t.Errorf("certificates: got %d, WriteTrustDir %d, want %d", n, wn, tt.want)
			}
			if g, w := readTree(t, filepath.Join(got, TrustCertsDir)), readTree(t, filepath.Join(want, TrustCertsDir)); !sameTree(g, w) {
				t.Errorf("hashed dir: got %v, want %v", keys(g), keys(w))
			}
			if g, w := storeCerts(t, filepath.Join(got, TrustJavaStore)), storeCerts(t, filepath.Join(want, TrustJavaStore)); !bytes.Equal(bytes.Join(g, nil), bytes.Join(w, nil)) {
				t.Errorf("java store: got %d certificates, want the %d WriteTrustDir wrote, in order", len(g), len(w))
			}
			if _, err := verifyTrustDir(cached); err != nil {
				t.Errorf("the base entry changed: %v", err)
			}
			fi, err := os.Stat(got)
			if err != nil || fi.Mode().Perm() != 0o755 {
				t.Errorf("mode of the overlay: got %v (%v), want 0755", fi.Mode().Perm(), err)
			}
		})
	}
}

func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][]byte{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = b
	}
	return m
}

func sameTree(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func storeCerts(t *testing.T, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := pkcs12.DecodeTrustStore(data, TrustStorePassword)
	if err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	var out [][]byte
	for _, c := range certs {
		out = append(out, c.Raw)
	}
	return out
}
