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

// IsStage reports whether this process was started as a sandbox stage (init or
// exec). A TestMain or main that can be re-executed calls InitMain when it is true.
func IsStage() bool {
	s := os.Getenv(envStage)
	return s == stageInit || s == stageExec
}

// InitMain runs the sandbox stage named by the environment marker and exits. The
// hidden `airlock __sandbox-init` subcommand and the package's TestMain call it. It
// never returns.
func InitMain() {
	switch os.Getenv(envStage) {
	case stageInit:
		os.Exit(runInit())
	case stageExec:
		os.Exit(runExec())
	}
	fmt.Fprintln(os.Stderr, "airlock: __sandbox-init is started by the executor only")
	os.Exit(2)
}

// runInit is PID 1 of the sandbox.
func runInit() int {
	status := os.NewFile(fdStatus, "status")
	report := func(ev event) {
		b, _ := json.Marshal(ev)
		_, _ = status.Write(append(b, '\n'))
	}
	var cfg initConfig
	if err := json.NewDecoder(os.NewFile(fdConfig, "config")).Decode(&cfg); err != nil {
		report(event{Event: "setup_error", Error: "read init config: " + err.Error()})
		return 1
	}
	// Signals for the command are forwarded once it runs; until then, default.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)
	if err := setupSandbox(&cfg); err != nil {
		report(event{Event: "setup_error", Error: err.Error()})
		return 1
	}
	pid, errR, err := startExecStage(&cfg)
	if err != nil {
		report(event{Event: "setup_error", Error: err.Error()})
		return 1
	}
	go func() {
		for s := range sigs {
			_ = unix.Kill(pid, s.(syscall.Signal))
		}
	}()
	// The exec stage closes errR's peer by exec (close-on-exec) or writes why not.
	msg, _ := io.ReadAll(io.LimitReader(errR, 64<<10))
	errR.Close()
	if len(msg) > 0 {
		var ee execError
		if json.Unmarshal(msg, &ee) != nil {
			ee = execError{Stage: "setup", Error: string(msg)}
		}
		if ee.Stage == "exec" {
			report(event{Event: "exec_error", Error: ee.Error, Code: ee.Code})
		} else {
			report(event{Event: "setup_error", Error: ee.Error})
		}
	} else {
		report(event{Event: "started"})
	}
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

func startExecStage(cfg *initConfig) (int, *os.File, error) {
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return 0, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return 0, nil, err
	}
	argv := append([]string{"/proc/self/exe"}, cfg.StageArgs...)
	pid, err := syscall.ForkExec("/proc/self/exe", argv, &syscall.ProcAttr{
		Env:   []string{envStage + "=" + stageExec},
		Files: []uintptr{0, 1, 2, cfgR.Fd(), errW.Fd()},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	cfgR.Close()
	errW.Close()
	if err != nil {
		cfgW.Close()
		errR.Close()
		return 0, nil, fmt.Errorf("start exec stage: %w", err)
	}
	if err := json.NewEncoder(cfgW).Encode(cfg.Exec); err != nil {
		cfgW.Close()
		errR.Close()
		return 0, nil, fmt.Errorf("send exec config: %w", err)
	}
	cfgW.Close()
	return pid, errR, nil
}

// runExec becomes the command: rlimits, uid/gid, no capabilities, no_new_privs,
// seccomp, close fds, execve. Every per-thread step happens on this locked thread,
// which is the one that calls execve.
func runExec() int {
	runtime.LockOSThread()
	errW := os.NewFile(fdStatus, "exec-error")
	fail := func(stage string, code int, err error) int {
		b, _ := json.Marshal(execError{Stage: stage, Error: err.Error(), Code: code})
		_, _ = errW.Write(b)
		if stage == "exec" {
			fmt.Fprintf(os.Stderr, "airlock: %v\n", err)
		}
		return code
	}
	var cfg execConfig
	if err := json.NewDecoder(os.NewFile(fdConfig, "config")).Decode(&cfg); err != nil {
		return fail("setup", 1, fmt.Errorf("read exec config: %w", err))
	}
	if err := dropPrivileges(&cfg); err != nil {
		return fail("setup", 1, err)
	}
	path, code, err := lookPath(cfg.Argv[0], cfg.Env)
	if err != nil {
		return fail("exec", code, err)
	}
	// Every fd but 0-2 closes at exec, including errW (the success signal).
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fail("setup", 1, fmt.Errorf("close_range: %w", err))
	}
	if err := loadSeccomp(); err != nil {
		return fail("setup", 1, err)
	}
	err = syscall.Exec(path, cfg.Argv, cfg.Env)
	code = 126
	if errors.Is(err, unix.ENOENT) {
		code = 127
	}
	return fail("exec", code, fmt.Errorf("exec %s: %w", cfg.Argv[0], err))
}

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
		if err := unix.Setrlimit(rl.res, &unix.Rlimit{Cur: rl.v, Max: rl.v}); err != nil {
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
	if err := syscall.Setgroups([]int{}); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(cfg.GID, cfg.GID, cfg.GID); err != nil {
		return fmt.Errorf("setresgid %d: %w", cfg.GID, err)
	}
	if err := syscall.Setresuid(cfg.UID, cfg.UID, cfg.UID); err != nil {
		return fmt.Errorf("setresuid %d: %w", cfg.UID, err)
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
