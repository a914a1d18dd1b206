package sandboxd

import (
	"strconv"
	"strings"
	"testing"
)

func TestRunEcho(t *testing.T) {
	e, au := newTestExecutor(t, nil)
	res := mustRun(t, e, Spec{Argv: sh("echo hello; id -u; echo err >&2; exit 3")})
	if res.ExitCode != 3 {
		t.Errorf("exit code: got %d, want 3 (stderr %q)", res.ExitCode, res.Stderr)
	}
	want := "hello\n" + itoa(res.UID) + "\n"
	if string(res.Stdout) != want {
		t.Errorf("stdout: got %q, want %q", res.Stdout, want)
	}
	if !strings.Contains(string(res.Stderr), "err") {
		t.Errorf("stderr: got %q", res.Stderr)
	}
	recs := au.Records()
	if len(recs) != 2 || recs[0].Exec.Phase != "start" || recs[1].Exec.Phase != "end" || *recs[1].Exec.ExitCode != 3 {
		t.Errorf("audit records: got %+v", recs)
	}
	t.Logf("create-to-exec %v wall %v", res.StartLatency, res.Wall)
}

func itoa(n int) string { return strconv.Itoa(n) }
