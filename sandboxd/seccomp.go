package sandboxd

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Seccomp: a deny-list classic-BPF filter, assembled in Go so static builds work.
//
// Layout: check the architecture (anything but native x86_64, including x32 and the
// i386 int 0x80 entry, kills the process), then one two-instruction test per denied
// syscall, ENOSYS for clone3 and openat2, then the argument checks: setuid/setgid
// mode bits (chmod, open and mknod families), clone, prlimit64 on another process,
// socket and socketpair; then allow.
//
// AF_NETLINK is denied along with every family other than AF_UNIX, AF_INET and
// AF_INET6. glibc's getaddrinfo uses a NETLINK_ROUTE socket only for AI_ADDRCONFIG
// (__check_pf) and treats a failed socket() as "both IPv4 and IPv6 present", so name
// resolution keeps working (the root tests run curl and python's getaddrinfo); what
// the sandbox loses is interface enumeration, which it has no need for.

// seccomp_data offsets (include/uapi/linux/seccomp.h).
const (
	seccompOffNr   = 0
	seccompOffArch = 4
	seccompOffArg0 = 16 // low 32 bits on little-endian
	seccompOffArg1 = 24
	seccompOffArg2 = 32

	x32SyscallBit = 0x40000000

	retAllow = unix.SECCOMP_RET_ALLOW
	retKill  = unix.SECCOMP_RET_KILL_PROCESS
	retEPERM = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retNOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)

	// namespaceCloneFlags are the clone(2) flags that create namespaces.
	namespaceCloneFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
		unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

	sockTypeMask = 0xf
	sockPacket   = 10 // SOCK_PACKET, the obsolete packet type
)

// deniedSyscalls return EPERM. Each entry names why.
var deniedSyscalls = []struct {
	nr   uint32
	name string
}{
	{unix.SYS_MOUNT, "mount"},
	{unix.SYS_UMOUNT2, "umount2"},
	{unix.SYS_OPEN_TREE, "open_tree"},
	{unix.SYS_OPEN_TREE_ATTR, "open_tree_attr"},
	{unix.SYS_MOVE_MOUNT, "move_mount"},
	{unix.SYS_FSOPEN, "fsopen"},
	{unix.SYS_FSCONFIG, "fsconfig"},
	{unix.SYS_FSMOUNT, "fsmount"},
	{unix.SYS_FSPICK, "fspick"},
	{unix.SYS_MOUNT_SETATTR, "mount_setattr"},
	{unix.SYS_PIVOT_ROOT, "pivot_root"},
	{unix.SYS_CHROOT, "chroot"},
	{unix.SYS_UNSHARE, "unshare"},
	{unix.SYS_SETNS, "setns"},
	{unix.SYS_PTRACE, "ptrace"},
	{unix.SYS_PROCESS_VM_READV, "process_vm_readv"},
	{unix.SYS_PROCESS_VM_WRITEV, "process_vm_writev"},
	{unix.SYS_PROCESS_MADVISE, "process_madvise"},
	{unix.SYS_PIDFD_GETFD, "pidfd_getfd"},
	{unix.SYS_BPF, "bpf"},
	{unix.SYS_PERF_EVENT_OPEN, "perf_event_open"},
	{unix.SYS_USERFAULTFD, "userfaultfd"},
	{unix.SYS_IO_URING_SETUP, "io_uring_setup"},
	{unix.SYS_IO_URING_ENTER, "io_uring_enter"},
	{unix.SYS_IO_URING_REGISTER, "io_uring_register"},
	{unix.SYS_KEYCTL, "keyctl"},
	{unix.SYS_ADD_KEY, "add_key"},
	{unix.SYS_REQUEST_KEY, "request_key"},
	{unix.SYS_KEXEC_LOAD, "kexec_load"},
	{unix.SYS_KEXEC_FILE_LOAD, "kexec_file_load"},
	{unix.SYS_INIT_MODULE, "init_module"},
	{unix.SYS_FINIT_MODULE, "finit_module"},
	{unix.SYS_DELETE_MODULE, "delete_module"},
}

// modeSyscalls set a file's mode: the argument index of the mode and, for the open
// family, of the flags (-1: always a mode). The workspace is an idmapped mount whose
// files belong to its host owner (often root), so a setuid bit set there would make
// a setuid-root binary on the host. Denying the bits outright (as systemd's
// RestrictSUIDSGID does) is simpler than proving each mount nosuid for every reader.
var modeSyscalls = []struct {
	nr                uint32
	name              string
	flagsArg, modeArg int
}{
	{unix.SYS_CHMOD, "chmod", -1, 1},
	{unix.SYS_FCHMOD, "fchmod", -1, 1},
	{unix.SYS_FCHMODAT, "fchmodat", -1, 2},
	{unix.SYS_FCHMODAT2, "fchmodat2", -1, 2},
	{unix.SYS_CREAT, "creat", -1, 1},
	{unix.SYS_MKNOD, "mknod", -1, 1},
	{unix.SYS_MKNODAT, "mknodat", -1, 2},
	{unix.SYS_OPEN, "open", 1, 2},
	{unix.SYS_OPENAT, "openat", 2, 3},
}

// createFlags are the open flags that create a file: O_CREAT and __O_TMPFILE (the
// bit O_TMPFILE adds to O_DIRECTORY).
const createFlags = unix.O_CREAT | (unix.O_TMPFILE &^ unix.O_DIRECTORY)

// allowedSocketFamilies are the only address families socket(2) may create.
var allowedSocketFamilies = []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6}

