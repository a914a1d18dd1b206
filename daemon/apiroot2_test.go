package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/test/poll"
)

// The test binary run as another user (TestMain) talks to the daemon at
// unprivSocketEnv and tries the sandbox unprivOtherEnv, which is root's.
const (
	unprivSocketEnv = "ALK_TEST_UNPRIV_SOCKET"
	unprivOtherEnv  = "ALK_TEST_UNPRIV_OTHER"
)

// unprivReport is what the other user's run saw.
type unprivReport struct {
	Own        string   `json:"own"`
	Owner      int      `json:"owner"`
	Output     string   `json:"output"`
	GetOther   string   `json:"get_other"`
	DelOther   string   `json:"delete_other"`
	ExecOther  string   `json:"exec_other"`
	FilesOther string   `json:"files_other"`
	Listed     []string `json:"listed"`
	Attach     string   `json:"attach"`
	Check      string   `json:"check_attach"`
	Deleted    string   `json:"deleted"`
	// History is the kinds of the own sandbox's kept records read back;
	// HistoryOther the error code of reading root's.
	History      []string `json:"history"`
	HistoryOther string   `json:"history_other"`
	Err          string   `json:"error,omitempty"`
}

// unprivClient is the other user's side of TestRootSandboxOwners: create and
// use a sandbox, try root's, report.
func unprivClient() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := client.New(os.Getenv(unprivSocketEnv))
	defer c.Close()
	other := os.Getenv(unprivOtherEnv)
	var rep unprivReport
	defer func() { _ = json.NewEncoder(os.Stdout).Encode(rep) }()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Labels: map[string]string{"who": "unpriv"}})
	if err != nil {
		rep.Err = "create: " + err.Error()
		return 1
	}
	rep.Own, rep.Owner = sb.ID, sb.Owner
	var out strings.Builder
	if _, err := c.Exec(ctx, sb.ID, api.ExecRequest{Argv: []string{"echo", "hello"}}, client.ExecIO{Stdout: &out}); err != nil {
		rep.Err = "exec: " + err.Error()
	}
	rep.Output = out.String()
	_, err = c.GetSandbox(ctx, other)
	rep.GetOther = client.Code(err)
	_, err = c.Exec(ctx, other, api.ExecRequest{Argv: []string{"true"}}, client.ExecIO{})
	rep.ExecOther = client.Code(err)
	_, err = c.GetFiles(ctx, other, api.WorkspaceDir)
	rep.FilesOther = client.Code(err)
	_, err = c.DeleteSandbox(ctx, other)
	rep.DelOther = client.Code(err)
	err = c.Attach(ctx, api.AttachRequest{ID: "alk-unpriv", NetNS: "/proc/1/ns/net"})
	rep.Attach = client.Code(err)
	_, err = c.CheckAttach(ctx, "alk-unpriv")
	rep.Check = client.Code(err)
	list, _ := c.ListSandboxes(ctx, nil)
	for _, s := range list {
		rep.Listed = append(rep.Listed, s.ID)
	}
	past := client.EventsOptions{History: true, NoFollow: true}
	if es, err := c.EventsWith(ctx, sb.ID, past); err != nil {
		rep.Err = "own history: " + err.Error()
	} else {
		for ev, err := range es.All() {
			if err != nil {
				rep.Err = "own history: " + err.Error()
				break
			}
			if ev.Record != nil && ev.History {
				rep.History = append(rep.History, fmt.Sprint(ev.Record["kind"]))
			}
		}
		es.Close()
	}
	if es, err := c.EventsWith(ctx, other, past); err != nil {
		rep.HistoryOther = client.Code(err)
	} else {
		es.Close()
		rep.HistoryOther = "opened"
	}
	end, err := c.DeleteSandbox(ctx, sb.ID)
	if err != nil {
		rep.Err = "delete: " + err.Error()
		return 1
	}
	rep.Deleted = end.State
	return 0
}

// systemUser creates a system user whose group is gid, removed after the
// test.
func systemUser(t *testing.T, name string, gid int) int {
	t.Helper()
	_ = exec.Command("userdel", name).Run() // a crashed run's
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--gid", strconv.Itoa(gid),
		"--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("userdel", name).Run() })
	out, err := exec.Command("id", "-u", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	uid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	return uid
}

// asUser runs the test binary as uid, in the socket's group, with the
// socket's path and env in its environment (TestMain sends it to the other
// user's side), and decodes its report into rep.
func (a *apiRoot) asUser(t *testing.T, uid int, rep any, env ...string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(searchableTempDir(t), "daemon.test")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Dir = "/"
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", unprivSocketEnv + "=" + a.sock}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(a.gid), Groups: []uint32{}}}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	if err := json.Unmarshal(out, rep); err != nil || runErr != nil {
		t.Fatalf("the other user's run: %v (%v), stdout %q, stderr %q", runErr, err, out, stderr.String())
	}
}

