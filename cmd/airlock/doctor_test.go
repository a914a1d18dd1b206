package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/hostcheck"
)

// TestDoctorJSON runs `airlock doctor --json` on this host: a report with
// every mode and check, whose exit status is 0 exactly when the asked mode
// works.
func TestDoctorJSON(t *testing.T) {
	for _, mode := range []string{"root", "cni"} {
		t.Run(mode, func(t *testing.T) {
			root := newRootCmd()
			var out, errb bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&errb)
			code := execute(root, []string{"doctor", "--json", "--mode", mode})
			var r hostcheck.Report
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				t.Fatalf("exit %d, output not JSON: %v\n%s%s", code, err, out.String(), errb.String())
			}
			if string(r.Mode) != mode || len(r.Works) != len(hostcheck.Modes) || len(r.Checks) < 10 {
				t.Fatalf("got mode %q, %d modes, %d checks, want %q, all modes, every check", r.Mode, len(r.Works), len(r.Checks), mode)
			}
			if want := map[bool]int{true: 0, false: 1}[r.OK]; code != want {
				t.Fatalf("exit %d with ok %v, want %d", code, r.OK, want)
			}
			for _, c := range r.Checks {
				if c.Name == "" || c.Detail == "" || c.Status == "" {
					t.Errorf("check without a name, status or detail: %+v", c)
				}
			}
		})
	}
}

func TestDoctorBadMode(t *testing.T) {
	root := newRootCmd()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	if code := execute(root, []string{"doctor", "--mode", "laptop"}); code != 2 {
		t.Fatalf("got exit %d, want 2", code)
	}
	if !strings.Contains(errb.String(), "rootless") {
		t.Fatalf("stderr %q: want the modes named", errb.String())
	}
}
