package servetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/test/poll"
)

// Daemon is one `airlock serve` a test started.
type Daemon struct {
	t testing.TB
	// Socket is the API socket; C a client of it.
	Socket string
	C      *client.Client
	cmd    *exec.Cmd
	stderr *SyncBuffer
	exited chan struct{}
}

// SyncBuffer is a buffer written by the daemon's pipe copier and read by
// the test at once (the daemon's output, or an Options.Stdout).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// Bytes returns a copy of what was written so far.
func (s *SyncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Output is what the daemon wrote to stdout (unless Options.Stdout took it)
// and stderr so far.
func (d *Daemon) Output() string { return d.stderr.String() }

// PID is the daemon's process id.
func (d *Daemon) PID() int { return d.cmd.Process.Pid }

// Start runs `bin serve --config config --socket socket --run-dir runDir`
// and any extra flags, and waits up to two minutes for its API to answer. The
// daemon is killed at the test's end if it is still running.
func Start(t testing.TB, bin, config, socket, runDir string, extra ...string) *Daemon {
	t.Helper()
	return StartWith(t, Options{}, bin, config, socket, runDir, extra...)
}

// Options are what StartWith adds to Start.
type Options struct {
	// Env is added to the daemon's environment (KEY=VALUE).
	Env []string
	// Stdout, when set, gets the daemon's stdout; Output then holds stderr
	// only.
	Stdout io.Writer
}

// StartWith is Start with o.
func StartWith(t testing.TB, o Options, bin, config, socket, runDir string, extra ...string) *Daemon {
	t.Helper()
	d := &Daemon{t: t, Socket: socket, stderr: &SyncBuffer{}, exited: make(chan struct{})}
	args := append([]string{"serve", "--config", config, "--socket", socket, "--run-dir", runDir}, extra...)
	d.cmd = exec.Command(bin, args...)
	d.cmd.Stdout, d.cmd.Stderr = d.stderr, d.stderr
	if o.Stdout != nil {
		d.cmd.Stdout = o.Stdout
	}
	if len(o.Env) > 0 {
		d.cmd.Env = append(os.Environ(), o.Env...)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start serve: %v", err)
	}
	go func() { _ = d.cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() {
		// SIGTERM first: serve then tears down its sandboxes and warm pool
		// (a SIGKILL left their namespaces behind, the run directory with
		// their state files being the test's temporary one).
		select {
		case <-d.exited:
		default:
			_ = d.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-d.exited:
			case <-time.After(30 * time.Second):
				_ = d.cmd.Process.Kill()
				<-d.exited
			}
		}
	})
	d.C = client.New(socket)
	t.Cleanup(d.C.Close)
	answered := poll.Within(2*time.Minute, func() bool {
		select {
		case <-d.exited:
			return true
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := d.C.Health(ctx)
		return err == nil
	})
	select {
	case <-d.exited:
		t.Fatalf("serve exited at start: %v\n%s", d.cmd.ProcessState, d.Output())
	default:
	}
	if !answered {
		t.Fatalf("serve did not answer within 2 minutes\n%s", d.Output())
	}
	return d
}

// Stop sends sig and waits up to two minutes for the daemon to exit; it
// returns the exit code (-1 when a signal ended it).
func (d *Daemon) Stop(sig syscall.Signal) int {
	d.t.Helper()
	_ = d.cmd.Process.Signal(sig)
	select {
	case <-d.exited:
	case <-time.After(2 * time.Minute):
		_ = d.cmd.Process.Kill()
		<-d.exited
		d.t.Fatalf("serve did not exit within 2 minutes of %v\n%s", sig, d.Output())
	}
	return d.cmd.ProcessState.ExitCode()
}

// MarkedProcs returns the host pids of processes whose command line
// contains marker.
func MarkedProcs(marker string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(marker)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// CgroupsOf returns the per-sandbox cgroup names ("airlock-...") the
// processes pids are in, read from /proc/<pid>/cgroup on the host.
func CgroupsOf(pids []int) map[string]bool {
	names := map[string]bool{}
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 {
				continue
			}
			for _, c := range strings.Split(parts[2], "/") {
				if strings.HasPrefix(c, "airlock-") {
					names[c] = true
				}
			}
		}
	}
	return names
}

// CgroupDirs returns every cgroup directory, in any hierarchy under
// /sys/fs/cgroup, whose name is in names.
func CgroupDirs(names map[string]bool) []string {
	var found []string
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, de os.DirEntry, err error) error {
		if err != nil || !de.IsDir() {
			return nil
		}
		if names[de.Name()] {
			found = append(found, p)
			return filepath.SkipDir
		}
		// Sandbox cgroups live under <hierarchy>/airlock; do not walk the
		// whole machine's tree deeper than that.
		if depth := strings.Count(strings.TrimPrefix(p, "/sys/fs/cgroup"), "/"); depth >= 3 {
			return filepath.SkipDir
		}
		return nil
	})
	return found
}

// FilesMentioning returns the files under dir whose name or content holds
// any of ids.
func FilesMentioning(dir string, ids []string) []string {
	var found []string
	_ = filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, id := range ids {
			if strings.Contains(p, id) || bytes.Contains(b, []byte(id)) {
				found = append(found, p)
				break
			}
		}
		return nil
	})
	return found
}

// Namespaces returns the entries of `ip netns list` that hold any of ids.
func Namespaces(t testing.TB, ids []string) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	var found []string
	for _, line := range strings.Split(string(out), "\n") {
		for _, id := range ids {
			if id != "" && strings.Contains(line, id) {
				found = append(found, line)
			}
		}
	}
	return found
}