// TestRootSandboxOwners: a user who is not root, in the socket's group,
// creates and uses a sandbox of its own (its audit records carry its uid),
// and root's sandbox is not there for it: not found on inspect, exec, files
// and delete, not listed, and still running after; attach is root's only.
func TestRootSandboxOwners(t *testing.T) {
	a := newAPIRoot(t)
	uid := systemUser(t, "alk-u"+strconv.Itoa(os.Getpid()), a.gid)
	mine := a.create(t, api.CreateSandboxRequest{Labels: map[string]string{"who": "root"}})
	var rep unprivReport
	a.asUser(t, uid, &rep, unprivOtherEnv+"="+mine.ID)
	if rep.Err != "" {
		t.Fatalf("the other user's run: %+v", rep)
	}
	if rep.Owner != uid || rep.Output != "hello\n" || rep.Deleted != api.StateStopped {
		t.Fatalf("the user's own sandbox: %+v, want owner %d, output hello, deleted", rep, uid)
	}
	for what, code := range map[string]string{"inspect": rep.GetOther, "exec": rep.ExecOther, "files": rep.FilesOther, "delete": rep.DelOther} {
		if code != api.CodeNotFound {
			t.Errorf("%s of root's sandbox as uid %d: %q, want %s", what, uid, code, api.CodeNotFound)
		}
	}
	if rep.Attach != api.CodeForbidden || rep.Check != api.CodeForbidden {
		t.Errorf("attach and its check as uid %d: %q and %q, want %s", uid, rep.Attach, rep.Check, api.CodeForbidden)
	}
	if !slices.Equal(rep.Listed, []string{rep.Own}) {
		t.Errorf("uid %d listed %v, want only its own %s", uid, rep.Listed, rep.Own)
	}
	// The owner reads its sandbox's past records back (it cannot read the
	// audit log); root's are not there for it.
	if !slices.Contains(rep.History, audit.KindSandbox) || !slices.Contains(rep.History, audit.KindExec) {
		t.Errorf("uid %d's own history: kinds %v, want its creation and exec records", uid, rep.History)
	}
	if rep.HistoryOther != api.CodeNotFound {
		t.Errorf("history of root's sandbox as uid %d: %q, want %s", uid, rep.HistoryOther, api.CodeNotFound)
	}
	got, err := a.c.GetSandbox(context.Background(), mine.ID)
	if err != nil || got.State != api.StateRunning || got.ExecsTotal != 0 {
		t.Fatalf("root's sandbox after the other user: %+v, %v", got, err)
	}
	// Every record of the user's sandbox names its owner.
	owner := strconv.Itoa(uid)
	var seen []string
	poll.Until(t, 10*time.Second, "the user's sandbox records", func() bool {
		seen = seen[:0]
		for _, r := range audittest.ReadLog(t, a.cfg.Audit.File) {
			if r.Sandbox != rep.Own {
				continue
			}
			if r.Owner != owner {
				t.Fatalf("record %s %s of %s has owner %q, want %s", r.Kind, r.ID, rep.Own, r.Owner, owner)
			}
			seen = append(seen, r.Kind)
		}
		return slices.Contains(seen, audit.KindExec) && slices.Contains(seen, audit.KindSandbox)
	})
}

