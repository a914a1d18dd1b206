package sandboxd

import (
	"encoding/asn1"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func trustBundle(t testing.TB, names ...string) []byte {
	var certs [][]byte
	for _, n := range names {
		certs = append(certs, selfSigned(t, rawName(t, []rawATV{{oidCN, asn1.TagUTF8String, []byte(n)}})))
	}
	return bundleOf(certs...)
}

func openTrust(t *testing.T, cache string, bundle []byte) (string, int, func()) {
	t.Helper()
	dir, n, release, err := OpenTrustDir(cache, bundle)
	if err != nil {
		t.Fatalf("OpenTrustDir: %v", err)
	}
	t.Cleanup(release)
	return dir, n, release
}

// certFiles reads the PEM certificates of a trust directory's hashed dir.
func certFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	ents, err := os.ReadDir(filepath.Join(dir, TrustCertsDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, TrustCertsDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

// TestOpenTrustDirReuse: a second open of the same bundle returns the entry
// the first built (not rewritten), with WriteTrustDir's layout and count; a
// different bundle gets its own entry.
func TestOpenTrustDirReuse(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "trust-cache")
	bundle := trustBundle(t, "Airlock Cache A", "Airlock Cache B")
	dir, n, _ := openTrust(t, cache, bundle)
	if n != 2 {
		t.Errorf("got %d certificates, want 2", n)
	}
	before, err := os.Stat(filepath.Join(dir, TrustManifest))
	if err != nil {
		t.Fatal(err)
	}
	dir2, n2, _ := openTrust(t, cache, bundle)
	after, err := os.Stat(filepath.Join(dir2, TrustManifest))
	if err != nil {
		t.Fatal(err)
	}
	if dir2 != dir || n2 != n || !os.SameFile(before, after) || !before.ModTime().Equal(after.ModTime()) {
		t.Errorf("second open: got %s (%d, manifest rewritten %v), want the first entry %s (%d)", dir2, n2, !os.SameFile(before, after), dir, n)
	}
	plain := filepath.Join(t.TempDir(), "trust")
	if _, err := WriteTrustDir(plain, bundle); err != nil {
		t.Fatal(err)
	}
	got, want := certFiles(t, dir), certFiles(t, plain)
	if len(got) != len(want) {
		t.Fatalf("got %d hashed files, want %d", len(got), len(want))
	}
	for name, pem := range want {
		if got[name] != pem {
			t.Errorf("%s: cached file differs from WriteTrustDir's", name)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, TrustJavaStore)); err != nil {
		t.Errorf("java truststore: %v", err)
	}
	other, _, _ := openTrust(t, cache, trustBundle(t, "Airlock Cache C"))
	if other == dir {
		t.Errorf("a different bundle got the same entry %s", dir)
	}
}

// TestOpenTrustDirTampered: an entry changed after it was written is never
// handed out as it is: the next open rebuilds it, and what the attacker put
// there (a root of their own, a link elsewhere) is gone.
func TestOpenTrustDirTampered(t *testing.T) {
	evil := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: selfSigned(t, rawName(t, []rawATV{{oidCN, asn1.TagUTF8String, []byte("Evil Root")}}))}))
	tests := []struct {
		name   string
		tamper func(t *testing.T, dir string)
	}{
		{"cert replaced", func(t *testing.T, dir string) {
			for name := range certFiles(t, dir) {
				os.WriteFile(filepath.Join(dir, TrustCertsDir, name), []byte(evil), 0o644)
				return
			}
		}},
		{"cert added", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, TrustCertsDir, "deadbeef.0"), []byte(evil), 0o644)
		}},
		{"cert added and listed", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, TrustCertsDir, "deadbeef.0"), []byte(evil), 0o644)
			m, _ := os.ReadFile(filepath.Join(dir, TrustManifest))
			os.WriteFile(filepath.Join(dir, TrustManifest), append(m, []byte("00  certs/deadbeef.0\n")...), 0o644)
		}},
		{"cert removed", func(t *testing.T, dir string) {
			for name := range certFiles(t, dir) {
				os.Remove(filepath.Join(dir, TrustCertsDir, name))
				return
			}
		}},
		{"cert made a symlink", func(t *testing.T, dir string) {
			evilFile := filepath.Join(t.TempDir(), "evil.pem")
			os.WriteFile(evilFile, []byte(evil), 0o644)
			for name := range certFiles(t, dir) {
				p := filepath.Join(dir, TrustCertsDir, name)
				os.Remove(p)
				os.Symlink(evilFile, p)
				return
			}
		}},
		{"file writable by others", func(t *testing.T, dir string) {
			os.Chmod(filepath.Join(dir, TrustJavaStore), 0o666)
		}},
		{"manifest truncated", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, TrustManifest), nil, 0o644)
		}},
		{"manifest removed", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, TrustManifest))
		}},
		{"entry replaced by a symlink", func(t *testing.T, dir string) {
			elsewhere := filepath.Join(t.TempDir(), "elsewhere")
			os.Rename(dir, elsewhere)
			os.WriteFile(filepath.Join(elsewhere, TrustCertsDir, "deadbeef.0"), []byte(evil), 0o644)
			os.Symlink(elsewhere, dir)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cache := filepath.Join(t.TempDir(), "trust-cache")
			bundle := trustBundle(t, "Airlock Tamper A", "Airlock Tamper B")
			dir, _, release, err := OpenTrustDir(cache, bundle)
			if err != nil {
				t.Fatal(err)
			}
			want := certFiles(t, dir)
			release()
			tt.tamper(t, dir)
			dir2, n, _ := openTrust(t, cache, bundle)
			if dir2 != dir || n != 2 {
				t.Fatalf("got %s with %d certificates, want %s with 2", dir2, n, dir)
			}
			fi, err := os.Lstat(dir2)
			if err != nil || !fi.IsDir() {
				t.Fatalf("entry is not a directory after the rebuild: %v %v", fi, err)
			}
			got := certFiles(t, dir2)
			for name, body := range got {
				if strings.Contains(body, evil) || want[name] != body {
					t.Errorf("%s: got a file the bundle does not hold", name)
				}
			}
			if len(got) != len(want) {
				t.Errorf("got %d hashed files, want %d", len(got), len(want))
			}
			if _, err := verifyTrustDir(dir2); err != nil {
				t.Errorf("rebuilt entry does not verify: %v", err)
			}
		})
	}
}

