package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckWorkspace: a workspace that is /, root's home, or is, holds or
// lies inside a hidden path (also one named through a symlink) is refused
// with the file it would show; one that only holds a hidden path further
// down is bound (the path is masked there). Regression: such a workspace
// reached sandboxd, whose "inside hidden path" error came back as a 500.
func TestCheckWorkspace(t *testing.T) {
	root := t.TempDir()
	logDir := filepath.Join(root, "proj", "logs")
	policyDir := filepath.Join(root, "policies")
	for _, d := range []string{logDir, policyDir, filepath.Join(root, "other")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(root, "policies-link")
	if err := os.Symlink(policyDir, link); err != nil {
		t.Fatal(err)
	}
	auditFile := filepath.Join(logDir, "audit.jsonl")
	hidden := []hiddenPath{
		{path: auditFile, what: "the audit log", field: "audit.file"},
		{path: logDir, what: "the audit log", file: auditFile, field: "audit.file"},
		{path: link, what: "the policy directory", field: "policy.dir"},
	}
	tests := []struct {
		name, dir string
		want      string // "" for allowed
		field     string
	}{
		{"root", "/", "is the host's root directory", ""},
		{"home of root", rootHome(), "is the home directory of root", ""},
		{"holds the audit log", logDir, "holds the audit log " + auditFile, "audit.file"},
		{"inside the audit log's directory", filepath.Join(logDir, "sub"), "lies inside " + logDir + ", the directory of the audit log " + auditFile, "audit.file"},
		{"the policy directory through its link", policyDir, "is the policy directory", "policy.dir"},
		{"above the audit log: masked, not refused", filepath.Join(root, "proj"), "", ""},
		{"unrelated", filepath.Join(root, "other"), "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			we := checkWorkspace(tt.dir, tt.dir, hidden)
			switch {
			case tt.want == "" && we != nil:
				t.Fatalf("got %v, want it allowed", we)
			case tt.want == "":
				return
			case we == nil:
				t.Fatalf("got nil, want %q", tt.want)
			}
			if !strings.Contains(we.Error(), tt.want) || !strings.HasPrefix(we.Error(), "the workspace "+tt.dir+" ") || we.Field != tt.field {
				t.Errorf("got %q (field %q), want %q (field %q)", we.Error(), we.Field, tt.want, tt.field)
			}
		})
	}
}
