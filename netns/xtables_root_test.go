package netns

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"

	"github.com/airlock-dev/airlock/identity"
	"github.com/airlock-dev/airlock/netns/netnstest"
)

// createReplayed creates a sandbox whose island got its rules from the
// template (loadIslandTables), making the template island first when the
// manager has none yet. With another backend than legacy every island runs
// iptables-restore, and it is an island like any other.
func (w *world) createReplayed(t *testing.T, tag string) *Sandbox {
	t.Helper()
	if w.m.Backend() == IPTablesLegacy {
		w.makeTemplate(t, tag)
	}
	return w.create(t, tag)
}

// makeTemplate creates and tears down islands until the manager holds a
// template: the template is taken from its second island, not its first.
func (w *world) makeTemplate(t *testing.T, tag string) {
	t.Helper()
	for i := 0; w.m.island.Load() == nil; i++ {
		if i == 2 {
			t.Fatal("two islands left no template")
		}
		s := w.create(t, fmt.Sprintf("%s-t%d", tag, i))
		if i == 0 && w.m.island.Load() != nil {
			t.Fatal("the first island left a template: a manager that makes one island pays for it")
		}
		if err := w.m.Teardown(context.Background(), s.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// counters matches iptables-save's packet counters.
var counters = regexp.MustCompile(`\[\d+:\d+\]`)

// saved is iptables-legacy-save of the namespace at path, counters and
// comments left out.
func saved(t *testing.T, path string) string {
	t.Helper()
	out, err := nsExec(t, path, 10*time.Second, "iptables-legacy-save")
	if err != nil {
		t.Fatalf("iptables-legacy-save: %v: %s", err, out)
	}
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "#") {
			keep = append(keep, counters.ReplaceAllString(l, "[0:0]"))
		}
	}
	return strings.Join(keep, "\n")
}

// TestIslandTablesReplayed: an island loaded from the template holds exactly
// the ruleset iptables-restore installs (Verify's listing check passes,
// iptables-save prints the same as for the template island), and a rule
// changed in the kernel after the load is found by the read-back comparison.
func TestIslandTablesReplayed(t *testing.T) {
	w := newWorld(t, Config{})
	if w.m.Backend() != IPTablesLegacy {
		t.Skipf("backend %s", w.m.Backend())
	}
	w.create(t, "xt-first")
	tmpl := w.create(t, "xt-template")
	if w.m.island.Load() == nil {
		t.Fatal("the second island left no template")
	}
	s := w.createReplayed(t, "xt-replayed")
	if got, want := saved(t, s.Path), saved(t, tmpl.Path); got != want {
		t.Fatalf("replayed island's rules:\n%s\nwant the template island's:\n%s", got, want)
	}
	if !strings.Contains(saved(t, s.Path), "-A AIRLOCK-OUT -j DROP") {
		t.Fatalf("no final drop in\n%s", saved(t, s.Path))
	}
	h, err := vnetns.GetFromPath(s.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := (execRunner{timeout: 10 * time.Second}).Verify(context.Background(), h, IPTablesLegacy, w.m.ruleSpec(false, Inbound{})); err != nil {
		t.Fatalf("Verify of the replayed island: %v", err)
	}
	// Made on one thread (setupIslandHere): lo with the island address and
	// route, and every sysctl written.
	for _, set := range [][]sysctl{islandSysctls, islandConntrackSysctls} {
		got, err := readSysctls(h, set)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(set) {
			t.Fatalf("sysctls: got %v, want %v", got, set)
		}
		for i := range set {
			if got[i] != set[i] {
				t.Errorf("sysctl %s: got %s, want %s", set[i].Key, got[i].Value, set[i].Value)
			}
		}
	}
	if out, err := nsExec(t, s.Path, 10*time.Second, "ip", "-4", "route", "show"); err != nil || !strings.Contains(out, "default dev lo") || !strings.Contains(out, w.m.cfg.islandAddr().String()) {
		t.Fatalf("island route: %v: %q", err, out)
	}
	// The read-back comparison notices a change: the final drop deleted.
	if out, err := nsExec(t, s.Path, 10*time.Second, "iptables-legacy", "-w", "5", "-D", chainOut, "-j", "DROP"); err != nil {
		t.Fatalf("delete the drop: %v: %s", err, out)
	}
	got, err := readIslandTables(h)
	if err != nil {
		t.Fatal(err)
	}
	want := w.m.island.Load()
	if d := got.filter.differs(want.filter); d == "" {
		t.Fatal("filter with its final drop deleted compared equal to the template")
	}
	if d := got.nat.differs(want.nat); d != "" {
		t.Fatalf("nat, untouched, differs: %s", d)
	}
}

// TestIslandTemplateLoadFailureFailsClosed: a template the kernel refuses
// (an entry's size broken) fails that island closed, leaving nothing, and
// every later island runs iptables-restore, as without templates.
func TestIslandTemplateLoadFailureFailsClosed(t *testing.T) {
	w := newWorld(t, Config{})
	if w.m.Backend() != IPTablesLegacy {
		t.Skipf("backend %s", w.m.Backend())
	}
	w.makeTemplate(t, "xt-first")
	good := w.m.island.Load()
	bad := *good
	bad.filter.entries = append([]byte(nil), good.filter.entries...)
	bad.filter.entries[entryNextOffset] ^= 0x04 // the first entry's size
	w.m.island.Store(&bad)
	id := netnstest.SandboxID("xt-bad")
	if _, err := w.m.Create(context.Background(), identity.Sandbox{ID: id}); err == nil {
		t.Fatal("Create with a template the kernel refuses succeeded")
	}
	if _, err := os.Lstat(w.m.nsPath(id)); !os.IsNotExist(err) {
		t.Errorf("namespace left: %v", err)
	}
	if w.m.island.Load() != nil {
		t.Fatal("the refused template was kept")
	}
	s := w.create(t, "xt-after")
	if w.m.island.Load() != nil {
		t.Fatal("a new template after a refused one")
	}
	if !strings.Contains(saved(t, s.Path), "-A AIRLOCK-OUT -j DROP") {
		t.Fatalf("island after the refused template:\n%s", saved(t, s.Path))
	}
}
