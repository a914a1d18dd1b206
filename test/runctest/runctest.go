package runctest

import (
	"bytes"
	"context"
	"debug/elf"
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

// Busybox is Debian's busybox-static, the one binary of every rootfs.
const Busybox = "/bin/busybox"

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
	root   string // runc --root
	t      testing.TB
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
	dir := t.TempDir()
	id := fmt.Sprintf("alk-runc-%d-%d", os.Getpid(), seq.Add(1))
	c := &Container{ID: id, Bundle: filepath.Join(dir, "bundle"), Cgroup: "/" + id, root: filepath.Join(dir, "state"), t: t}
	if err := c.writeBundle(opts); err != nil {
		t.Fatalf("runctest: bundle: %v", err)
	}
	// Registered before runc starts anything, so a failed start is cleaned up
	// too; it runs before t.TempDir's own removal (cleanups run last first).
	t.Cleanup(c.remove)
	log, err := os.Create(filepath.Join(dir, "container.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	// The container's stdio is a file, not a pipe: a detached container keeps
	// it open, and a pipe would hold runc's Wait until the container ends.
	args := []string{"--root", c.root, "run", "--detach", "--bundle", c.Bundle, id}
	if opts.Created {
		args = []string{"--root", c.root, "create", "--bundle", c.Bundle, id}
	}
	cmd := exec.CommandContext(ctx, "runc", args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, log, log
	if err := cmd.Run(); err != nil {
		out, _ := os.ReadFile(log.Name())
		t.Fatalf("runctest: runc %s %s: %v: %s", args[2], id, err, out)
	}
	return c
}

// checkStatic fails unless path is an ELF executable with no interpreter: a
// rootfs holds nothing else, so a dynamic busybox could not start in it.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked, want a static busybox", path)
		}
	}
	return nil
}

// writeBundle makes the rootfs and config.json.
func (c *Container) writeBundle(opts Options) error {
	rootfs := filepath.Join(c.Bundle, "rootfs")
	for _, d := range []string{"bin", "etc", "proc", "sys", "dev", "tmp", "root"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return err
		}
	}
	if err := copyFile(Busybox, filepath.Join(rootfs, "bin", "busybox")); err != nil {
		return err
	}
	applets, err := exec.Command(Busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("busybox --list: %w", err)
	}
	for _, a := range strings.Fields(string(applets)) {
		if a == "busybox" || strings.Contains(a, "/") {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", a)); err != nil {
			return err
		}
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":  "root:x:0:\n",
		"etc/hosts":  "127.0.0.1 localhost\n",
	}
	for p, content := range opts.Files {
		files[p] = content
	}
	for p, content := range files {
		dst := filepath.Join(rootfs, filepath.Clean("/"+p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, []byte(content), 0o644); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(c.spec(opts), "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.Bundle, "config.json"), b, 0o644)
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

// spec is the container's config: root in the container, the capabilities
// runc's own default spec keeps (no CAP_NET_ADMIN or CAP_NET_RAW: a process
// holding them could remove an attached namespace's rules), no new
// privileges, and small memory and pids limits in its own cgroup.
func (c *Container) spec(opts Options) *specs.Spec {
	args := opts.Args
	if len(args) == 0 {
		args = []string{"sleep", "600"}
	}
	caps := []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"}
	memory := int64(64 << 20)
	nsList := []specs.LinuxNamespace{
		{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
		{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace, Path: opts.NetNS},
	}
	return &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Args: args,
			Env:  []string{"PATH=/bin", "HOME=/root"},
			Cwd:  "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}},
			NoNewPrivileges: true,
		},
		Root:     &specs.Root{Path: "rootfs"},
		Hostname: c.ID,
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "size=16m"}},
		},
		Linux: &specs.Linux{
			Namespaces:  nsList,
			CgroupsPath: c.Cgroup,
			Resources: &specs.LinuxResources{
				Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
				Memory:  &specs.LinuxMemory{Limit: &memory},
				Pids:    &specs.LinuxPids{Limit: 64},
			},
			MaskedPaths:   []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/sys/firmware"},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
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
	if _, err := c.runc(ctx, "kill", c.ID, strconv.Itoa(int(syscall.SIGKILL))); err != nil {
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
