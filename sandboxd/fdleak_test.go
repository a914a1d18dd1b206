package sandboxd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openFDs lists this process's open file descriptors (the directory's own fd
// included, the same in every count).
func openFDs(t *testing.T) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var fds []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			fds = append(fds, n)
		}
	}
	return fds
}

// assertNoFDGrowth fails when the process holds more fds than base once the
// run's goroutines (output drains, stdin copier) have finished, waiting up to
// two seconds for them.
func assertNoFDGrowth(t *testing.T, base int, what string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		n := len(openFDs(t))
		if n <= base {
			return
		}
		if time.Now().After(deadline) {
			var links []string
			for _, fd := range openFDs(t) {
				l, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
				links = append(links, strconv.Itoa(fd)+"->"+l)
			}
			t.Errorf("%s: got %d open fds, want at most %d: %s", what, n, base, strings.Join(links, " "))
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunClosesFDsOnEveryFailure (regression: Executor.run leaked the pipes it
// had opened when a later pipe, the netns, the cgroup fd or the start of init
// failed). A run whose setup fails at each step that can be made to fail must
// leave the executor's process with no more open fds than before it.
func TestRunClosesFDsOnEveryFailure(t *testing.T) {
	e, _ := newTestExecutor(t, func(c *Config) { c.PoolSize = -1 })
	mustRun(t, e, Spec{Argv: []string{"/bin/true"}}) // warm up: lazily opened fds of the runtime
	notNS := filepath.Join(hostDir(t, 0o755), "not-a-namespace")
	if err := os.WriteFile(notNS, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	emptyRoot := hostDir(t, 0o755)
	cases := []struct {
		name string
		spec Spec
		exe  string
		// procsFail makes the v1 cgroup move (the setup step after the config
		// was sent) fail.
		procsFail bool
		want      string
	}{
		{name: "netns missing", spec: Spec{NetNS: "/run/netns/airlock-no-such-netns"}, want: "netns"},
		{name: "netns not a namespace (setns fails)", spec: Spec{NetNS: notNS}, want: "join netns"},
		{name: "netns missing with stdin", spec: Spec{NetNS: "/run/netns/airlock-no-such-netns", Stdin: strings.NewReader("x")}, want: "netns"},
		{name: "init binary missing", exe: "/nonexistent/airlock-init", want: "start init"},
		{name: "init binary missing with stdin", exe: "/nonexistent/airlock-init", spec: Spec{Stdin: strings.NewReader("x")}, want: "start init"},
		{name: "cgroup move refused", procsFail: true, want: "move pid"},
		{name: "init setup fails (empty rootfs)", spec: Spec{RootFS: emptyRoot}, want: "sandbox setup"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.procsFail && e.cgm.v2 {
				t.Skip("the cgroup move is a v1 step")
			}
			exe, write := e.cfg.Exe, e.cgm.write
			t.Cleanup(func() { e.cfg.Exe, e.cgm.write = exe, write })
			if tc.exe != "" {
				e.cfg.Exe = tc.exe
			}
			if tc.procsFail {
				e.cgm.write = func(p, v string) error {
					if filepath.Base(p) == "cgroup.procs" {
						return errors.New("airlock test: cgroup.procs write refused")
					}
					return write(p, v)
				}
			}
			base := len(openFDs(t))
			spec := tc.spec
			spec.Argv = []string{"/bin/true"}
			_, err := e.Run(context.Background(), spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got err %v, want one containing %q", err, tc.want)
			}
			assertNoFDGrowth(t, base, tc.name)
		})
	}
}

// TestRunClosesFDsWhenFDsRunOut lowers RLIMIT_NOFILE so that each fd the run
// opens in turn is the one refused (the lock files, every pipe, /dev/null, the
// cgroup fd on v2, init's start), one limit higher per attempt, until a run
// succeeds: no failed attempt may leave an fd behind. It runs for the host's
// hierarchy and for v2 mode.
func TestRunClosesFDsWhenFDsRunOut(t *testing.T) {
	modes := []struct {
		name string
		mod  func(*Config)
	}{
		{"host hierarchy", func(c *Config) { c.PoolSize = -1 }},
		{"v2", func(c *Config) {
			c.PoolSize = -1
			c.CgroupRoot, c.CgroupMode, c.AllowMissingControllers = cgroup2Root(t), CgroupV2, LimitControllers
		}},
	}
	for _, m := range modes {
		for _, withStdin := range []bool{false, true} {
			t.Run(m.name+" stdin="+strconv.FormatBool(withStdin), func(t *testing.T) {
				e, _ := newTestExecutor(t, m.mod)
				mustRun(t, e, Spec{Argv: []string{"/bin/true"}})
				var orig syscall.Rlimit
				if err := syscall.Getrlimit(unix.RLIMIT_NOFILE, &orig); err != nil {
					t.Fatal(err)
				}
				restore := func() {
					if err := syscall.Setrlimit(unix.RLIMIT_NOFILE, &orig); err != nil {
						t.Fatalf("restore RLIMIT_NOFILE: %v", err)
					}
				}
				t.Cleanup(restore)
				failures := 0
				var reasons []string
				for extra := 0; extra < 64; extra++ {
					fds := openFDs(t)
					spec := Spec{Argv: []string{"/bin/true"}}
					if withStdin {
						spec.Stdin = strings.NewReader("x")
					}
					lim := syscall.Rlimit{Cur: uint64(limitLeaving(fds, extra)), Max: orig.Max}
					if err := syscall.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
						t.Fatal(err)
					}
					_, err := e.Run(context.Background(), spec)
					restore()
					if err == nil {
						t.Logf("%d runs failed for want of an fd before one succeeded:\n%s", failures, strings.Join(reasons, "\n"))
						all := strings.Join(reasons, "\n")
						for _, step := range []string{"control socket for init", "start init"} {
							if !strings.Contains(all, step) {
								t.Errorf("no attempt failed at %q: the sweep missed a step", step)
							}
						}
						return
					}
					failures++
					reasons = append(reasons, err.Error())
					assertNoFDGrowth(t, len(fds), "limit "+strconv.FormatUint(lim.Cur, 10)+": "+err.Error())
				}
				t.Fatal("no run succeeded with up to 64 fds to spare")
			})
		}
	}
}

// limitLeaving returns the RLIMIT_NOFILE that leaves exactly n fd numbers free
// for new fds: the limit bounds fd numbers, and a new fd takes the lowest free
// number, so the free numbers below the limit are what may still be opened (fds
// already open above it stay usable).
func limitLeaving(open []int, n int) int {
	taken := map[int]bool{}
	for _, fd := range open {
		taken[fd] = true
	}
	limit, free := 0, 0
	for ; free < n; limit++ {
		if !taken[limit] {
			free++
		}
	}
	return limit
}
