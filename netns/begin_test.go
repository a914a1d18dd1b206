package netns

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/identity"
	"github.com/airlock-dev/airlock/netns/netnstest"
)

// TestBeginJoinableBeforeServed: Begin returns with the namespace at its
// path while the rules step is held; until Wait returns the sandbox is
// neither served nor listed, and what joins the namespace meanwhile has lo
// alone: no interface out of it. Once the step goes on, Wait returns
// the served sandbox, whose rules are in place.
func TestBeginJoinableBeforeServed(t *testing.T) {
	w := newWorld(t, Config{})
	hold, held := make(chan struct{}), make(chan struct{})
	w.m.hook = func(s string) error {
		if s == "rules" {
			close(held)
			<-hold
		}
		return nil
	}
	t.Cleanup(func() { w.m.hook = nil })
	id := netnstest.SandboxID("begin")
	p, err := w.m.Begin(context.Background(), identity.Sandbox{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		close(hold)
		t.Fatal("the setup never reached its rules step")
	}
	if _, err := os.Lstat(p.Path); err != nil {
		close(hold)
		t.Fatalf("namespace path before Wait: %v", err)
	}
	if _, ok := w.m.Get(id); ok || w.srv.served() != 0 {
		close(hold)
		t.Fatalf("served before its rules: Get %v, served %d", ok, w.srv.served())
	}
	links, err := nsExec(t, p.Path, 10*time.Second, "ip", "-o", "link")
	if err != nil || strings.Count(links, "\n") != 1 || !strings.Contains(links, ": lo:") {
		t.Errorf("links before the rules: err %v, %q, want lo alone", err, links)
	}
	close(hold)
	s, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := w.m.Get(id); !ok || got != s || s.Path != p.Path {
		t.Errorf("Get after Wait: got %v %v, want the waited sandbox at %s", got, ok, p.Path)
	}
	if w.srv.served() != 1 {
		t.Errorf("served: got %d, want 1", w.srv.served())
	}
	_, save := backendBinaries(w.m.Backend())
	rules, err := nsExec(t, p.Path, 10*time.Second, save)
	if err != nil || !strings.Contains(rules, "REDIRECT") {
		t.Errorf("rules after Wait: err %v, %q", err, rules)
	}
	if err := w.m.Teardown(context.Background(), id); err != nil {
		t.Fatal(err)
	}
}

// TestBeginFailureLeavesNothing: a setup that fails after Begin returned
// (island, sysctls, rules, listeners, serving) is Wait's error and leaves
// what a failed Create leaves: nothing, the id free again.
func TestBeginFailureLeavesNothing(t *testing.T) {
	w := newWorld(t, Config{})
	for _, step := range []string{"island", "sysctl", "rules", "listen", "serve"} {
		t.Run(step, func(t *testing.T) {
			fds := fdCount(t)
			id := netnstest.SandboxID("begin-fail")
			w.m.hook = func(s string) error {
				if s == step {
					return errInjected
				}
				return nil
			}
			defer func() { w.m.hook = nil }()
			p, err := w.m.Begin(context.Background(), identity.Sandbox{ID: id})
			if err != nil {
				t.Fatalf("Begin: %v (the step fails after it returns)", err)
			}
			if _, err := p.Wait(); err == nil {
				t.Fatalf("Wait with a failure at %s succeeded", step)
			}
			if _, err := os.Lstat(p.Path); !os.IsNotExist(err) {
				t.Errorf("namespace file left: %v", err)
			}
			if _, err := os.Stat(filepath.Join(w.cfg.StateDir, id+".json")); !os.IsNotExist(err) {
				t.Errorf("state file left: %v", err)
			}
			if n := w.srv.served(); n != 0 {
				t.Errorf("server still serves %d sandboxes", n)
			}
			if _, ok := w.m.Get(id); ok || len(w.m.IDs()) != 0 {
				t.Errorf("manager still lists %v", w.m.IDs())
			}
			if got := fdCount(t); got != fds {
				t.Errorf("fds: got %d, want %d", got, fds)
			}
			w.m.hook = nil
			s, err := w.m.Create(context.Background(), identity.Sandbox{ID: id})
			if err != nil {
				t.Fatalf("Create after the failure: %v", err)
			}
			if err := w.m.Teardown(context.Background(), s.ID); err != nil {
				t.Fatal(err)
			}
		})
	}
}
