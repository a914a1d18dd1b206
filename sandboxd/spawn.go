package sandboxd

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// Spawning init: the airlock binary (Config.Exe) re-executed with the stage
// marker, in new mount, PID, UTS, IPC and cgroup namespaces, born inside the
// sandbox's network namespace (and, on v2, its cgroup). Its fds: 0 and 1
// /dev/null, 2 a pipe the executor logs, 3 the control socket, 4 the user
// namespace the host view is idmapped through.

// initStderrLog bounds how much of init's stderr goes to the log.
const initStderrLog = 64 << 10

// controlPair makes the control socketpair: the executor's end (with a send
// buffer that fits the largest message whole) and init's.
func controlPair() (own, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, controlSndBuf); err != nil {
		if err := unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, controlSndBuf); err != nil {
			closeFDs(fds[:])
			return nil, nil, fmt.Errorf("send buffer: %w", err)
		}
	}
	return os.NewFile(uintptr(fds[0]), "airlock-control"), os.NewFile(uintptr(fds[1]), "airlock-control-init"), nil
}

type spawned struct{ err error }

// spawn starts init and the channel to it. On an error nothing it opened
// stays open; init, if it started, is left to destroy.
func (s *Sandbox) spawn() error {
	own, child, err := controlPair()
	if err != nil {
		return fmt.Errorf("sandboxd: control socket for init: %w", err)
	}
	defer child.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		own.Close()
		return fmt.Errorf("sandboxd: pipe for init's stderr: %w", err)
	}
	defer errW.Close()
	err = s.startInit(child, errW)
	if err == nil {
		s.ch, err = newChannel(own, maxFromInit, maxToInit, "init")
		own = nil // closed by newChannel
		if err != nil {
			err = fmt.Errorf("sandboxd: %w", err)
		}
	}
	if err != nil {
		if own != nil {
			own.Close()
		}
		errR.Close()
		return err
	}
	go s.logInitStderr(errR)
	return nil
}

// startInit forks init from a thread of its own (forkInit) and waits until
// it runs.
func (s *Sandbox) startInit(ctl, errW *os.File) error {
	var cgFD, netnsFD *os.File
	if s.slot.cg.v2 {
		var err error
		if cgFD, err = s.slot.cg.openFD(); err != nil {
			return err
		}
		defer cgFD.Close()
	}
	if s.spec.NetNS != "" && s.e.cfg.Rootless == nil {
		var err error
		if netnsFD, err = os.Open(s.spec.NetNS); err != nil {
			return fmt.Errorf("sandboxd: netns %s: %w", s.spec.NetNS, err)
		}
		defer netnsFD.Close()
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return fmt.Errorf("sandboxd: open %s for init: %w", os.DevNull, err)
	}
	defer null.Close()
	started := make(chan spawned, 1)
	go s.forkInit(cgFD, netnsFD, ctl, null, errW, started)
	return (<-started).err
}

// forkInit runs on its own goroutine. This thread forks init: Pdeathsig fires
// when it exits, so it stays locked and alive until init is reaped, and is
// discarded afterwards (never unlocked), which also throws away the network
// namespace it joined. It closes s.gone when init is gone (or never ran).
func (s *Sandbox) forkInit(cgFD, netnsFD, ctl, null, errW *os.File, started chan<- spawned) {
	defer close(s.gone)
	runtime.LockOSThread()
	flags := uintptr(unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWCGROUP)
	rl := s.e.cfg.Rootless
	if rl != nil {
		flags = rl.cloneFlags()
	} else if netnsFD != nil {
		if err := unix.Setns(int(netnsFD.Fd()), unix.CLONE_NEWNET); err != nil {
			started <- spawned{err: fmt.Errorf("sandboxd: join netns %s: %w", s.spec.NetNS, err)}
			return
		}
	} else {
		flags |= unix.CLONE_NEWNET
	}
	exe, argv0 := s.e.cfg.Exe, s.e.cfg.Exe
	if s.e.initFile != nil {
		argv0 = InitBinary // not /proc/self/fd/N in ps
	}
	cmd := &exec.Cmd{
		Path:       exe,
		Args:       append([]string{argv0}, s.e.cfg.InitArgs...),
		Env:        []string{envStage + "=" + stageInit},
		Stdin:      null,
		Stdout:     null,
		Stderr:     errW,
		ExtraFiles: []*os.File{ctl, s.e.rootNS.f}, // fds 3, 4 (Prepare checked rootNS)
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: flags,
			Pdeathsig:  unix.SIGKILL,
		},
	}
	if rl != nil {
		cmd.ExtraFiles[1] = null // no host-view namespace: nothing is idmapped
	}
	if cgFD != nil {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(cgFD.Fd())
	}
	if err := cmd.Start(); err != nil {
		started <- spawned{err: fmt.Errorf("sandboxd: start init: %w", err)}
		return
	}
	s.init = cmd.Process
	if rl != nil {
		if err := rl.writeMaps(cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			started <- spawned{err: err}
			s.initErr = cmd.Wait()
			return
		}
	}
	started <- spawned{}
	s.initErr = cmd.Wait()
}

// logInitStderr logs what init writes on its stderr (its own failures; a
// job's output never goes there), up to initStderrLog bytes, and drains the
// rest.
func (s *Sandbox) logInitStderr(r *os.File) {
	defer close(s.stderrDone)
	defer r.Close()
	sc := bufio.NewScanner(io.LimitReader(r, initStderrLog))
	for sc.Scan() {
		s.lg.Warn("sandbox init", "stderr", sc.Text())
	}
	_, _ = io.Copy(io.Discard, r)
}
