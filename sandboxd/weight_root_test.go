package sandboxd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRootBackgroundWeight: a sandbox prepared in the background (a warm
// pool's) waits with the lowest CPU weight in the kernel's cgroup, and
// Start gives it the default before its first command; a sandbox prepared
// for a create at once keeps the default throughout.
func TestRootBackgroundWeight(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	if !e.cgm.have["cpu"] {
		t.Skip("no cpu controller")
	}
	weight := func(s *Sandbox) string {
		t.Helper()
		dir, file := s.slot.cg.dirs[""], "cpu.weight"
		if !s.slot.cg.v2 {
			dir, file = s.slot.cg.dirs["cpu"], "cpu.shares"
		}
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	low, def := "1", "100"
	if !e.cgm.v2 {
		low, def = "2", "1024"
	}
	for _, tc := range []struct {
		name       string
		background bool
		prepared   string
	}{{"pooled", true, low}, {"at once", false, def}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, err := e.Prepare(ctx, PrepareSpec{Background: tc.background})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = s.Destroy(context.Background()) })
			if got := weight(s); got != tc.prepared {
				t.Errorf("prepared: got weight %s, want %s", got, tc.prepared)
			}
			if err := s.Start(ctx, StartSpec{}); err != nil {
				t.Fatal(err)
			}
			if got := weight(s); got != def {
				t.Errorf("started: got weight %s, want the default %s", got, def)
			}
		})
	}
}
