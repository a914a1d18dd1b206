package daemon

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/sandboxd"
)

// TestRunDirLock: a run directory's lock is exclusive (a second taker gets
// a RunDirInUseError naming the holder's pid, and the directory is
// untouched), and free again once the holder closes it; a holder whose
// directory was removed from outside sees it no longer holds it.
func TestRunDirLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	f, err := lockRunDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = lockRunDir(dir)
	var inUse *RunDirInUseError
	if !errors.As(err, &inUse) || inUse.PID != os.Getpid() || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second lock: got %v, want a RunDirInUseError naming %s and pid %d", err, dir, os.Getpid())
	}
	if _, held, _ := tryLockRunDir(dir); !held {
		t.Errorf("tryLockRunDir: got not held, want held")
	}
	if _, err := os.Stat(filepath.Join(dir, "state")); err != nil {
		t.Errorf("the refused taker touched the directory: %v", err)
	}
	if !holdsLock(dir, f) {
		t.Errorf("holdsLock: got false for the holder")
	}
	if err := os.Rename(dir, dir+".moved"); err != nil {
		t.Fatal(err)
	}
	if holdsLock(dir, f) {
		t.Errorf("holdsLock: got true after the directory was moved away")
	}
	f.Close()
	g, err := lockRunDir(dir)
	if err != nil {
		t.Fatalf("lock after the holder let go: %v", err)
	}
	g.Close()
}

// TestRootSecondDaemonKeepsRunDir pins a second `airlock serve` on the same
// run directory that failed to start ("audit file in use") and, undoing its
// start, removed the running daemon's run directory: its CA, bundle and
// namespace state; every create and attach after was internal while health
// said ok. Now the second fails at once naming the first's pid, the
// directory is as it was, a create and an exec still work, and health is ok.
func TestRootSecondDaemonKeepsRunDir(t *testing.T) {
	a := newAPIRoot(t)
	before := dirListing(t, a.d.runDir)
	if !slices.Contains(before, "ca-bundle.pem") || !slices.Contains(before, "netns") {
		t.Fatalf("run dir holds %v, want the bundle and the namespace state", before)
	}
	second, err := New(context.Background(), Options{Config: a.cfg, EphemeralCA: true, RunDir: a.d.runDir, Pool: true,
		Executor: &sandboxd.Config{InitArgs: []string{}}})
	if err == nil {
		second.Close()
		t.Fatal("a second daemon started on the same run dir")
	}
	var inUse *RunDirInUseError
	if !errors.As(err, &inUse) || inUse.PID != os.Getpid() {
		t.Errorf("second daemon: got %v, want a RunDirInUseError naming pid %d", err, os.Getpid())
	}
	if after := dirListing(t, a.d.runDir); !slices.Equal(after, before) {
		t.Fatalf("run dir after the second daemon failed: got %d entries (%.200v), want the %d it had (%.200v)", len(after), after, len(before), before)
	}
	sb := a.create(t, api.CreateSandboxRequest{})
	if out := a.mustRun(t, sb.ID, "echo", "ok"); out != "ok\n" {
		t.Fatalf("exec after the second daemon failed: %q", out)
	}
	if h, err := a.c.Health(context.Background()); err != nil || !h.OK {
		t.Fatalf("health: got %+v, %v; want ok", h, err)
	}
}

// TestRootHealthReportsBrokenParts pins a health that said ok while the
// run directory was gone: the state directory moved away from outside, and
// the audit log refusing records, each make health 503 with ok false and
// that part failing; the directory put back makes it ok again.
func TestRootHealthReportsBrokenParts(t *testing.T) {
	a := newAPIRoot(t)
	ctx := context.Background()
	h, err := a.c.Health(ctx)
	if err != nil {
		t.Fatalf("health at start: %v", err)
	}
	if !h.OK {
		t.Errorf("health at start: got %+v, want ok", h)
	}
	for _, name := range []string{api.HealthPartStateDir, api.HealthPartAudit, api.HealthPartPolicy} {
		if p := part(h, name); p == nil || p.Status != api.HealthOK {
			t.Errorf("health at start: part %s is %+v, want ok", name, p)
		}
	}
	moved := a.d.runDir + ".moved"
	if err := os.Rename(a.d.runDir, moved); err != nil {
		t.Fatal(err)
	}
	h, err = a.c.Health(ctx)
	if client.Code(err) != api.CodeUnavailable || h == nil || h.OK {
		t.Errorf("health with the run dir gone: got %+v, %v; want ok false and %s", h, err, api.CodeUnavailable)
	} else if p := part(h, api.HealthPartStateDir); p == nil || p.Status != api.HealthFailing || !strings.Contains(p.Problem, a.d.runDir) {
		t.Errorf("health with the run dir gone: state_dir is %+v, want failing naming the directory", p)
	}
	if err := os.Rename(moved, a.d.runDir); err != nil {
		t.Fatal(err)
	}
	if h, err := a.c.Health(ctx); err != nil || !h.OK {
		t.Fatalf("health with the run dir back: got %+v, %v; want ok", h, err)
	}
	// The audit writer stops taking records (Close is what a writer whose
	// file failed looks like to its callers: every record refused).
	if err := a.d.writer.Close(); err != nil {
		t.Fatal(err)
	}
	h, err = a.c.Health(ctx)
	if client.Code(err) != api.CodeUnavailable || h == nil || h.OK {
		t.Fatalf("health with the audit log closed: got %+v, %v; want ok false", h, err)
	}
	if p := part(h, api.HealthPartAudit); p == nil || p.Status != api.HealthFailing || h.Audit == api.HealthOK {
		t.Errorf("health with the audit log closed: audit part %+v, audit %q; want failing", p, h.Audit)
	}
	if p := part(h, api.HealthPartStateDir); p == nil || p.Status != api.HealthOK {
		t.Errorf("health with the audit log closed: state_dir %+v, want ok (only the broken part fails)", p)
	}
}

func part(h *api.Health, name string) *api.HealthPart {
	for i := range h.Parts {
		if h.Parts[i].Name == name {
			return &h.Parts[i]
		}
	}
	return nil
}

// dirListing is every path under dir, relative, sorted.
func dirListing(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel, _ := filepath.Rel(dir, p); rel != "." {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}
