package sandboxd

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Jobs: an exec (a command) or the files stage, each started by init from a
// fresh locked thread (made ahead of it: jobThread) that first takes on the job's identity: a private
// working directory (CLONE_FS) and cgroup namespace, an audit session of its
// own (exec), the sandbox uid and gid, no capabilities, no_new_privs and the
// seccomp filter. All of it is per-thread state the forked child inherits and
// keeps through execve, while init's other threads stay root. The thread is
// never unlocked, so it exits with its goroutine and no other code ever runs
// on it. (A separate re-executed "exec stage" process used to do this; it cost
// a whole Go process start, ~7 ms, per command.)

// filesRealID is the real uid and gid of the files stage; its effective and
// saved ids are the sandbox's. A process whose real and effective ids differ
// is made non-dumpable at execve, and ptrace or /proc/PID/mem access needs all
// three of its uids to be the caller's: so code in the sandbox, running as the
// sandbox uid, cannot attach to the files stage or write its memory and make
// it use openat2 (which the sandbox's own filter refuses, because seccomp
// cannot see its mode argument) to create a setuid file. No host process and
// no sandbox runs as this id. It is (uid_t)-3.
const filesRealID = 1<<32 - 3

// jobSpec is one job: exactly one of exec and files is set.
type jobSpec struct {
	exec  *execRequest
	files *filesJob
}

// jobFailure is why a job could not be started: an exec_error (code 126 or
// 127: the command is missing or cannot be executed) or any other error.
type jobFailure struct {
	code int
	err  error
}

// A job thread is a fresh locked thread made for one job: moved into the
// jobs cgroup (v1 pids), whose limit is the sandbox's, and given a working
// directory and a cgroup namespace of its own (rooted there). Init keeps one
// spare made ahead of its job (once it is configured, while a pooled sandbox
// waits to be started, and after each job is forked), so a job does not wait
// for a new thread or for its cgroup move (see prepareJobThread). A job's thread is in the jobs cgroup before it forks either
// way: the job is born there. The spare counts against the jobs' pids limit
// while it waits, so that limit is one more than Limits.Pids (see
// cgroup_limits.go).
type jobThread struct {
	run chan func(prepared error) // the thread's one job
}

// newJobThread starts a job thread and prepares it; it runs the job it is
// then given, with the preparation's error, and exits with it.
func (s *initServer) newJobThread() *jobThread {
	t := &jobThread{run: make(chan func(error), 1)}
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		err := s.prepareJobThread()
		(<-t.run)(err)
	}()
	return t
}

// prepareJobThread is the part of a job thread's setup that is the same for
// every job.
func (s *initServer) prepareJobThread() error {
	if unix.Gettid() == unix.Getpid() {
		return errors.New("a job on init's main thread: refusing to drop its privileges")
	}
	// Into the jobs cgroup (v1 pids) first: the cgroup namespace below is
	// rooted there. "0" is the writing thread: for a thread moving itself
	// the kernel skips the global threadgroup lock (6.18 here), whose first
	// writer after a quiet spell waits for an RCU grace period (10-15 ms on
	// the development VM). With its tid written, a second exec soon after
	// the first waited that long for its spare's move.
	if s.jobsTasks >= 0 {
		if _, err := unix.Write(s.jobsTasks, []byte("0")); err != nil {
			return fmt.Errorf("move the job's thread into the jobs cgroup: %w", err)
		}
	}
	// Private working directory and cgroup namespace for this thread
	// (init's chdir would otherwise race with other jobs').
	if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("unshare fs and cgroup namespace: %w", err)
	}
	return nil
}

// spareLocked makes the next spare job thread unless one waits. s.mu is
// held; the sandbox is configured (jobsTasks is set).
func (s *initServer) spareLocked() {
	if s.spare == nil {
		s.spare = s.newJobThread()
	}
}

