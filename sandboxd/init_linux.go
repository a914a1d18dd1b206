package sandboxd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// IsStage reports whether this process was started as the sandbox's init. A
// TestMain or main that can be re-executed calls InitMain when it is true.
func IsStage() bool {
	return os.Getenv(envStage) == stageInit
}

// InitMain runs the sandbox's init when the environment marker says so and exits. The
// hidden `airlock __sandbox-init` subcommand and the package's TestMain call it. It
// never returns.
func InitMain() {
	if IsStage() {
		os.Exit(runInit())
	}
	fmt.Fprintln(os.Stderr, "airlock: __sandbox-init is started by the executor only")
	os.Exit(2)
}

// runInit is PID 1 of the sandbox.
func runInit() int {
	if os.Getpid() != 1 {
		// Not started by the executor: touch nothing, not even its pipes.
		fmt.Fprintf(os.Stderr, "airlock: sandbox init: not PID 1 of a new PID namespace (pid %d): refusing to touch mounts\n", os.Getpid())
		return 2
	}
	status := os.NewFile(fdStatus, "status")
	report := func(ev event) {
		b, _ := json.Marshal(ev)
		_, _ = status.Write(append(b, '\n'))
	}
	var cfg initConfig
	cfgFile := os.NewFile(fdConfig, "config")
	dec := json.NewDecoder(cfgFile)
	if err := dec.Decode(&cfg); err != nil {
		report(event{Event: "setup_error", Error: "read init config: " + err.Error()})
		return 1
	}
	if err := checkIsolated(cfg.HostMountNS); err != nil {
		report(event{Event: "setup_error", Error: err.Error()})
		return 1
	}
	// Signals for the command are forwarded once it runs; until then, default.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)
	if err := setupSandbox(&cfg); err != nil {
		report(event{Event: "setup_error", Error: err.Error()})
		return 1
	}
	// The filesystem is built while the executor moves init into its cgroup
	// (v1); the command starts only once that is done and checked.
	if err := awaitGo(io.MultiReader(dec.Buffered(), cfgFile)); err != nil {
		report(event{Event: "setup_error", Error: err.Error()})
		return 1
	}
	pid, ee := startCommand(&cfg.Exec)
	if ee != nil {
		if ee.Stage == "exec" {
			report(event{Event: "exec_error", Error: ee.Error, Code: ee.Code})
		} else {
			report(event{Event: "setup_error", Error: ee.Error})
		}
		return 1
	}
	go func() {
		for s := range sigs {
			_ = unix.Kill(pid, s.(syscall.Signal))
		}
	}()
	report(event{Event: "started"})
	// Reap everything; when the command ends, kill the rest of the namespace.
	var final event
	mainDone := false
	for {
		var ws unix.WaitStatus
		p, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil { // ECHILD: nothing left
			break
		}
		if p == pid && !mainDone {
			mainDone = true
			final = event{Event: "exit"}
			if ws.Signaled() {
				final.Signal = int(ws.Signal())
			} else {
				final.Code = ws.ExitStatus()
			}
			// kill(-1) from PID 1 reaches every other process in the namespace.
			_ = unix.Kill(-1, unix.SIGKILL)
		}
	}
	if !mainDone {
		final = event{Event: "setup_error", Error: "command vanished without a wait status"}
	}
	report(final)
	return 0
}

// awaitGo waits for the executor's go message, the last thing on the config
// pipe. Anything else, or the pipe closing without it, means the command must
// not start.
func awaitGo(r io.Reader) error {
	b, err := io.ReadAll(io.LimitReader(r, 64))
	if err != nil {
		return fmt.Errorf("read go message: %w", err)
	}
	if strings.TrimSpace(string(b)) != goMessage {
		return fmt.Errorf("the executor did not let the command start (got %q)", b)
	}
	return nil
}

// startCommand starts the command from a thread of init that takes on the
// command's identity first: cgroup namespace, rlimits, the sandbox uid and gid,
// no capabilities, no_new_privs and the seccomp filter, all of which the forked
// child inherits and keeps through execve. Credentials, the capability sets,
// no_new_privs and seccomp are per thread, so init's other threads stay as they
// were; the thread is never unlocked, so it exits with its goroutine and no other
// code ever runs on it. (This replaces a second re-execution of the binary as an
// "exec stage", which cost a whole Go process start per sandbox.) It returns the
// command's pid once execve has succeeded.
func startCommand(cfg *execConfig) (int, *execError) {
	type started struct {
		pid int
		err *execError
	}
	ch := make(chan started, 1)
	go func() {
		runtime.LockOSThread()
		pid, err := becomeCommand(cfg)
		ch <- started{pid, err}
	}()
	r := <-ch
	return r.pid, r.err
}

