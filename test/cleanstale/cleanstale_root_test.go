package cleanstale

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/test/roottest"
)

var script = filepath.Join("..", "..", "scripts", "clean-stale.sh")

// deadPid returns the pid of a process that has exited (and been reaped),
// one whose base-36 spelling has no x (so an alk<pid36>x name splits one
// way only).
func deadPid(t *testing.T) int {
	t.Helper()
	for range 100 {
		c := exec.Command("true")
		if err := c.Run(); err != nil {
			t.Fatal(err)
		}
		pid := c.Process.Pid
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil || strings.Contains(strconv.FormatInt(int64(pid), 36), "x") {
			continue
		}
		return pid
	}
	t.Fatal("no dead pid without an x in base 36 after 100 tries")
	return 0
}

// addNetns creates a namespace and removes it in t.Cleanup whatever the
// script did.
func addNetns(t *testing.T, name string) {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", name).Run() })
}

func netnsExists(name string) bool {
	_, err := os.Stat("/run/netns/" + name)
	return err == nil
}

// run runs the script on the test's own resources (match) and returns its
// exit code and output.
func run(t *testing.T, match string, args ...string) (int, string) {
	t.Helper()
	return runEnv(t, match, []string{"CLEAN_STALE_MIN_AGE=0"}, args...)
}

// runEnv is run with env added (CLEAN_STALE_MIN_AGE unset unless env sets it).
func runEnv(t *testing.T, match string, env []string, args ...string) (int, string) {
	t.Helper()
	c := exec.Command("bash", append([]string{script}, args...)...)
	c.Env = append(append(os.Environ(), "CLEAN_STALE_MATCH="+match, "CLEAN_STALE_GRACE=0"), env...)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String()
}