// startJob reserves the job's id and starts it on the spare job thread (or
// a new one when another job took it). It owns fds (the job's stdin, stdout
// and stderr).
func (s *initServer) startJob(seq uint64, id string, fds []int, fill func(*jobSpec)) {
	s.mu.Lock()
	if s.byID[id] != nil {
		s.mu.Unlock()
		closeFDs(fds)
		s.send(&message{Type: msgError, Seq: seq, Error: fmt.Sprintf("job %s exists", id)})
		return
	}
	j := &initJob{id: id}
	s.byID[id] = j
	st := s.start
	t := s.spare
	s.spare = nil
	s.mu.Unlock()
	if t == nil {
		t = s.newJobThread()
	}
	spec := &jobSpec{}
	fill(spec)
	t.run <- func(prepared error) {
		defer closeFDs(fds)
		s.runJob(seq, j, spec, st, fds, prepared)
		s.mu.Lock()
		s.spareLocked()
		s.mu.Unlock()
	}
}

// runJob runs on the job's thread (prepared: its preparation's error): it
// becomes the job and forks it, then registers it and reports it started,
// or reports why it could not.
func (s *initServer) runJob(seq uint64, j *initJob, spec *jobSpec, st *startRequest, fds []int, prepared error) {
	var session uint32
	pid, fail := func() (int, *jobFailure) {
		if prepared != nil {
			return 0, &jobFailure{err: prepared}
		}
		if spec.exec != nil {
			session = setAuditSession(s.cfg.UID)
		}
		s.mu.Lock() // until registered and reported: see initServer.mu
		pid, fail := s.becomeAndFork(spec, st, fds)
		if fail != nil {
			s.mu.Unlock()
			return 0, fail
		}
		j.pid = pid
		s.jobs[pid] = j
		s.send(&message{Type: msgStarted, Seq: seq, Started: &startedReply{PID: pid, Session: session}})
		s.mu.Unlock()
		select {
		case s.forked <- struct{}{}:
		default:
		}
		return pid, nil
	}()
	if fail == nil {
		return
	}
	_ = pid
	s.mu.Lock()
	delete(s.byID, j.id)
	s.mu.Unlock()
	if fail.code != 0 {
		// The command's stderr says why, as a shell would.
		_, _ = unix.Write(fds[2], []byte("airlock: "+fail.err.Error()+"\n"))
		s.send(&message{Type: msgExecError, Seq: seq, Code: fail.code, Error: fail.err.Error()})
		return
	}
	s.send(&message{Type: msgError, Seq: seq, Error: fail.err.Error()})
}

