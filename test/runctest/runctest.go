package runctest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// CgroupRoot is where the cgroup hierarchies are mounted.
const CgroupRoot = "/sys/fs/cgroup"

// cmdTimeout bounds one runc command (the machine is small and shared).
const cmdTimeout = 2 * time.Minute

var seq atomic.Uint64

// Options describe one container.
type Options struct {
	// NetNS is the path of the network namespace the container joins (a
	// platform's pinned namespace, /run/netns/NAME); empty gives it a new one,
	// which runc makes with lo up.
	NetNS string
	// Files are written into the rootfs: path relative to it -> content
	// (etc/resolv.conf, etc/hosts).
	Files map[string]string
	// Args is the container's process; default sleep 600, so a container a
	// killed test run leaves behind ends by itself.
	Args []string
	// Created stops after `runc create`: the namespaces exist and the process
	// waits until (*Container).Begin, which is when a platform sets up the
	// network (a CNI ADD runs between the two).
	Created bool
}

// Container is one running runc container.
type Container struct {
	ID     string
	Bundle string
	// Cgroup is linux.cgroupsPath: /alk-runc-... below every hierarchy.
	Cgroup string
	// Log is the file the container's stdout and stderr go to.
	Log  string
	root string // runc --root
	t    testing.TB
}

// Start builds a bundle in a directory of t's, runs it detached with runc and
// registers its removal (runc kill, runc delete --force, the cgroup
// directories) for the test's end, whatever the outcome. It fails t when runc
// or a static busybox is missing (scripts/deps.sh installs both).
func Start(t testing.TB, opts Options) *Container {
	t.Helper()
	if _, err := exec.LookPath("runc"); err != nil {
		t.Fatalf("runctest: runc not found (Debian's runc; scripts/deps.sh installs it): %v", err)
	}
	if err := checkStatic(Busybox); err != nil {
		t.Fatalf("runctest: %v (Debian's busybox-static; scripts/deps.sh installs it)", err)
	}
	c := newContainer(t)
	if err := c.writeBundle(opts); err != nil {
		t.Fatalf("runctest: bundle: %v", err)
	}
	c.start(opts.Created)
	return c
}

// Run starts a bundle made elsewhere (an unpacked image: config.json and
// rootfs in dir) the way Start starts its own: its config's cgroupsPath is
// set to the container's own, and the container is removed at the test's
// end. The container's output goes to (*Container).Log.
func Run(t testing.TB, bundle string) *Container {
	t.Helper()
	if _, err := exec.LookPath("runc"); err != nil {
		t.Fatalf("runctest: runc not found (Debian's runc; scripts/deps.sh installs it): %v", err)
	}
	c := newContainer(t)
	c.Bundle = bundle
	p := filepath.Join(bundle, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("runctest: %v", err)
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("runctest: %s: %v", p, err)
	}
	if s.Linux == nil {
		s.Linux = &specs.Linux{}
	}
	s.Linux.CgroupsPath = c.Cgroup
	if b, err = json.MarshalIndent(&s, "", "\t"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatalf("runctest: %v", err)
	}
	c.start(false)
	return c
}

func newContainer(t testing.TB) *Container {
	dir := t.TempDir()
	id := fmt.Sprintf("alk-runc-%d-%d", os.Getpid(), seq.Add(1))
	return &Container{ID: id, Bundle: filepath.Join(dir, "bundle"), Cgroup: "/" + id, root: filepath.Join(dir, "state"),
		Log: filepath.Join(dir, "container.log"), t: t}
}

