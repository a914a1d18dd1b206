package hostcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
)

// ProbeResult is what the user-namespace probe found.
type ProbeResult struct {
	// Err: the namespaces could not be made (the child never ran).
	Err string `json:"error,omitempty"`
	// Lo: lo came up inside; LoErr says why not.
	Lo    bool   `json:"lo"`
	LoErr string `json:"lo_error,omitempty"`
	// IPTables maps each installed backend (legacy, nft) to "" when it
	// listed a table inside the namespace, else its error.
	IPTables map[string]string `json:"iptables"`
}

// probeTimeout bounds one probe.
const probeTimeout = 10 * time.Second

// ProbeUserns runs exe args in a new user namespace (this process's uid and
// gid mapped to 0) owning a new network namespace; the child is expected to
// call ProbeChild. Made by an unprivileged process, it is the real test of
// what the rootless mode needs.
func ProbeUserns(ctx context.Context, exe string, args ...string) (ProbeResult, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		// Setgroups is denied to an unprivileged user's gid map.
		GidMappingsEnableSetgroups: false,
		Pdeathsig:                  syscall.SIGKILL,
	}
	res, err := runProbe(cmd)
	if err != nil {
		return ProbeResult{Err: err.Error()}, nil
	}
	return res, nil
}

// ProbeAs runs exe args as uid and gid (from root, for `doctor --user`);
// the child is expected to run ProbeUserns itself and print its result, so
// the namespaces are made by the user, not by root.
func ProbeAs(ctx context.Context, exe string, uid, gid int, args ...string) (ProbeResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}},
		Pdeathsig:  syscall.SIGKILL,
	}
	return runProbe(cmd)
}

func runProbe(cmd *exec.Cmd) (ProbeResult, error) {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Dir = "/"
	if err := cmd.Run(); err != nil {
		msg := err.Error()
		if s := firstLine(errb.Bytes()); s != "" {
			msg += ": " + s
		}
		return ProbeResult{}, fmt.Errorf("%s", msg)
	}
	var res ProbeResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return ProbeResult{}, fmt.Errorf("probe output: %w", err)
	}
	return res, nil
}

// ProbeChild is the probe's side inside the namespaces: it brings lo up,
// checks it answers, lists a table with each installed iptables backend,
// and writes the ProbeResult as JSON to w.
func ProbeChild(ctx context.Context, w io.Writer) error {
	res := ProbeResult{IPTables: map[string]string{}}
	if err := loUp(); err != nil {
		res.LoErr = err.Error()
	} else {
		res.Lo = true
	}
	// iptables-legacy takes /run/xtables.lock, which the namespace's root
	// (the user outside) may not create: a lock of its own.
	lockDir, err := os.MkdirTemp("", "airlock-doctor-")
	if err == nil {
		defer os.RemoveAll(lockDir)
	}
	for _, b := range []string{"legacy", "nft"} {
		bin := "iptables-" + b
		if _, err := exec.LookPath(bin); err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, probeTimeout/2)
		cmd := exec.CommandContext(cctx, bin, "-w", "-t", "nat", "-n", "-L", "OUTPUT")
		cmd.Env = append(os.Environ(), "XTABLES_LOCKFILE="+filepath.Join(lockDir, "xtables.lock"))
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			res.IPTables[b] = fmt.Sprintf("%v %s", err, firstLine(out))
		} else {
			res.IPTables[b] = ""
		}
	}
	return json.NewEncoder(w).Encode(res)
}

// loUp brings lo up and proves it carries a connection.
func loUp() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen on lo: %w", err)
	}
	defer ln.Close()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
	if err != nil {
		return fmt.Errorf("connect on lo: %w", err)
	}
	return c.Close()
}
