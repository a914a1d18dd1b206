package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/api"
)

// TestSandboxUpdate: `sandbox update` turns its flags into one PATCH
// (--clear-allow then --allow is a replace) and prints the sandbox; a call
// that changes nothing or a label both set and removed is a usage error.
func TestSandboxUpdate(t *testing.T) {
	srv, run := fakeCLI(t)
	id := mustCreate(t, run, "--label", "agent=coder", "--label", "stage=dev", "--allow", "a.example.com")

	out, errs, code := run("", "sandbox", "update", id, "--allow", "b.example.com", "--remove-allow", "a.example.com", "--label", "stage=review", "--remove-label", "agent")
	if code != 0 || !strings.Contains(out, "b.example.com") || !strings.Contains(out, "stage=review") || strings.Contains(out, "agent=coder") {
		t.Errorf("update: exit %d %s\n%s", code, errs, out)
	}
	out, _, code = run("", "sandbox", "update", "--json", id, "--clear-allow", "--allow", "c.example.com")
	var sb api.Sandbox
	if err := json.Unmarshal([]byte(out), &sb); code != 0 || err != nil || !slices.Equal(sb.Allow, []string{"c.example.com"}) {
		t.Errorf("update --clear-allow --allow: exit %d, allow %q, %v", code, sb.Allow, err)
	}
	ups := srv.Updates()
	if len(ups) != 2 || ups[1].Allow == nil || len(*ups[1].Allow) != 0 || !slices.Equal(ups[1].AllowAdd, []string{"c.example.com"}) {
		t.Errorf("requests: got %+v, want the second to empty the list and add c.example.com", ups)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"nothing", []string{id}, "nothing to change"},
		{"set and removed", []string{id, "--label", "a=b", "--remove-label", "a"}, "both set and removed"},
		{"bad remove-label", []string{id, "--remove-label", "a=b"}, "KEY alone"},
		{"absent entry", []string{id, "--remove-allow", "zzz.example.com"}, "not in the allow list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errs, code := run("", append([]string{"sandbox", "update"}, tc.args...)...)
			if code != exitUsage || !strings.Contains(errs, tc.want) {
				t.Errorf("got exit %d %q, want %d with %q", code, errs, exitUsage, tc.want)
			}
		})
	}
	if n := len(srv.Updates()); n != 2 {
		t.Errorf("PATCHes after refusals: got %d, want 2", n)
	}
}
