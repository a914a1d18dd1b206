package daemon

import (
	"errors"
	"os"
	"testing"
)

// TestIslandSlot: a pooled rootless island's files are held from init's
// hand-over to the create that adopts them, once; a slot not built, taken
// or discarded fails its check, and discarding closes what it held.
func TestIslandSlot(t *testing.T) {
	d := &Daemon{caBundle: "/b", trustDir: "/t"}
	slot := &islandSlot{spec: []byte(`{"island_addr":"x"}`)}
	spec := d.poolSpec(slot)
	if string(spec.Island) != string(slot.spec) || spec.OnIsland == nil || spec.NetNS != "" || spec.CABundle != "/b" {
		t.Fatalf("got spec %+v, want the slot's island, OnIsland, no netns path", spec)
	}
	if err := slot.Check(); !errors.Is(err, errIslandNotBuilt) {
		t.Fatalf("before init: got %v, want errIslandNotBuilt", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := spec.OnIsland([]*os.File{w}); err != nil {
		t.Fatal(err)
	}
	if err := slot.Check(); err != nil {
		t.Fatalf("built: got %v, want ok", err)
	}
	r2, w2, _ := os.Pipe()
	defer r2.Close()
	if err := spec.OnIsland([]*os.File{w2}); err == nil {
		t.Fatal("a second hand-over was taken")
	}
	if _, err := w2.Write([]byte("x")); err == nil {
		t.Fatal("the refused second hand-over's file is still open")
	}
	if err := slot.Discard(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("x")); err == nil {
		t.Fatal("Discard left the island's file open")
	}
	if err := slot.Check(); !errors.Is(err, errIslandNotBuilt) {
		t.Fatalf("discarded: got %v, want errIslandNotBuilt", err)
	}
	if got := d.poolSpec(&fakePooledNet{path: "/run/netns/p"}).NetNS; got != "/run/netns/p" {
		t.Fatalf("a root pooled namespace: got netns %q, want its path", got)
	}
}
