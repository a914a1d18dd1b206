package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/test/poll"
	"github.com/airlock-dev/airlock/test/roottest"
)

// TestReportModeRefusedForUnprivilegedCaller: a caller other than root cannot
// ask for mode report on a daemon that enforces. Report lets every denied
// request out (policy.Decision.Permit), so it would be open egress for any
// member of api.group: refused 403 naming "mode", with nothing built or served
// and nothing run. Root may; on a daemon that already reports, anyone may (it
// weakens nothing); enforce is always allowed.
func TestReportModeRefusedForUnprivilegedCaller(t *testing.T) {
	w := newFakeWorld(t)
	a, root := w.client(alice), w.client(0)
	for _, req := range []struct{ path, body string }{
		{"/v1/sandboxes", `{"mode": "report"}`},
		{"/v1/run", `{"argv": ["true"], "mode": "report"}`},
	} {
		r := a.json(t, "POST", req.path, req.body)
		if e := r.apiError(t); r.status != 403 || e.Code != api.CodeForbidden || e.Field != "mode" {
			t.Errorf("alice POST %s %s: got %d %+v, want 403 forbidden naming mode", req.path, req.body, r.status, e)
		}
	}
	if n := w.exe.prepared.Load(); n != 0 {
		t.Fatalf("%d sandboxes prepared for refused report-mode requests, want 0", n)
	}
	w.net.mu.Lock()
	served := len(w.net.policies)
	w.net.mu.Unlock()
	if served != 0 {
		t.Fatalf("%d namespaces served for refused report-mode requests, want 0", served)
	}
	if sb := a.create(t, `{"mode": "enforce"}`); sb.Mode != string(policy.ModeEnforce) {
		t.Fatalf("alice's enforce sandbox shows mode %q", sb.Mode)
	}
	sb := root.create(t, `{"mode": "report"}`)
	if got, _ := w.net.policy(sb.ID); got.Mode != policy.ModeReport {
		t.Fatalf("root's report sandbox served with mode %q, want report", got.Mode)
	}

	rw := newFakeWorld(t, func(c *config.Config) { c.Policy.Mode = string(policy.ModeReport) })
	if sb := rw.client(alice).create(t, `{"mode": "report"}`); sb.Mode != string(policy.ModeReport) {
		t.Fatalf("on a reporting daemon alice's report sandbox shows mode %q", sb.Mode)
	}
}

