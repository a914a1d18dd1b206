package netns

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"

	"github.com/airlock-dev/airlock/identity"
	"github.com/airlock-dev/airlock/netns/netnstest"
	"github.com/airlock-dev/airlock/test/fakenet"
)

// stripOrigin rewrites a state file the way a gateway built before the
// origin field wrote it.
func stripOrigin(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["origin"]; !ok {
		t.Fatalf("%s has no origin to strip: %s", path, b)
	}
	delete(m, "origin")
	delete(m, "mode")
	delete(m, "allow")
	b, _ = json.Marshal(m)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRecoverReattachesOnlyAttached is the regression test for recovery after
// a crash (listeners gone, namespaces and state files left): Recover with
// RecoverReattach re-attached every leftover namespace, including the ones
// the dead gateway had created for its own sandboxes, which it then served
// forever with nothing running in them. Now only a namespace attached from
// outside is re-attached (egress through the gateway again, same policy
// identity); a created one is removed; after the attached one is detached
// nothing is left. State files written before the origin field are read the
// same way.
func TestRecoverReattachesOnlyAttached(t *testing.T) {
	for _, old := range []bool{false, true} {
		name := "state files with origin"
		if old {
			name = "state files without origin"
		}
		t.Run(name, func(t *testing.T) {
			testRecoverReattachesOnlyAttached(t, old)
		})
	}
}

func testRecoverReattachesOnlyAttached(t *testing.T, oldState bool) {
	ctx := context.Background()
	w := newWorld(t, Config{})
	c := newContainer(t)
	_, save := backendBinaries(w.m.Backend())
	rulesBefore, _ := nsExec(t, c.path, 10*time.Second, save)

	created := w.create(t, "created")
	allow, err := identity.NewAllowList([]string{"extra.test"})
	if err != nil {
		t.Fatal(err)
	}
	aid := netnstest.SandboxID("attached")
	pod := &identity.Pod{Namespace: "ci", Name: "agent-0", UID: "u-1"}
	attached, err := w.m.Attach(ctx, identity.Sandbox{ID: aid, Labels: map[string]string{"kind": "vm"}, Mode: identity.ModeReport, Allow: allow, Pod: pod}, c.path, Inbound{Mode: InboundAccept, Ports: []int{8443, 8080}})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	fromContainer := func() (string, error) {
		var out string
		err := in(t, c.path, func() error {
			var err error
			out, err = fakenet.Get(w.web.IP.String()+":80", "web.test", "/ctr")
			return err
		})
		return out, err
	}
	if out, err := fromContainer(); err != nil || !strings.Contains(out, "hello from web.test /ctr") {
		t.Fatalf("attached before the crash: %v: %q", err, out)
	}

	// The crash: listeners gone, namespaces, rules and state files left.
	if err := w.m.Close(); err != nil {
		t.Fatal(err)
	}
	if oldState {
		stripOrigin(t, filepath.Join(w.cfg.StateDir, created.ID+".json"))
		stripOrigin(t, filepath.Join(w.cfg.StateDir, aid+".json"))
	}
	before := w.web.Requests() + w.web.Conns()
	if out, err := fromContainer(); err == nil || strings.Contains(out, "hello") {
		t.Fatalf("attached with the gateway dead got out: %v: %q", err, out)
	}
	if out, err := curl(t, created.Path, "--noproxy", "*", "http://web.test/"); err == nil || strings.Contains(out, "hello") {
		t.Fatalf("created with the gateway dead got out: %v: %q", err, out)
	}
	if got := w.web.Requests() + w.web.Conns() - before; got != 0 {
		t.Fatalf("web.test saw %d connections/requests with the gateway dead, want 0", got)
	}

	// A namespace attached before the link-layer guard existed (or whose
	// guard was removed) gets it again: CHECK below finds it.
	if gh, err := vnetns.GetFromPath(attached.Path); err != nil {
		t.Fatal(err)
	} else {
		err := removeL2Guard(gh)
		gh.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	m2 := w.newManager(t)
	res, err := m2.Recover(ctx, RecoverReattach)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if !slices.Equal(res.Reattached, []string{aid}) || !slices.Equal(res.Removed, []string{created.ID}) {
		t.Fatalf("Recover: got %+v, want %s re-attached and %s removed", res, aid, created.ID)
	}
	if _, err := os.Lstat(created.Path); !os.IsNotExist(err) {
		t.Errorf("created namespace %s left: %v", created.Path, err)
	}
	if _, err := os.Stat(filepath.Join(w.cfg.StateDir, created.ID+".json")); !os.IsNotExist(err) {
		t.Errorf("created namespace's state file left: %v", err)
	}
	if _, ok := m2.Get(created.ID); ok {
		t.Errorf("the created sandbox is managed again")
	}
	got, ok := m2.Get(aid)
	if !ok || !got.Attached || got.Labels["kind"] != "vm" || got.Path != attached.Path {
		t.Fatalf("re-attached sandbox: %+v, want the attached one with its labels", got)
	}
	if !oldState && (got.info.Mode != identity.ModeReport || !slices.Equal(got.info.Allow.Entries(), []string{"extra.test"})) {
		t.Errorf("re-attached policy identity: mode %q allow %v, want report [extra.test]", got.info.Mode, got.info.Allow.Entries())
	}
	if !oldState && (got.Pod == nil || *got.Pod != *pod || got.info.Pod == nil || *got.info.Pod != *pod) {
		t.Errorf("re-attached pod: %+v (policy input %+v), want %+v", got.Pod, got.info.Pod, pod)
	}
	// The inbound mode is re-applied from the state file, and CHECK finds
	// exactly its rules.
	if want := (Inbound{Mode: InboundAccept, Ports: []int{8080, 8443}}); got.Inbound.String() != want.String() {
		t.Errorf("re-attached inbound: %v, want %v", got.Inbound, want)
	}
	if err := m2.CheckAttached(ctx, aid); err != nil {
		t.Errorf("CheckAttached after recovery: %v", err)
	}
	vm := c.vmTCP.Load()
	if out, err := fromContainer(); err != nil || !strings.Contains(out, "hello from web.test /ctr") {
		t.Fatalf("attached after recovery: %v: %q", err, out)
	}
	if err := in(t, c.path, func() error { _, err := dialRead("198.18.200.2:8080"); return err }); err == nil || c.vmTCP.Load() != vm {
		t.Errorf("direct connection from the re-attached container passed (%v, vm count %d)", err, c.vmTCP.Load()-vm)
	}

	// Detach: nothing of airlock's is left.
	if err := m2.Detach(ctx, aid); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(w.cfg.StateDir); len(ents) != 0 {
		t.Errorf("state files left: %v", ents)
	}
	for _, p := range []string{created.Path, attached.Path} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) || mounted(t, p) {
			t.Errorf("%s left: %v", p, err)
		}
	}
	if rulesAfter, _ := nsExec(t, c.path, 10*time.Second, save); stripComments(rulesAfter) != stripComments(rulesBefore) {
		t.Errorf("container rules after detach:\n%s\nwant\n%s", rulesAfter, rulesBefore)
	}
	if n := w.srv.served(); n != 0 {
		t.Errorf("server still serves %d sandboxes", n)
	}
}
