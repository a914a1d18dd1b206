package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// procs are the long-running processes (peers, daemons) this run started;
// stopAll ends each by its own process group id.
type procs struct {
	mu   sync.Mutex
	list []*exec.Cmd
}

// start runs argv in its own process group with output to logFile.
func (p *procs) start(logFile string, argv ...string) (*exec.Cmd, error) {
	out, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	out.Close()
	p.mu.Lock()
	p.list = append(p.list, cmd)
	p.mu.Unlock()
	return cmd, nil
}

// stop sends SIGTERM to cmd's group, waits up to 10 s, then SIGKILLs it.
func stop(cmd *exec.Cmd) {
	if cmd.Process == nil || cmd.ProcessState != nil {
		return
	}
	pid := cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-done
	}
}

func (p *procs) stopAll() {
	p.mu.Lock()
	list := p.list
	p.list = nil
	p.mu.Unlock()
	for i := len(list) - 1; i >= 0; i-- {
		stop(list[i])
	}
}

// waitTCP waits until addr accepts a connection.
func waitTCP(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not accept within %s: %w", addr, within, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freePort returns a loopback TCP port nothing listens on right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// terminate makes a cancelled command get SIGTERM (airlock run then tears
// its sandbox down) and SIGKILL only 20 s later.
func terminate(cmd *exec.Cmd) {
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
}

// output runs argv to completion (bounded by ctx) and returns stdout+stderr.
func output(ctx context.Context, timeout time.Duration, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	terminate(cmd)
	cmd.Env = pathEnv()
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err := cmd.Run()
	if err != nil {
		return b.String(), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, tail(b.String(), 800))
	}
	return b.String(), nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// rssKB reads VmRSS of pid in kB (0 if gone).
func rssKB(pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// openFDs is the number of descriptors pid has open (0 if unreadable).
func openFDs(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0
	}
	return len(ents)
}

// nofileSoft is pid's soft RLIMIT_NOFILE (0 if unreadable).
func nofileSoft(pid int) int {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				n, _ := strconv.Atoi(f[0])
				return n
			}
		}
	}
	return 0
}