// seccompProgram assembles the filter. allowOpenat2 lets openat2 through: the
// files stage resolves every path with it. It cannot be hijacked by the
// sandbox's code (see filesRealID) and clears setuid and setgid bits itself.
func seccompProgram(allowOpenat2 bool) ([]bpf.RawInstruction, error) {
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: seccompOffArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AUDIT_ARCH_X86_64, SkipTrue: 1},
		bpf.RetConstant{Val: retKill},
		bpf.LoadAbsolute{Off: seccompOffNr, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpBitsNotSet, Val: x32SyscallBit, SkipTrue: 1},
		bpf.RetConstant{Val: retKill},
	}
	for _, s := range deniedSyscalls {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: s.nr, SkipTrue: 1},
			bpf.RetConstant{Val: retEPERM})
	}
	// clone3 passes its flags in memory seccomp cannot read: ENOSYS makes glibc fall
	// back to clone(2), whose flags are checked below. openat2 likewise hides its
	// mode in a struct; callers fall back to openat, whose mode is checked.
	prog = append(prog,
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.SYS_CLONE3, SkipTrue: 1},
		bpf.RetConstant{Val: retNOSYS})
	if !allowOpenat2 {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.SYS_OPENAT2, SkipTrue: 1},
			bpf.RetConstant{Val: retNOSYS})
	}

	// No setuid or setgid file: each mode-setting call is denied when its mode has
	// S_ISUID or S_ISGID (for the open family only when it creates).
	for _, m := range modeSyscalls {
		blk := []bpf.Instruction{}
		if m.flagsArg >= 0 {
			blk = append(blk,
				bpf.LoadAbsolute{Off: seccompOffArg0 + 8*uint32(m.flagsArg), Size: 4},
				bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: createFlags, SkipFalse: 2})
		}
		blk = append(blk,
			bpf.LoadAbsolute{Off: seccompOffArg0 + 8*uint32(m.modeArg), Size: 4},
			bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: unix.S_ISUID | unix.S_ISGID, SkipTrue: 1},
			bpf.RetConstant{Val: retAllow},
			bpf.RetConstant{Val: retEPERM})
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: m.nr, SkipTrue: uint8(len(blk))})
		prog = append(prog, blk...)
	}

	// clone: deny any namespace flag. A is the syscall number on entry to each block.
	prog = append(prog,
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.SYS_CLONE, SkipTrue: 4},
		bpf.LoadAbsolute{Off: seccompOffArg0, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: namespaceCloneFlags, SkipTrue: 1},
		bpf.RetConstant{Val: retAllow},
		bpf.RetConstant{Val: retEPERM})

	// prlimit64 on another process with a new limit: init's job threads run
	// as the sandbox uid for a moment, and limits are process-wide, so the
	// sandbox could lower init's (setrlimit is prlimit64 on pid 0: allowed).
	prog = append(prog,
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.SYS_PRLIMIT64, SkipTrue: 8},
		bpf.LoadAbsolute{Off: seccompOffArg0, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipTrue: 4},
		bpf.LoadAbsolute{Off: seccompOffArg2, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 0, SkipTrue: 3},
		bpf.LoadAbsolute{Off: seccompOffArg2 + 4, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 0, SkipTrue: 1},
		bpf.RetConstant{Val: retAllow},
		bpf.RetConstant{Val: retEPERM})

	// socket and socketpair: family allow-list, then no raw or packet types.
	sock := []bpf.Instruction{bpf.LoadAbsolute{Off: seccompOffArg0, Size: 4}}
	n := len(allowedSocketFamilies)
	for i, fam := range allowedSocketFamilies {
		// Jump over the remaining family tests and the deny to the type check.
		sock = append(sock, bpf.JumpIf{Cond: bpf.JumpEqual, Val: fam, SkipTrue: uint8(n - i)})
	}
	sock = append(sock,
		bpf.RetConstant{Val: retEPERM},
		bpf.LoadAbsolute{Off: seccompOffArg1, Size: 4},
		bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: sockTypeMask},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SOCK_RAW, SkipTrue: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: sockPacket, SkipTrue: 1},
		bpf.RetConstant{Val: retAllow},
		bpf.RetConstant{Val: retEPERM})
	// socket block: test nr, then sock; socketpair likewise (A still holds nr).
	prog = append(prog, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.SYS_SOCKET, SkipTrue: uint8(len(sock))})
	prog = append(prog, sock...)
	prog = append(prog, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.SYS_SOCKETPAIR, SkipTrue: uint8(len(sock))})
	prog = append(prog, sock...)
	prog = append(prog, bpf.RetConstant{Val: retAllow})
	return bpf.Assemble(prog)
}

// seccompFilter is an assembled filter, ready to load.
type seccompFilter []unix.SockFilter

// newSeccompFilter assembles the filter (once per init: each job loads it).
func newSeccompFilter(allowOpenat2 bool) (seccompFilter, error) {
	raw, err := seccompProgram(allowOpenat2)
	if err != nil {
		return nil, fmt.Errorf("assemble seccomp filter: %w", err)
	}
	filters := make(seccompFilter, len(raw))
	for i, r := range raw {
		filters[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return filters, nil
}

// load installs the filter on the calling thread, which must be locked and
// must already have no_new_privs set. Only this thread is filtered: it is one of
// init's job threads, which forks the job (the child inherits the filter and
// keeps it through execve) and then exits.
func (f seccompFilter) load() error {
	fprog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(f)
	if errno != 0 {
		return fmt.Errorf("load seccomp filter: %w", errno)
	}
	return nil
}
