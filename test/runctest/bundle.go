package runctest

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Busybox is Debian's busybox-static, the one binary of every rootfs.
const Busybox = "/bin/busybox"

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