// becomeCommand runs on startCommand's locked thread.
func becomeCommand(cfg *execConfig) (int, *execError) {
	setupErr := func(err error) (int, *execError) {
		return 0, &execError{Stage: "setup", Error: err.Error(), Code: 1}
	}
	execErr := func(code int, err error) (int, *execError) {
		fmt.Fprintf(os.Stderr, "airlock: %v\n", err)
		return 0, &execError{Stage: "exec", Error: err.Error(), Code: code}
	}
	if err := dropPrivileges(cfg); err != nil {
		return setupErr(err)
	}
	path, code, err := lookPath(cfg.Argv[0], cfg.Env)
	if err != nil {
		return execErr(code, err)
	}
	// Every fd but 0-2 closes at exec (init's config and status pipes included).
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return setupErr(fmt.Errorf("close_range: %w", err))
	}
	if err := loadSeccomp(); err != nil {
		return setupErr(err)
	}
	pid, err := syscall.ForkExec(path, cfg.Argv, &syscall.ProcAttr{
		Env:   cfg.Env,
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		code = 126
		if errors.Is(err, unix.ENOENT) {
			code = 127
		}
		return execErr(code, fmt.Errorf("exec %s: %w", cfg.Argv[0], err))
	}
	return pid, nil
}

// dropPrivileges gives the calling (locked) thread the command's identity.
func dropPrivileges(cfg *execConfig) error {
	// A cgroup namespace rooted at the sandbox's cgroup, for this thread and so for
	// the command (init was born before a v1 move).
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("unshare cgroup namespace: %w", err)
	}
	nproc := uint64(cfg.NProc)
	for _, rl := range []struct {
		name string
		res  int
		v    uint64
	}{
		{"core", unix.RLIMIT_CORE, 0},
		{"nofile", unix.RLIMIT_NOFILE, cfg.NoFile},
		{"fsize", unix.RLIMIT_FSIZE, uint64(cfg.FSize)},
		{"nproc", unix.RLIMIT_NPROC, nproc},
	} {
		// Process-wide: init gets them too, which it does not mind. syscall's
		// Setrlimit also stops ForkExec restoring Go's raised RLIMIT_NOFILE in
		// the child.
		if err := syscall.Setrlimit(rl.res, &syscall.Rlimit{Cur: rl.v, Max: rl.v}); err != nil {
			return fmt.Errorf("setrlimit %s=%d: %w", rl.name, rl.v, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl keepcaps: %w", err)
	}
	last, err := capLastCap()
	if err != nil {
		return err
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	// Raw syscalls: the identity changes for this thread only (Go's Setgroups,
	// Setresgid and Setresuid change every thread of init).
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(cfg.GID), uintptr(cfg.GID), uintptr(cfg.GID)); e != 0 {
		return fmt.Errorf("setresgid %d: %w", cfg.GID, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(cfg.UID), uintptr(cfg.UID), uintptr(cfg.UID)); e != 0 {
		return fmt.Errorf("setresuid %d: %w", cfg.UID, e)
	}
	// setuid cleared permitted and effective; inheritable survives it.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if cfg.Dir != "" {
		// As the sandbox uid; the working directory is init's too (shared by all
		// its threads), which init, having pivoted, does not use.
		if err := unix.Chdir(cfg.Dir); err != nil {
			return fmt.Errorf("chdir %s: %w", cfg.Dir, err)
		}
	}
	return nil
}

func capLastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("read cap_last_cap: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("parse cap_last_cap: %w", err)
	}
	return n, nil
}

// lookPath finds argv0 in the PATH of env as the (already unprivileged) caller.
func lookPath(argv0 string, env []string) (string, int, error) {
	if strings.Contains(argv0, "/") {
		return argv0, 0, nil
	}
	path := SandboxPath
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			path = v
		}
	}
	denied := ""
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, argv0)
		st, err := os.Stat(p)
		if err != nil || st.IsDir() {
			continue
		}
		if unix.Access(p, unix.X_OK) == nil {
			return p, 0, nil
		}
		denied = p
	}
	if denied != "" {
		return "", 126, fmt.Errorf("exec %s: permission denied", denied)
	}
	return "", 127, fmt.Errorf("exec %s: command not found in PATH", argv0)
}

// checkIsolated refuses to build a sandbox anywhere but in the fresh PID and
// mount namespaces the executor clones. init makes mounts private, pivots the
// root and masks /proc, /dev and /sys: run in the host's mount namespace (a
// stage marker leaked into some other process's environment, a clone flag
// lost), it would do all of that to the host. Regression: a broken start once
// pivoted the development machine's own root into a sandbox view.
func checkIsolated(hostMountNS [2]uint64) error {
	if os.Getpid() != 1 {
		return fmt.Errorf("not PID 1 of a new PID namespace (pid %d): refusing to touch mounts", os.Getpid())
	}
	var self unix.Stat_t
	if err := unix.Stat("/proc/self/ns/mnt", &self); err != nil {
		return fmt.Errorf("read own mount namespace: %w", err)
	}
	if hostMountNS[1] == 0 || (uint64(self.Dev) == hostMountNS[0] && self.Ino == hostMountNS[1]) {
		return errors.New("still in the executor's mount namespace: refusing to touch mounts")
	}
	return nil
}