// start runs the bundle detached (or only creates it), registering its
// removal first.
func (c *Container) start(createOnly bool) {
	t := c.t
	t.Helper()
	// Registered before runc starts anything, so a failed start is cleaned up
	// too; it runs before t.TempDir's own removal (cleanups run last first).
	t.Cleanup(c.remove)
	log, err := os.Create(c.Log)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	// The container's stdio is a file, not a pipe: a detached container keeps
	// it open, and a pipe would hold runc's Wait until the container ends.
	args := []string{"--root", c.root, "run", "--detach", "--bundle", c.Bundle, c.ID}
	if createOnly {
		args = []string{"--root", c.root, "create", "--bundle", c.Bundle, c.ID}
	}
	cmd := exec.CommandContext(ctx, "runc", args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, log, log
	if err := cmd.Run(); err != nil {
		out, _ := os.ReadFile(log.Name())
		t.Fatalf("runctest: runc %s %s: %v: %s", args[2], c.ID, err, out)
	}
}

// runc runs one runc command against the container's state root.
func (c *Container) runc(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "runc", append([]string{"--root", c.root}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.Bytes(), fmt.Errorf("runc %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return out.Bytes(), nil
}

// Result is what one Exec did.
type Result struct {
	Code           int
	Stdout, Stderr string
}

func (r Result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", r.Code, r.Stdout, r.Stderr)
}

// Exec runs argv in the container (`runc exec`) with env added to its
// environment, and returns its exit code and output. A command that cannot
// be started fails the test; a non-zero exit does not.
func (c *Container) Exec(env []string, argv ...string) Result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	args := []string{"--root", c.root, "exec"}
	for _, e := range env {
		args = append(args, "--env", e)
	}
	args = append(append(args, c.ID), argv...)
	cmd := exec.CommandContext(ctx, "runc", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := Result{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ctx.Err() == nil:
		res.Code = ee.ExitCode()
	default:
		c.t.Fatalf("runctest: runc exec %s %v: %v\n%s", c.ID, argv, err, res)
	}
	return res
}

// Begin starts the process of a container made with Options.Created (`runc
// start`).
func (c *Container) Begin() {
	c.t.Helper()
	if _, err := c.runc(context.Background(), "start", c.ID); err != nil {
		c.t.Fatalf("runctest: %v", err)
	}
}

// Signal sends sig to the container's first process (`runc kill`).
func (c *Container) Signal(sig syscall.Signal) error {
	_, err := c.runc(context.Background(), "kill", c.ID, strconv.Itoa(int(sig)))
	return err
}

// Status is the container's state as runc reports it (created, running,
// stopped), or "" when runc knows no such container.
func (c *Container) Status() specs.ContainerState {
	out, err := c.runc(context.Background(), "state", c.ID)
	if err != nil {
		return ""
	}
	var st specs.State
	if json.Unmarshal(out, &st) != nil {
		return ""
	}
	return st.Status
}

// Pid is the host pid of the container's first process (runc state), created
// or running.
func (c *Container) Pid() int {
	c.t.Helper()
	out, err := c.runc(context.Background(), "state", c.ID)
	if err != nil {
		c.t.Fatalf("runctest: %v", err)
	}
	var st specs.State
	if err := json.Unmarshal(out, &st); err != nil {
		c.t.Fatalf("runctest: runc state %s: %v: %s", c.ID, err, out)
	}
	if (st.Status != specs.StateRunning && st.Status != specs.StateCreated) || st.Pid <= 0 {
		c.t.Fatalf("runctest: container %s is %s (pid %d), want created or running", c.ID, st.Status, st.Pid)
	}
	return st.Pid
}

// CgroupDirs returns the container's cgroup directories that exist now, one
// per hierarchy that has it.
func (c *Container) CgroupDirs() []string {
	dirs, _ := filepath.Glob(filepath.Join(CgroupRoot, "*", c.Cgroup))
	if _, err := os.Stat(filepath.Join(CgroupRoot, c.Cgroup)); err == nil {
		dirs = append(dirs, filepath.Join(CgroupRoot, c.Cgroup))
	}
	return dirs
}

// remove kills and deletes the container and removes what runc may have
// left of its cgroups; every step runs whatever the one before did.
func (c *Container) remove() {
	ctx := context.Background()
	if _, err := c.runc(ctx, "kill", c.ID, strconv.Itoa(int(syscall.SIGKILL))); err != nil && !strings.Contains(err.Error(), "not running") {
		c.t.Logf("runctest: %v", err)
	}
	var err error
	for range 50 {
		if _, err = c.runc(ctx, "delete", "--force", c.ID); err == nil || strings.Contains(err.Error(), "does not exist") {
			err = nil
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		c.t.Errorf("runctest: %v", err)
	}
	for _, d := range c.CgroupDirs() {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			c.t.Errorf("runctest: remove cgroup %s: %v", d, err)
		}
	}
}
