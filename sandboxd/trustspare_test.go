package sandboxd

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestOverlayTrustDirSpare: an overlay's links go back to the cache when it
// is done (the run's CA not among them), and the next overlay of the same
// base takes them and holds exactly what WriteTrustDir writes; overlays at
// once each get a whole directory; a spare that was added to, or whose file
// was replaced by another with the same name, is never used (removed, the
// links made again); an eviction keeps the spare of the entry in use.
func TestOverlayTrustDirSpare(t *testing.T) {
	a := selfSigned(t, rawName(t, []rawATV{{oidCN, 12, []byte("Airlock spare A")}}))
	b := selfSigned(t, rawName(t, []rawATV{{oidCN, 12, []byte("Airlock spare B")}}))
	base := bundleOf(a, b)
	tmp := t.TempDir()
	cached, _, release, err := OpenTrustDir(filepath.Join(tmp, "cache"), base)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	spare := cached + trustSpareSuffix
	runs := 0
	// overlay lays a new CA over base in a run directory of its own and
	// checks the result against WriteTrustDir's.
	overlay := func(t *testing.T) (string, func()) {
		t.Helper()
		runs++
		ca := bundleOf(selfSigned(t, rawName(t, []rawATV{{oidCN, 12, []byte("Airlock run CA " + itoa(runs))}})))
		got := filepath.Join(tmp, "run-"+itoa(runs), "trust")
		if err := os.MkdirAll(filepath.Dir(got), 0o755); err != nil {
			t.Fatal(err)
		}
		if ov, err := OverlayTrustDir(got, cached, base, ca); err != nil {
			t.Fatalf("OverlayTrustDir: %v", err)
		} else {
			done := ov.Done
			want := filepath.Join(tmp, "want-"+itoa(runs))
			if _, err := WriteTrustDir(want, append(append(append([]byte(nil), base...), '\n'), ca...)); err != nil {
				t.Fatal(err)
			}
			if g, w := readTree(t, filepath.Join(got, TrustCertsDir)), readTree(t, filepath.Join(want, TrustCertsDir)); !sameTree(g, w) {
				t.Errorf("hashed dir: got %v, want %v", keys(g), keys(w))
			}
			return got, done
		}
		return "", nil
	}
	// spareIsBase checks the spare holds base's hashed files, each the
	// same file, and nothing else.
	spareIsBase := func(t *testing.T) {
		t.Helper()
		names, err := os.ReadDir(filepath.Join(cached, TrustCertsDir))
		if err != nil {
			t.Fatal(err)
		}
		ents, err := os.ReadDir(spare)
		if err != nil {
			t.Fatalf("no spare: %v", err)
		}
		if len(ents) != len(names) {
			t.Errorf("spare holds %d files, base %d", len(ents), len(names))
		}
		for _, n := range names {
			x, xerr := os.Lstat(filepath.Join(spare, n.Name()))
			y, yerr := os.Lstat(filepath.Join(cached, TrustCertsDir, n.Name()))
			if xerr != nil || yerr != nil || !os.SameFile(x, y) {
				t.Errorf("spare's %s is not base's (%v, %v)", n.Name(), xerr, yerr)
			}
		}
	}
	gone := func(t *testing.T, dir string) {
		t.Helper()
		if _, err := os.Lstat(filepath.Join(dir, TrustCertsDir)); !os.IsNotExist(err) {
			t.Errorf("%s still holds its hashed dir: %v", dir, err)
		}
	}

	got, done := overlay(t)
	done()
	gone(t, got)
	spareIsBase(t)

	t.Run("taken", func(t *testing.T) {
		got, done := overlay(t)
		if _, err := os.Lstat(spare); !os.IsNotExist(err) {
			t.Errorf("the spare was not taken: %v", err)
		}
		done()
		gone(t, got)
		spareIsBase(t)
	})
	t.Run("at once", func(t *testing.T) {
		var dones []func()
		var dirs []string
		for range 3 {
			got, done := overlay(t)
			dirs, dones = append(dirs, got), append(dones, done)
		}
		var wg sync.WaitGroup
		for _, done := range dones {
			wg.Add(1)
			go func() { defer wg.Done(); done() }()
		}
		wg.Wait()
		for _, d := range dirs {
			gone(t, d)
		}
		spareIsBase(t)
	})
	rogue := bundleOf(selfSigned(t, rawName(t, []rawATV{{oidCN, 12, []byte("Airlock rogue root")}})))
	for _, tt := range []struct {
		name   string
		tamper func(t *testing.T)
	}{
		{"a file added", func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(spare, "deadbeef.0"), rogue, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"a file replaced", func(t *testing.T) {
			ents, err := os.ReadDir(spare)
			if err != nil || len(ents) == 0 {
				t.Fatalf("spare: %v", err)
			}
			p := filepath.Join(spare, ents[0].Name())
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, rogue, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.tamper(t)
			// overlay checks the tree equals WriteTrustDir's: no rogue root.
			got, done := overlay(t)
			if _, err := os.Lstat(spare); !os.IsNotExist(err) {
				t.Errorf("the altered spare is still there: %v", err)
			}
			done()
			gone(t, got)
			spareIsBase(t)
		})
	}
	t.Run("eviction keeps it", func(t *testing.T) {
		_, _, again, err := OpenTrustDir(filepath.Join(tmp, "cache"), base)
		if err != nil {
			t.Fatal(err)
		}
		again()
		spareIsBase(t)
	})
}
