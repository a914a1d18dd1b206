package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// auditVerify runs `airlock audit verify FILE` and returns its exit code and output.
func auditVerify(t *testing.T, file string) (int, string) {
	t.Helper()
	return auditVerifyArgs(t, file)
}

// auditVerifyArgs runs `airlock audit verify ARGS...` and returns its exit
// code and output.
func auditVerifyArgs(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, w.bin, append([]string{"audit", "verify"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	}
	t.Fatalf("airlock audit verify: %v", err)
	return 0, ""
}

// TestRootAuditVerify: the log a run wrote verifies; changing one byte of one
// line makes verify fail naming that line.
func TestRootAuditVerify(t *testing.T) {
	e := newEnv(t, "")
	res := e.sh(nil, `
curl -sS --max-time 60 -o /dev/null https://pypi.org/simple/
curl -sS --max-time 60 -o /dev/null https://evil.example/ || true
getent hosts exfil.example || true
`)
	wantCode(t, res, 0)
	if code, out := auditVerify(t, e.audit); code != 0 {
		t.Fatalf("verify of an untouched log: got exit %d, want 0\n%s", code, out)
	}
	data, err := os.ReadFile(e.audit)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	// Turn the first deny into an allow, the edit an intruder would make.
	target := -1
	for i, l := range lines {
		if strings.Contains(l, `"decision":"deny"`) {
			target = i
			break
		}
	}
	if target < 0 {
		t.Fatalf("no deny record to tamper with\n%s", data)
	}
	lines[target] = strings.Replace(lines[target], `"decision":"deny"`, `"decision":"allow"`, 1)
	tampered := filepath.Join(e.dir, "tampered.jsonl")
	if err := os.WriteFile(tampered, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := auditVerify(t, tampered)
	if code != 1 {
		t.Fatalf("verify of a tampered log: got exit %d, want 1\n%s", code, out)
	}
	// The edited line's own hash is what the next line's prev no longer
	// matches, so verify names the line after it, or the line itself.
	edited, next := tampered+":"+strconv.Itoa(target+1)+":", tampered+":"+strconv.Itoa(target+2)+":"
	if !strings.Contains(out, edited) && !strings.Contains(out, next) {
		t.Errorf("verify output names neither %q nor %q:\n%s", edited, next, out)
	}
}