// becomeAndFork gives this thread the job's identity and forks the job. It
// runs with s.mu held: the rlimits it sets are process-wide.
func (s *initServer) becomeAndFork(spec *jobSpec, st *startRequest, fds []int) (int, *jobFailure) {
	setup := func(err error) (int, *jobFailure) { return 0, &jobFailure{err: err} }
	// The same for every job: a hard limit once lowered cannot be raised
	// without CAP_SYS_RESOURCE. (A files stage counts against filesRealID's
	// processes, host-wide: at least 98 files jobs may run at once.)
	if err := setRlimits(st.NoFile, uint64(st.FSize), uint64(st.NProc)); err != nil {
		return setup(err)
	}
	// A rootless sandbox mapped without a subordinate range has setgroups
	// denied in its user namespace (the kernel's rule for one-id maps): its
	// supplementary groups stay the user's, and no other real id is mapped.
	oneID := s.cfg.Rootless && s.cfg.UID == 0
	id := identity{uid: s.cfg.UID, gid: s.cfg.GID, ruid: s.cfg.UID, rgid: s.cfg.GID, keepGroups: oneID}
	if spec.files != nil && !s.cfg.Rootless {
		id.ruid, id.rgid = filesRealID, filesRealID
	}
	if err := dropPrivileges(id, s.lastCap); err != nil {
		return setup(err)
	}
	if spec.files != nil {
		return s.forkFiles(spec.files, fds)
	}
	x := spec.exec
	// As the sandbox uid; the working directory is this thread's own.
	if err := unix.Chdir(x.Dir); err != nil {
		return setup(fmt.Errorf("chdir %s: %w", x.Dir, err))
	}
	path, code, err := lookPath(x.Argv[0], x.Env)
	if err != nil {
		return 0, &jobFailure{code: code, err: err}
	}
	if err := s.execFilter.load(); err != nil {
		return setup(err)
	}
	pid, err := syscall.ForkExec(path, x.Argv, &syscall.ProcAttr{
		Env:   x.Env,
		Files: []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	switch {
	case errors.Is(err, unix.EAGAIN):
		return setup(fmt.Errorf("exec %s: the sandbox is at its process limit: %w", x.Argv[0], err))
	case errors.Is(err, unix.ENOENT):
		return 0, &jobFailure{code: 127, err: fmt.Errorf("exec %s: %w", x.Argv[0], err)}
	case err != nil:
		return 0, &jobFailure{code: 126, err: fmt.Errorf("exec %s: %w", x.Argv[0], err)}
	}
	return pid, nil
}

// forkFiles starts the files stage: this binary again, told its job on fd 3
// and given the root it works below as fd 4.
func (s *initServer) forkFiles(job *filesJob, fds []int) (int, *jobFailure) {
	setup := func(err error) (int, *jobFailure) { return 0, &jobFailure{err: err} }
	root := s.fs.homeRoot
	if job.Root == filesRootWorkspace {
		root = s.fs.wsRoot
	}
	if root < 0 {
		return setup(errors.New("this sandbox has no workspace"))
	}
	b, err := json.Marshal(job)
	if err != nil {
		return setup(err)
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return setup(fmt.Errorf("pipe for the files stage: %w", err))
	}
	defer unix.Close(p[0])
	// The job is a few hundred bytes (checkRelPath bounds the path): it fits
	// the pipe, so this write does not wait for the reader.
	_, err = unix.Write(p[1], b)
	unix.Close(p[1])
	if err != nil {
		return setup(fmt.Errorf("write the files job: %w", err))
	}
	if err := s.filesFilter.load(); err != nil {
		return setup(err)
	}
	pid, err := syscall.ForkExec("/proc/self/exe", append([]string{"airlock-files"}, s.cfg.InitArgs...), &syscall.ProcAttr{
		Env:   []string{envStage + "=" + stageFiles},
		Files: []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2]), uintptr(p[0]), uintptr(root)},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		return setup(fmt.Errorf("start the files stage: %w", err))
	}
	return pid, nil
}

// setAuditSession gives this thread, and every process it forks from now
// on, a fresh audit session: writing the login uid makes the kernel assign a
// new session id, and once set it can only change with CAP_AUDIT_CONTROL,
// which nothing in the sandbox has. The executor finds every process of an
// exec by it, including ones that left its process group and session. It
// returns 0 when the kernel has no audit support or refuses (then the
// executor falls back to the process group).
func setAuditSession(uid int) uint32 {
	fd, err := unix.Open("/proc/thread-self/loginuid", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	_, err = unix.Write(fd, []byte(strconv.Itoa(uid)))
	unix.Close(fd)
	if err != nil {
		return 0
	}
	// Raw reads: os.ReadFile would try to register the file with the
	// runtime's poller first (four more syscalls on every exec).
	fd, err = unix.Open("/proc/thread-self/sessionid", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	var b [16]byte
	k, err := unix.Read(fd, b[:])
	unix.Close(fd)
	if err != nil || k <= 0 {
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b[:k])), 10, 32)
	if err != nil || n == 0 || n == 1<<32-1 {
		return 0
	}
	return uint32(n)
}