// TestOpenTrustDirEviction: an entry a process holds stays; once released,
// the next process that opens another bundle removes it.
func TestOpenTrustDirEviction(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "trust-cache")
	a, _, releaseA := openTrust(t, cache, trustBundle(t, "Airlock Evict A"))
	b, _, releaseB := openTrust(t, cache, trustBundle(t, "Airlock Evict B"))
	releaseB() // waits for B's eviction pass, which A's hold survived
	if _, err := os.Stat(a); err != nil {
		t.Fatalf("held entry A removed: %v", err)
	}
	releaseA()
	_, _, releaseC := openTrust(t, cache, trustBundle(t, "Airlock Evict C"))
	releaseC()
	for _, dir := range []string{a, b} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("released entry %s still there (%v)", filepath.Base(dir), err)
		}
	}
	ents, _ := os.ReadDir(cache)
	if len(ents) != 1 {
		t.Errorf("got %d entries in the cache, want 1 (C's)", len(ents))
	}
}

// TestOpenTrustDirConcurrent: processes starting at once with one bundle all
// get the same intact entry.
func TestOpenTrustDirConcurrent(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "trust-cache")
	bundle := trustBundle(t, "Airlock Race A", "Airlock Race B")
	var wg sync.WaitGroup
	dirs := make([]string, 8)
	errs := make([]error, 8)
	releases := make([]func(), 8)
	for i := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dirs[i], _, releases[i], errs[i] = OpenTrustDir(cache, bundle)
		}()
	}
	wg.Wait()
	for i := range dirs {
		if errs[i] != nil {
			t.Fatalf("open %d: %v", i, errs[i])
		}
		defer releases[i]()
		if dirs[i] != dirs[0] {
			t.Errorf("open %d: got %s, want %s", i, dirs[i], dirs[0])
		}
	}
	if _, err := verifyTrustDir(dirs[0]); err != nil {
		t.Errorf("entry does not verify: %v", err)
	}
}

