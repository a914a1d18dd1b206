package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/test/poll"
	"github.com/airlock-dev/airlock/test/servetest"
)

// drillSandboxes is how many sandboxes the fault drill runs at once.
const drillSandboxes = 10

// TestRootDaemonFaultDrill kills `airlock serve` with SIGKILL while ten
// sandboxes are making requests, and checks what the issue promises:
//   - after the kill no sandbox has egress: every process of every sandbox
//     is gone and the fake server receives nothing more;
//   - the next serve (same run directory) leaves no namespace, cgroup or
//     state file of the dead sandboxes, and works;
//   - the audit log records the recovered crash and verifies --complete
//     (every record covered by a signed checkpoint) after that serve stops
//     cleanly.
func TestRootDaemonFaultDrill(t *testing.T) {
	e := newServeEnv(t)
	runDir := filepath.Join(e.dir, "run")
	d := startServe(t, e, runDir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	marker := "alk-drill-" + randHex(t)
	ids, streams := startRequestLoops(ctx, t, d.C, marker)
	defer func() {
		for _, s := range streams {
			s.Close()
		}
	}()
	// Every sandbox has reached the fake server at least once.
	poll.Until(t, 2*time.Minute, "a request from every sandbox", func() bool {
		seen := map[string]bool{}
		for _, r := range w.other.Seen() {
			if strings.HasPrefix(r.URL.Path, "/"+marker+"/") {
				seen[r.URL.Path] = true
			}
		}
		return len(seen) == drillSandboxes
	})
	pids := servetest.MarkedProcs(marker)
	cgroups := servetest.CgroupsOf(pids)
	if len(pids) == 0 || len(cgroups) < drillSandboxes {
		t.Fatalf("found %d processes in %d sandbox cgroups for %d running sandboxes", len(pids), len(cgroups), drillSandboxes)
	}
	if got := servetest.Namespaces(t, ids); len(got) != drillSandboxes {
		t.Fatalf("namespaces of the running sandboxes: got %v, want %d", got, drillSandboxes)
	}

	// SIGKILL: no drain, no teardown, the audit writer dies mid-chain.
	d.Stop(syscall.SIGKILL)
	poll.Until(t, time.Minute, "every sandbox process to end with the daemon", func() bool {
		return len(servetest.MarkedProcs(marker)) == 0
	})
	before := countPaths(marker)
	// The loops requested every 100ms; a second of silence from all ten is
	// ten chances each for a surviving path out.
	time.Sleep(time.Second)
	if after := countPaths(marker); after != before {
		t.Fatalf("the fake server got %d requests from the drill's sandboxes after the daemon was killed", after-before)
	}

	// The next serve cleans up after the dead one.
	d2 := startServe(t, e, runDir)
	if got := servetest.Namespaces(t, ids); len(got) != 0 {
		t.Errorf("namespaces of dead sandboxes after restart: %v", got)
	}
	poll.Until(t, time.Minute, "the dead sandboxes' cgroups to be removed", func() bool {
		return len(servetest.CgroupDirs(cgroups)) == 0
	})
	if got := servetest.FilesMentioning(runDir, ids); len(got) != 0 {
		t.Errorf("state files of dead sandboxes after restart: %v", got)
	}
	list, err := d2.C.ListSandboxes(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list {
		for _, id := range ids {
			if sb.ID == id {
				t.Errorf("dead sandbox %s is listed after restart: %+v", id, sb)
			}
		}
	}
	// The restarted daemon serves: a new sandbox reaches the allowed host.
	checkServes(ctx, t, d2.C)

	if code := d2.Stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve after SIGTERM: exit %d\n%s", code, d2.Output())
	}
	recs := e.records()
	mustFind(t, recs, match{kind: audit.KindCrashRecovered})
	code, out := auditVerifyArgs(t, "--complete", "--pubkey", e.audit+".key.pub", e.audit)
	if code != 0 {
		t.Fatalf("audit verify --complete after the drill: exit %d\n%s", code, out)
	}
}

// startRequestLoops creates drillSandboxes sandboxes and starts in each a
// shell loop fetching http://other.example.test/<marker>/<n>/ every 100ms.
// The loops' command lines carry marker so the test can find their
// processes on the host.
func startRequestLoops(ctx context.Context, t *testing.T, c *client.Client, marker string) ([]string, []*client.ExecStream) {
	t.Helper()
	var ids []string
	var streams []*client.ExecStream
	for i := range drillSandboxes {
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Labels: map[string]string{"drill": marker}})
		if err != nil {
			t.Fatalf("create sandbox %d: %v", i, err)
		}
		ids = append(ids, sb.ID)
		script := fmt.Sprintf(`while :; do curl -s -o /dev/null --max-time 5 http://other.example.test/%s/%d/; sleep 0.1; done`, marker, i)
		s, err := c.StartExec(ctx, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", script, marker}})
		if err != nil {
			t.Fatalf("exec in sandbox %d: %v", i, err)
		}
		streams = append(streams, s)
	}
	return ids, streams
}

// countPaths counts the fake server's requests from the drill's loops.
func countPaths(marker string) int {
	n := 0
	for _, r := range w.other.Seen() {
		if strings.HasPrefix(r.URL.Path, "/"+marker+"/") {
			n++
		}
	}
	return n
}

// checkServes creates a sandbox, fetches the allowed host from it and
// deletes it.
func checkServes(ctx context.Context, t *testing.T, c *client.Client) {
	t.Helper()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("create after restart: %v", err)
	}
	var out strings.Builder
	res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Argv: []string{"curl", "-sS", "--max-time", "30", "http://other.example.test/after-restart"}},
		client.ExecIO{Stdout: &out, Stderr: &out})
	if err != nil || res.ExitStatus != 0 || !strings.Contains(out.String(), "hello from") {
		t.Fatalf("fetch after restart: %v %+v\n%s", err, res, out.String())
	}
	if _, err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("delete after restart: %v", err)
	}
}

func randHex(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
