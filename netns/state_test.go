package netns

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/identity"
)

// TestStateOrigin: who made a namespace, from a state file of this version
// or one written before Origin existed.
func TestStateOrigin(t *testing.T) {
	tests := []struct {
		name, json string
		want       string // "" for an unusable state
	}{
		{"created", `{"id":"a","backend":"legacy","origin":"created"}`, originCreated},
		{"attached", `{"id":"a","backend":"legacy","origin":"attached","attached":true,"saved":true}`, originAttached},
		{"old created", `{"id":"a","backend":"legacy"}`, originCreated},
		{"old attached", `{"id":"a","backend":"legacy","attached":true,"source":"/proc/1/ns/net","saved":true}`, originAttached},
		{"old attach before save", `{"id":"a","backend":"legacy","attached":true}`, originAttached},
		{"origin attached without attached", `{"id":"a","backend":"legacy","origin":"attached"}`, ""},
		{"origin created but attached", `{"id":"a","backend":"legacy","origin":"created","attached":true}`, ""},
		{"unknown origin", `{"id":"a","backend":"legacy","origin":"pool"}`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var st state
			if err := json.Unmarshal([]byte(tc.json), &st); err != nil {
				t.Fatal(err)
			}
			got, err := st.origin()
			if tc.want == "" {
				if err == nil {
					t.Fatalf("got %q, want an error", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v, want %q", got, err, tc.want)
			}
		})
	}
}

// TestNewStateKeepsPolicyIdentity: the state of a sandbox keeps its mode and
// allow list, and gives them back when it is re-attached.
func TestNewStateKeepsPolicyIdentity(t *testing.T) {
	m := &Manager{backend: IPTablesLegacy}
	allow, err := identity.NewAllowList([]string{"b.example:22", "a.example"})
	if err != nil {
		t.Fatal(err)
	}
	pod := &identity.Pod{Namespace: "ci", Name: "agent-0", UID: "u-1", ServiceAccount: "runner"}
	sb := identity.Sandbox{ID: "x", Labels: map[string]string{"k": "v"}, Mode: identity.ModeReport, Allow: allow, Pod: pod}
	for _, origin := range []string{originCreated, originAttached} {
		st := m.newState(sb, origin)
		b, _ := json.Marshal(st)
		var back state
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if o, err := back.origin(); err != nil || o != origin {
			t.Fatalf("origin: got %q, %v, want %q", o, err, origin)
		}
		got, err := back.sandbox()
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != "x" || got.Labels["k"] != "v" || got.Mode != identity.ModeReport || strings.Join(got.Allow.Entries(), ",") != "a.example,b.example:22" {
			t.Fatalf("got %+v (allow %v), want the sandbox back", got, got.Allow.Entries())
		}
		if got.Pod == nil || *got.Pod != *pod || got.Pod == pod {
			t.Fatalf("got pod %+v, want a copy of %+v", got.Pod, pod)
		}
	}
	bad := state{ID: "x", Allow: []string{"a.example:0"}}
	if _, err := bad.sandbox(); err == nil {
		t.Fatal("got a sandbox from a state with a bad allow entry, want an error")
	}
}

// TestStateInbound: an attached namespace's inbound survives in its state
// file; a file from before the field is capture; one with a bad inbound is
// refused (Recover then leaves the namespace closed instead of guessing).
func TestStateInbound(t *testing.T) {
	m := &Manager{backend: IPTablesLegacy, cfg: Config{StateDir: t.TempDir()}}
	write := func(id, inbound string) {
		t.Helper()
		body := `{"id":"` + id + `","backend":"legacy","origin":"attached","attached":true` + inbound + `}`
		if err := os.WriteFile(m.statePath(id), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("old", "")
	write("acc", `,"inbound":{"mode":"accept","ports":[8443,8080]}`)
	write("bad", `,"inbound":{"mode":"accept","ports":[0]}`)
	for id, want := range map[string]string{"old": "capture", "acc": "accept TCP 8080,8443"} {
		st, err := m.readState(id)
		if err != nil {
			t.Fatalf("readState(%s): %v", id, err)
		}
		if got := st.inbound().String(); got != want {
			t.Errorf("state %s: inbound %q, want %q", id, got, want)
		}
	}
	if _, err := m.readState("bad"); err == nil || !strings.Contains(err.Error(), "inbound.ports[0]") {
		t.Errorf("readState of a bad inbound: %v, want an error naming inbound.ports[0]", err)
	}
}