// TestOpenTrustDirUnsafeCache: a cache directory others can write is refused
// with an error naming it, and nothing is built in it.
func TestOpenTrustDirUnsafeCache(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "trust-cache")
	if err := os.Mkdir(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(cache, 0o777); err != nil {
		t.Fatal(err)
	}
	_, _, _, err := OpenTrustDir(cache, trustBundle(t, "Airlock Unsafe"))
	if err == nil || !strings.Contains(err.Error(), cache) || !strings.Contains(err.Error(), "writable by group or others") {
		t.Fatalf("got %v, want a refusal naming %s", err, cache)
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Errorf("got %d entries built in an unsafe cache, want 0", len(ents))
	}
}

// TestOpenTrustDirBadBundle: a bundle WriteTrustDir refuses is refused here
// too, and leaves no entry.
func TestOpenTrustDirBadBundle(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "trust-cache")
	_, _, _, err := OpenTrustDir(cache, []byte("no certificates here\n"))
	if err == nil || !strings.Contains(err.Error(), "holds no certificate") {
		t.Fatalf("got %v, want the bundle refused", err)
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Errorf("got %d entries, want 0", len(ents))
	}
}

// TestOpenTrustDirLinksSibling: a new bundle that shares roots with the
// entry beside it (an ephemeral CA per start) links those roots' files
// instead of writing them, and never links a file whose bytes differ from
// the root it stands for.
func TestOpenTrustDirLinksSibling(t *testing.T) {
	roots := [][]byte{
		selfSigned(t, rawName(t, []rawATV{{oidCN, asn1.TagUTF8String, []byte("Airlock Shared Root 1")}})),
		selfSigned(t, rawName(t, []rawATV{{oidCN, asn1.TagUTF8String, []byte("Airlock Shared Root 2")}})),
	}
	newCA := func(name string) []byte {
		return bundleOf(append(roots[:2:2], selfSigned(t, rawName(t, []rawATV{{oidCN, asn1.TagUTF8String, []byte(name)}})))...)
	}
	for _, tamper := range []bool{false, true} {
		t.Run(map[bool]string{false: "intact", true: "sibling altered"}[tamper], func(t *testing.T) {
			cache := filepath.Join(t.TempDir(), "trust-cache")
			a, _, _ := openTrust(t, cache, newCA("Airlock Run CA 1")) // held: not evicted below
			want := certFiles(t, a)
			evil := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: selfSigned(t, rawName(t, []rawATV{{oidCN, asn1.TagUTF8String, []byte("Evil Root")}}))}))
			if tamper {
				for name := range want {
					if err := os.WriteFile(filepath.Join(a, TrustCertsDir, name), []byte(evil), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			b, n, _ := openTrust(t, cache, newCA("Airlock Run CA 2"))
			if n != 3 {
				t.Fatalf("got %d certificates, want 3", n)
			}
			got := certFiles(t, b)
			linked := 0
			for name, body := range got {
				fa, errA := os.Stat(filepath.Join(a, TrustCertsDir, name))
				fb, errB := os.Stat(filepath.Join(b, TrustCertsDir, name))
				if errA == nil && errB == nil && os.SameFile(fa, fb) {
					linked++
				}
				if strings.Contains(body, "Evil") || body == evil {
					t.Errorf("%s: the new entry holds the altered file", name)
				}
				if w, ok := want[name]; ok && body != w {
					t.Errorf("%s: got different bytes than the root's", name)
				}
			}
			if wantLinked := map[bool]int{false: 2, true: 0}[tamper]; linked != wantLinked {
				t.Errorf("got %d files linked from the sibling, want %d", linked, wantLinked)
			}
			if _, err := verifyTrustDir(b); err != nil {
				t.Errorf("new entry does not verify: %v", err)
			}
		})
	}
}