// TestEventStreamsBounded: each events stream holds a subscription whose
// buffer is eventBuffer records (about half a MiB, allocated at once) in the
// daemon that also runs the gateway, so a caller opening streams without end
// could exhaust the daemon's memory and take every caller's sandboxes down.
// Past maxEventStreams on one sandbox a stream is refused 429 before it
// subscribes; a closed stream gives its place back.
func TestEventStreamsBounded(t *testing.T) {
	w := newFakeWorld(t)
	c := w.client(alice)
	sb := c.create(t, `{}`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func() *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", c.base+"/v1/sandboxes/"+sb.ID+"/events", nil)
		resp, err := c.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	var streams []*http.Response
	defer func() {
		for _, r := range streams {
			r.Body.Close()
		}
	}()
	for i := range maxEventStreams {
		r := open()
		streams = append(streams, r)
		if r.StatusCode != 200 {
			t.Fatalf("stream %d: got %d, want 200", i, r.StatusCode)
		}
		if e := readSSE(bufio.NewScanner(r.Body)); e == nil || e.typ != eventSandbox {
			t.Fatalf("stream %d: first event %+v", i, e)
		}
	}
	for i := range 3 {
		r := open()
		if r.StatusCode != 429 {
			r.Body.Close()
			t.Fatalf("stream %d past the cap: got %d, want 429", maxEventStreams+i, r.StatusCode)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		var e api.Error
		_ = json.Unmarshal(b, &e)
		if e.Code != api.CodeLimit {
			t.Fatalf("stream %d past the cap: got %s, want code limit", maxEventStreams+i, b)
		}
	}
	streams[0].Body.Close()
	streams = streams[1:]
	poll.Until(t, 10*time.Second, "a closed stream's place given back", func() bool {
		r := open()
		if r.StatusCode == 200 {
			streams = append(streams, r)
			return true
		}
		r.Body.Close()
		return false
	})
}

// TestRootWorkspaceOwnerChecked: a caller other than root may bind only a
// directory it owns, judged on the directory the daemon opened (not on the
// path): /tmp (world-writable, root's), a directory of another user, and
// the caller's own symlink to either are refused 403 naming workspace, with
// nothing built; its own directory, through a symlink or not, is bound.
func TestRootWorkspaceOwnerChecked(t *testing.T) {
	roottest.Require(t)
	base := t.TempDir()
	mine := filepath.Join(base, "alice-ws")
	theirs := filepath.Join(base, "bob-ws")
	links := filepath.Join(base, "alice-links")
	for _, d := range []struct {
		path string
		uid  int
	}{{mine, alice}, {theirs, bob}, {links, alice}} {
		if err := os.Mkdir(d.path, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d.path, d.uid, d.uid); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range map[string]string{"to-tmp": "/tmp", "to-bob": theirs, "to-mine": mine} {
		if err := os.Symlink(target, filepath.Join(links, name)); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(filepath.Join(links, name), alice, alice); err != nil {
			t.Fatal(err)
		}
	}
	w := newFakeWorld(t)
	a := w.client(alice)
	for _, ws := range []string{"/tmp", theirs, "/", filepath.Join(links, "to-tmp"), filepath.Join(links, "to-bob")} {
		body, _ := json.Marshal(api.CreateSandboxRequest{Workspace: ws})
		r := a.json(t, "POST", "/v1/sandboxes", string(body))
		if e := r.apiError(t); r.status != 403 || e.Code != api.CodeForbidden || e.Field != "workspace" {
			t.Errorf("alice binds %s: got %d %+v, want 403 forbidden naming workspace", ws, r.status, e)
		}
	}
	if n := w.exe.prepared.Load(); n != 0 {
		t.Fatalf("%d sandboxes prepared for refused workspaces, want 0", n)
	}
	for _, ws := range []string{mine, filepath.Join(links, "to-mine")} {
		body, _ := json.Marshal(api.CreateSandboxRequest{Workspace: ws})
		if sb := a.create(t, string(body)); sb.Workspace != ws {
			t.Fatalf("alice's sandbox shows workspace %q, want %q", sb.Workspace, ws)
		}
	}
}

// TestTopLevelWildcardAllowRefusedForUnprivilegedCaller: a caller other than
// root could open nearly every host with a few per-sandbox allow entries such
// as "*.com:*"; a wildcard over a whole top-level domain is root's.
func TestTopLevelWildcardAllowRefusedForUnprivilegedCaller(t *testing.T) {
	w := newFakeWorld(t)
	a, root := w.client(alice), w.client(0)
	for _, entry := range []string{"*.com", "**.org", "*.com:*", "**.net:443", "*.io."} {
		body := `{"allow": ["pypi.org", "` + entry + `"]}`
		r := a.json(t, "POST", "/v1/sandboxes", body)
		if e := r.apiError(t); r.status != 403 || e.Code != api.CodeForbidden || e.Field != "allow[1]" {
			t.Errorf("alice %s: got %d %+v, want 403 forbidden naming allow[1]", body, r.status, e)
		}
	}
	if n := w.exe.prepared.Load(); n != 0 {
		t.Fatalf("%d sandboxes prepared for refused allow entries, want 0", n)
	}
	if sb := a.create(t, `{"allow": ["*.example.com", "**.api.example.org:*", "api.example.net:8443"]}`); len(sb.Allow) != 3 {
		t.Fatalf("alice's bounded wildcards: got allow %v", sb.Allow)
	}
	if sb := root.create(t, `{"allow": ["*.com"]}`); len(sb.Allow) != 1 {
		t.Fatalf("root's top-level wildcard: got allow %v", sb.Allow)
	}
}