// TestCleanStaleKeepsWhatIsLive: of namespaces, cgroups and links named
// like a test's, the script removes those of a dead process and keeps those
// of a live one (its pid in the name, a process inside, a process in the
// cgroup), and a link without a pid.
func TestCleanStaleKeepsWhatIsLive(t *testing.T) {
	roottest.Require(t)
	tag := fmt.Sprintf("cs%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	dead, live := deadPid(t), os.Getpid()
	names := map[string]string{
		"dead pid":             fmt.Sprintf("airlock-p%d-%s-a", dead, tag),
		"live pid":             fmt.Sprintf("airlock-p%d-%s-b", live, tag),
		"dead pid, pool":       fmt.Sprintf("airlock-pool-%d-%s", dead, tag),
		"no pid, empty":        fmt.Sprintf("airlock-%s-c", tag),
		"no pid, a process in": fmt.Sprintf("airlock-%s-d", tag),
	}
	for _, n := range names {
		addNetns(t, n)
	}
	// A live process inside the namespace without a pid in its name.
	sleeper := exec.Command("ip", "netns", "exec", names["no pid, a process in"], "sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	// ip netns exec enters the namespace before exec: wait until it has.
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", sleeper.Process.Pid))
		self, _ := os.Readlink("/proc/self/ns/net")
		if l != "" && l != self {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sleeper never entered its namespace")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Cgroups: one of a dead pid, one of a live pid with a process in it.
	cgRoot := cgroupRoot(t)
	cgDead := filepath.Join(cgRoot, fmt.Sprintf("alk%sx%s", strconv.FormatInt(int64(dead), 36), tag))
	cgBusy := filepath.Join(cgRoot, fmt.Sprintf("airlock-%s-busy", tag))
	for _, d := range []string{cgDead, cgBusy} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatalf("make cgroup %s: %v", d, err)
		}
		t.Cleanup(func() { _ = os.Remove(d) })
	}
	busy := exec.Command("sleep", "60")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = busy.Process.Kill(); _ = busy.Wait() })
	if err := os.WriteFile(filepath.Join(cgBusy, "cgroup.procs"), []byte(fmt.Sprint(busy.Process.Pid)), 0o644); err != nil {
		t.Fatalf("move the sleeper into %s: %v", cgBusy, err)
	}
	t.Cleanup(func() {
		_ = busy.Process.Kill()
		_ = busy.Wait()
		for range 50 {
			if os.Remove(cgBusy) == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	// --check against an empty "before": the dead ones are leftovers, the
	// live ones are not.
	empty := filepath.Join(t.TempDir(), "before")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := run(t, tag, "--check", empty)
	if code != 1 {
		t.Fatalf("--check with leftovers: got exit %d, want 1\n%s", code, out)
	}
	wantRemoved := []string{names["dead pid"], names["dead pid, pool"], names["no pid, empty"]}
	wantKept := []string{names["live pid"], names["no pid, a process in"]}
	for _, n := range wantRemoved {
		if !strings.Contains(out, "netns "+n) {
			t.Errorf("--check does not name leftover %s:\n%s", n, out)
		}
	}
	for _, n := range wantKept {
		if strings.Contains(out, "netns "+n) {
			t.Errorf("--check blames %s, which a live process owns:\n%s", n, out)
		}
	}
	if !strings.Contains(out, "cgroup "+cgDead) || strings.Contains(out, "cgroup "+cgBusy) {
		t.Errorf("--check on cgroups: want %s named and %s not:\n%s", cgDead, cgBusy, out)
	}

	// --check against a "before" that lists them all: nothing is new.
	_, list := run(t, tag, "--list")
	all := filepath.Join(t.TempDir(), "all")
	if err := os.WriteFile(all, []byte(list), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := run(t, tag, "--check", all); code != 0 {
		t.Errorf("--check with every resource there before: got exit %d, want 0\n%s", code, out)
	}

	// Clean with the default minimum age: a namespace without a pid in its
	// name, a minute old at most, may be a run in progress: kept.
	if code, out := runEnv(t, tag, nil); code != 0 {
		t.Fatalf("clean: exit %d\n%s", code, out)
	}
	if !netnsExists(names["no pid, empty"]) {
		t.Errorf("clean removed %s, made a moment ago (younger than CLEAN_STALE_MIN_AGE)", names["no pid, empty"])
	}
	if netnsExists(names["dead pid"]) {
		t.Errorf("clean kept %s, whose owner is dead", names["dead pid"])
	}

	// Clean: the dead ones go, the live ones stay.
	if code, out := run(t, tag); code != 0 {
		t.Fatalf("clean: exit %d\n%s", code, out)
	}
	for _, n := range wantRemoved {
		if netnsExists(n) {
			t.Errorf("clean kept %s, whose owner is dead", n)
		}
	}
	for _, n := range wantKept {
		if !netnsExists(n) {
			t.Errorf("clean removed %s, which a live process owns", n)
		}
	}
	if _, err := os.Stat(cgDead); err == nil {
		t.Errorf("clean kept cgroup %s, whose owner is dead", cgDead)
	}
	if _, err := os.Stat(cgBusy); err != nil {
		t.Errorf("clean removed cgroup %s, which has a process in it", cgBusy)
	}
	if c := exec.Command("kill", "-0", fmt.Sprint(busy.Process.Pid)); c.Run() != nil {
		t.Error("clean killed the process in a busy cgroup")
	}
}

// cgroupRoot is a cgroup hierarchy the script searches: the unified one
// (cgroup v2), else v1's pids hierarchy. Never a tmpfs: a directory made
// there is no cgroup.
func cgroupRoot(t *testing.T) string {
	t.Helper()
	for _, c := range []struct {
		dir   string
		magic int64
	}{{"/sys/fs/cgroup", unix.CGROUP2_SUPER_MAGIC}, {"/sys/fs/cgroup/pids", unix.CGROUP_SUPER_MAGIC}} {
		var st unix.Statfs_t
		if unix.Statfs(c.dir, &st) == nil && int64(st.Type) == c.magic {
			return c.dir
		}
	}
	t.Fatal("no cgroup v2 at /sys/fs/cgroup nor v1 pids hierarchy at /sys/fs/cgroup/pids")
	return ""
}
