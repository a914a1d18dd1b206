package sandboxd

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompData lays out struct seccomp_data for x/net/bpf's VM, which loads words
// big-endian: each 32-bit field is written big-endian where the kernel would read
// it native-endian, so the filter sees the same values.
func seccompData(arch, nr uint32, args ...uint32) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], nr)
	binary.BigEndian.PutUint32(b[4:], arch)
	for i, a := range args {
		binary.BigEndian.PutUint32(b[16+8*i:], a)
	}
	return b
}

func TestSeccompFilter(t *testing.T) {
	raw, err := seccompProgram(false)
	if err != nil {
		t.Fatal(err)
	}
	insts, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("disassemble failed")
	}
	vm, err := bpf.NewVM(insts)
	if err != nil {
		t.Fatal(err)
	}
	const x86 = unix.AUDIT_ARCH_X86_64
	cases := []struct {
		name string
		data []byte
		want uint32
	}{
		{"read allowed", seccompData(x86, unix.SYS_READ), retAllow},
		{"execve allowed", seccompData(x86, unix.SYS_EXECVE), retAllow},
		{"i386 killed", seccompData(unix.AUDIT_ARCH_I386, unix.SYS_READ), retKill},
		{"x32 killed", seccompData(x86, x32SyscallBit|unix.SYS_READ), retKill},
		{"mount", seccompData(x86, unix.SYS_MOUNT), retEPERM},
		{"fsopen", seccompData(x86, unix.SYS_FSOPEN), retEPERM},
		{"ptrace", seccompData(x86, unix.SYS_PTRACE), retEPERM},
		{"io_uring_setup", seccompData(x86, unix.SYS_IO_URING_SETUP), retEPERM},
		{"unshare", seccompData(x86, unix.SYS_UNSHARE), retEPERM},
		{"clone3 nosys", seccompData(x86, unix.SYS_CLONE3), retNOSYS},
		{"clone thread", seccompData(x86, unix.SYS_CLONE, unix.CLONE_VM|unix.CLONE_THREAD|unix.CLONE_FS), retAllow},
		{"clone newuser", seccompData(x86, unix.SYS_CLONE, unix.CLONE_NEWUSER|uint32(unix.SIGCHLD)), retEPERM},
		{"clone newnet", seccompData(x86, unix.SYS_CLONE, unix.CLONE_NEWNET), retEPERM},
		{"socket unix", seccompData(x86, unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM), retAllow},
		{"socket inet cloexec", seccompData(x86, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC), retAllow},
		{"socket inet6 dgram", seccompData(x86, unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM), retAllow},
		{"socket inet raw", seccompData(x86, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW|unix.SOCK_NONBLOCK), retEPERM},
		{"socket packet", seccompData(x86, unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_DGRAM), retEPERM},
		{"socket vsock", seccompData(x86, unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM), retEPERM},
		{"socket netlink", seccompData(x86, unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW), retEPERM},
		{"socketpair unix", seccompData(x86, unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_STREAM), retAllow},
		{"socketpair netlink", seccompData(x86, unix.SYS_SOCKETPAIR, unix.AF_NETLINK, unix.SOCK_DGRAM), retEPERM},
		{"openat2 nosys", seccompData(x86, unix.SYS_OPENAT2), retNOSYS},
		{"setrlimit (prlimit64 self)", seccompData(x86, unix.SYS_PRLIMIT64, 0, unix.RLIMIT_NOFILE, 0x7ffe0000, 0), retAllow},
		{"getrlimit of another", seccompData(x86, unix.SYS_PRLIMIT64, 42, unix.RLIMIT_NOFILE, 0, 0), retAllow},
		{"prlimit64 another, new limit", seccompData(x86, unix.SYS_PRLIMIT64, 42, unix.RLIMIT_NOFILE, 0x7ffe0000, 0), retEPERM},
		{"chmod 0755", seccompData(x86, unix.SYS_CHMOD, 0, 0o755), retAllow},
		{"chmod setuid", seccompData(x86, unix.SYS_CHMOD, 0, 0o4755), retEPERM},
		{"chmod setgid", seccompData(x86, unix.SYS_CHMOD, 0, 0o2755), retEPERM},
		{"chmod sticky", seccompData(x86, unix.SYS_CHMOD, 0, 0o1777), retAllow},
		{"fchmod setuid", seccompData(x86, unix.SYS_FCHMOD, 3, 0o4700), retEPERM},
		{"fchmodat setuid", seccompData(x86, unix.SYS_FCHMODAT, 0, 0, 0o4755), retEPERM},
		{"fchmodat 0644", seccompData(x86, unix.SYS_FCHMODAT, 0, 0, 0o644), retAllow},
		{"fchmodat2 setgid", seccompData(x86, unix.SYS_FCHMODAT2, 0, 0, 0o2755), retEPERM},
		{"creat setuid", seccompData(x86, unix.SYS_CREAT, 0, 0o4755), retEPERM},
		{"mknod setuid", seccompData(x86, unix.SYS_MKNOD, 0, unix.S_IFREG|0o4755), retEPERM},
		{"mknodat fifo", seccompData(x86, unix.SYS_MKNODAT, 0, 0, unix.S_IFIFO|0o644), retAllow},
		{"open create setuid", seccompData(x86, unix.SYS_OPEN, 0, unix.O_CREAT|unix.O_WRONLY, 0o4755), retEPERM},
		{"open create 0644", seccompData(x86, unix.SYS_OPEN, 0, unix.O_CREAT|unix.O_WRONLY, 0o644), retAllow},
		{"open read, junk mode", seccompData(x86, unix.SYS_OPEN, 0, unix.O_RDONLY, 0o4755), retAllow},
		{"openat create setgid", seccompData(x86, unix.SYS_OPENAT, 0, 0, unix.O_CREAT|unix.O_RDWR, 0o2755), retEPERM},
		{"openat tmpfile setuid", seccompData(x86, unix.SYS_OPENAT, 0, 0, unix.O_TMPFILE|unix.O_RDWR, 0o4755), retEPERM},
		{"openat read", seccompData(x86, unix.SYS_OPENAT, 0, 0, unix.O_RDONLY, 0), retAllow},
		{"openat create 0755", seccompData(x86, unix.SYS_OPENAT, 0, 0, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o755), retAllow},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := vm.Run(tc.data)
			if err != nil {
				t.Fatal(err)
			}
			if uint32(got) != tc.want {
				t.Errorf("got %#x, want %#x", uint32(got), tc.want)
			}
		})
	}
	// A new limit at an address whose low 32 bits are 0 is still a new limit.
	high := seccompData(x86, unix.SYS_PRLIMIT64, 42, unix.RLIMIT_NOFILE, 0, 0)
	binary.BigEndian.PutUint32(high[16+8*2+4:], 1)
	if got, _ := vm.Run(high); uint32(got) != retEPERM {
		t.Errorf("prlimit64 another, new limit above 4 GiB: got %#x, want EPERM", uint32(got))
	}
	for _, s := range deniedSyscalls {
		if got, _ := vm.Run(seccompData(x86, s.nr)); uint32(got) != retEPERM {
			t.Errorf("%s: got %#x, want EPERM", s.name, uint32(got))
		}
	}
	// The files stage's filter differs only in letting openat2 through.
	raw2, err := seccompProgram(true)
	if err != nil {
		t.Fatal(err)
	}
	insts2, _ := bpf.Disassemble(raw2)
	files, err := bpf.NewVM(insts2)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		want := tc.want
		if tc.name == "openat2 nosys" {
			want = retAllow
		}
		if got, _ := files.Run(tc.data); uint32(got) != want {
			t.Errorf("files stage filter, %s: got %#x, want %#x", tc.name, uint32(got), want)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"defaults", func(*Config) {}, ""},
		{"bad mode", func(c *Config) { c.CgroupMode = "v3" }, "cgroup_mode"},
		{"low uid", func(c *Config) { c.UIDBase = 10 }, "uid_base"},
		{"parent path", func(c *Config) { c.CgroupParent = "a/b" }, "cgroup_parent"},
		{"relative exe", func(c *Config) { c.Exe = "airlock" }, "exe"},
		{"home at top", func(c *Config) { c.Home = "/sandbox" }, "home"},
		{"tiny memory", func(c *Config) { c.Limits.Memory = 1 }, "limits.memory"},
		{"bad io device", func(c *Config) { c.Limits.IO = []IOLimit{{Device: "sda"}} }, "limits.io"},
		{"relative hidden", func(c *Config) { c.HiddenPaths = []string{"etc"} }, "hidden_paths"},
		{"unknown controller", func(c *Config) { c.AllowMissingControllers = []string{"hugetlb"} }, "allow_missing_controllers"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c Config
			tc.mod(&c)
			c.applyDefaults()
			err := c.validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !contains(err.Error(), tc.want)) {
				t.Errorf("got %v, want error naming %q", err, tc.want)
			}
		})
	}
	specs := []struct {
		spec Spec
		want string
	}{
		{Spec{}, "argv"},
		{Spec{Argv: []string{"x"}, Workspace: "rel"}, "workspace"},
		{Spec{Argv: []string{"x"}, Env: []string{"NOEQUALS"}}, "env"},
		{Spec{Argv: []string{"x"}, Hidden: []string{"rel"}}, "hidden"},
	}
	for _, s := range specs {
		if err := s.spec.validate(); err == nil || !contains(err.Error(), s.want) {
			t.Errorf("spec %+v: got %v, want error naming %q", s.spec, err, s.want)
		}
	}
}

func TestExitStatus(t *testing.T) {
	cases := []struct {
		r    ExecResult
		want int
	}{
		{ExecResult{ExitCode: 3}, 3},
		{ExecResult{Signal: 15}, 143},
		{ExecResult{Signal: 9, OOMKilled: true}, 137},
		{ExecResult{Signal: 9, TimedOut: true, OOMKilled: true}, 124},
	}
	for _, tc := range cases {
		if got := tc.r.ExitStatus(); got != tc.want {
			t.Errorf("%+v: got %d, want %d", tc.r, got, tc.want)
		}
	}
}

func TestDedupeEnv(t *testing.T) {
	got := dedupeEnv([]string{"A=1", "B=2", "A=3"})
	if len(got) != 2 || got[0] != "A=3" || got[1] != "B=2" {
		t.Errorf("got %v, want [A=3 B=2]", got)
	}
}

func contains(s, sub string) bool { return len(sub) == 0 || indexOf(s, sub) >= 0 }

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}