// setRlimits sets the job's rlimits. They are process-wide: init gets them
// too, which it does not mind (its fds count against nofile). syscall's
// Setrlimit also stops ForkExec restoring Go's raised RLIMIT_NOFILE in the
// child.
func setRlimits(nofile, fsize, nproc uint64) error {
	for _, rl := range []struct {
		name string
		res  int
		v    uint64
	}{
		{"core", unix.RLIMIT_CORE, 0},
		{"nofile", unix.RLIMIT_NOFILE, nofile},
		{"fsize", unix.RLIMIT_FSIZE, fsize},
		{"nproc", unix.RLIMIT_NPROC, nproc},
	} {
		if err := syscall.Setrlimit(rl.res, &syscall.Rlimit{Cur: rl.v, Max: rl.v}); err != nil {
			return fmt.Errorf("setrlimit %s=%d: %w", rl.name, rl.v, err)
		}
	}
	return nil
}

// identity is a job's ids: effective and saved uid and gid, and real ones
// (the same, but for the files stage).
type identity struct {
	uid, gid, ruid, rgid int
	keepGroups           bool // setgroups is denied (rootless, one-id map)
}

// dropPrivileges gives the calling (locked) thread the job's identity: the
// ids, no capabilities in any set (lastCap: the kernel's highest, read once
// by init), no_new_privs.
func dropPrivileges(id identity, lastCap int) error {
	if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl keepcaps: %w", err)
	}
	for c := 0; c <= lastCap; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	// Raw syscalls: the identity changes for this thread only (Go's Setgroups,
	// Setresgid and Setresuid change every thread of init).
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 && !id.keepGroups {
		return fmt.Errorf("setgroups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(id.rgid), uintptr(id.gid), uintptr(id.gid)); e != 0 {
		return fmt.Errorf("setresgid %d: %w", id.gid, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(id.ruid), uintptr(id.uid), uintptr(id.uid)); e != 0 {
		return fmt.Errorf("setresuid %d: %w", id.uid, e)
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

// reap reaps every process that ends in the sandbox (init is PID 1: orphans
// are its children) and reports the exit of each job. It peeks at an exited
// child first (WNOWAIT), unregisters it under mu, and only then reaps it, so
// a signal sent under mu never reaches a reused pid.
func (s *initServer) reap() {
	for {
		pid, err := waitExited()
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ECHILD):
			<-s.forked // nothing to reap until something is forked
			continue
		case err != nil:
			fmt.Fprintf(os.Stderr, "airlock: sandbox init: waitid: %v\n", err)
			os.Exit(1) // the sandbox ends: its exits could not be reported
		}
		s.mu.Lock()
		j := s.jobs[pid]
		if j != nil {
			delete(s.jobs, pid)
			delete(s.byID, j.id)
		}
		var ws unix.WaitStatus
		var ru unix.Rusage
		_, werr := unix.Wait4(pid, &ws, 0, &ru)
		for errors.Is(werr, unix.EINTR) {
			_, werr = unix.Wait4(pid, &ws, 0, &ru)
		}
		s.mu.Unlock()
		if j == nil {
			continue
		}
		ev := &exitEvent{ID: j.id, UserUS: ru.Utime.Usec + ru.Utime.Sec*1e6, SystemUS: ru.Stime.Usec + ru.Stime.Sec*1e6, MaxRSSKB: ru.Maxrss}
		switch {
		case werr != nil:
			ev.Signal = int(unix.SIGKILL) // reaped elsewhere: never for a job
			fmt.Fprintf(os.Stderr, "airlock: sandbox init: wait4 %d: %v\n", pid, werr)
		case ws.Signaled():
			ev.Signal = int(ws.Signal())
		default:
			ev.Code = ws.ExitStatus()
		}
		s.send(&message{Type: msgExit, Exit: ev})
	}
}

// waitExited waits until a child has exited and returns its pid, leaving it
// a zombie (WNOWAIT).
func waitExited() (int, error) {
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		return 0, err
	}
	// si_pid follows si_signo, si_errno, si_code and padding (x86_64).
	pid := *(*int32)(unsafe.Add(unsafe.Pointer(&info), 16))
	return int(pid), nil
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
	for _, dir := range strings.Split(path, ":") {
		if dir == "" {
			continue
		}
		p := dir + "/" + argv0
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