// TestRootSandboxLifetimes: the idle timeout ends a sandbox nobody uses, the
// maximum lifetime one that is busy (its exec is killed), each with a
// sandbox record giving the reason, counted in the metrics; nothing of either
// is left.
func TestRootSandboxLifetimes(t *testing.T) {
	a := newAPIRoot(t)
	ctx := context.Background()
	idle := a.create(t, api.CreateSandboxRequest{IdleTimeout: config.Duration(time.Second)})
	busy := a.create(t, api.CreateSandboxRequest{MaxLifetime: config.Duration(2 * time.Second)})
	// A marker no other process on the machine runs: hostProcs scans them all.
	marker := "sleep 6" + strconv.Itoa(10000+os.Getpid()%90000)
	s, err := a.c.StartExec(ctx, busy.ID, api.ExecRequest{Argv: strings.Fields(marker)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tt := range []struct {
		id, reason string
	}{{idle.ID, ReasonIdleTimeout}, {busy.ID, ReasonMaxLifetime}} {
		poll.Until(t, 30*time.Second, tt.id+" to end", func() bool {
			_, err := a.c.GetSandbox(ctx, tt.id)
			return client.Code(err) == api.CodeNotFound
		})
		poll.Until(t, 10*time.Second, "the "+tt.reason+" record", func() bool {
			for _, r := range audittest.ReadLog(t, a.cfg.Audit.File) {
				if r.Kind == audit.KindSandbox && r.Sandbox == tt.id && audittest.HasReason(r, tt.reason) && r.Decision == audit.DecisionAllow {
					return true
				}
			}
			return false
		})
		a.d.reg.waitTeardowns() // the namespace goes in the background teardown
		if _, ok := a.d.netns.Get(tt.id); ok {
			t.Fatalf("%s ended (%s) but its namespace is still served", tt.id, tt.reason)
		}
		if got := a.metric(t, fmt.Sprintf("airlock_sandboxes_ended_total{reason=%q}", tt.reason)); got != 1 {
			t.Fatalf("ended{reason=%s} = %v, want 1", tt.reason, got)
		}
	}
	// The busy sandbox's exec did not outlive it.
	for _, err := range s.Frames() {
		if err != nil {
			break
		}
	}
	if got := hostProcs(marker); len(got) != 0 {
		t.Fatalf("processes %v outlived their sandbox", got)
	}
}

// TestRootSandboxPool: a create while the pool is full takes a prepared
// sandbox from it (counted), the pool fills again in the background, and a
// pooled sandbox works like any other and is gone with it.
func TestRootSandboxPool(t *testing.T) {
	a := newAPIRoot(t, func(c *config.Config) { c.Sandbox.PoolSize = 2 })
	ctx := context.Background()
	health := func() *api.Health {
		h, err := a.c.Health(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	poll.Until(t, 30*time.Second, "the pool to fill", func() bool { return health().PoolDepth == 2 })
	if got := a.metric(t, "airlock_sandbox_pool_depth"); got != 2 {
		t.Fatalf("pool depth metric %v, want 2", got)
	}
	created0, pooled0 := a.metric(t, "airlock_sandboxes_created_total"), a.metric(t, "airlock_sandboxes_from_pool_total")
	sb := a.create(t, api.CreateSandboxRequest{Limits: api.Limits{Memory: 128 << 20}})
	if got := a.metric(t, "airlock_sandboxes_from_pool_total") - pooled0; got != 1 {
		t.Fatalf("from the pool: %v, want 1", got)
	}
	if got := a.metric(t, "airlock_sandboxes_created_total") - created0; got != 1 {
		t.Fatalf("created: %v, want 1", got)
	}
	if out := a.mustRun(t, sb.ID, "sh", "-c", "cat /proc/self/status >/dev/null && echo ok"); out != "ok\n" {
		t.Fatalf("pooled sandbox: %q", out)
	}
	poll.Until(t, 30*time.Second, "the pool to fill again", func() bool { return health().PoolDepth == 2 })
	if got := a.metric(t, "airlock_sandboxes_active"); got != 1 {
		t.Fatalf("active %v, want 1", got)
	}
	if got := a.metric(t, "airlock_exec_start_seconds_count"); got < 1 {
		t.Fatalf("exec start histogram count %v, want at least 1", got)
	}
	if _, err := a.c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := a.metric(t, "airlock_sandboxes_active"); got != 0 {
		t.Fatalf("active %v after delete, want 0", got)
	}
}

// TestRootNewFlowLimitConfigured: limits.new_flows and new_flow_burst reach the
// sandbox's rules. With a burst of 3 and one flow a second, 20 datagrams to
// distinct addresses (20 new flows, each redirected to airlock's DNS listener,
// none leaving) are cut after the first few: past the limit the sender gets
// EPERM (the default, 2000, would let all 20 through). A TCP connect over the
// limit is not refused but waits for its SYN's retransmission.
func TestRootNewFlowLimitConfigured(t *testing.T) {
	a := newAPIRoot(t, func(c *config.Config) { c.Limits.NewFlows, c.Limits.NewFlowBurst = 1, 3 })
	sb := a.create(t, api.CreateSandboxRequest{})
	out := a.mustRun(t, sb.ID, "bash", "-c", `for i in $(seq 20); do if (echo x >/dev/udp/198.18.7.$i/53) 2>/dev/null; then echo sent; else echo refused; fi; done`)
	sent, refused := strings.Count(out, "sent"), strings.Count(out, "refused")
	if sent+refused != 20 || sent < 1 || sent > 8 {
		t.Fatalf("%d datagrams went out and %d were refused, want 1..8 out (burst 3, 1/s):\n%s", sent, refused, out)
	}
}
