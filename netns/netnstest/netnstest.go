package netnstest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

var seq atomic.Uint64

// pid36 is this process's pid in base 36: short enough for 15-character link names.
var pid36 = strconv.FormatInt(int64(os.Getpid()), 36)

// LinkName returns a unique interface name "alk<pid36>x<n><suffix>" (at most 15
// characters for a one-character suffix).
func LinkName(suffix string) string {
	return fmt.Sprintf("alk%sx%s%s", pid36, strconv.FormatUint(seq.Add(1), 36), suffix)
}

// SandboxID returns a unique sandbox id "p<pid>-<tag>-<n>", so its namespace is
// airlock-p<pid>-<tag>-<n>.
func SandboxID(tag string) string {
	return fmt.Sprintf("p%d-%s-%d", os.Getpid(), tag, seq.Add(1))
}

// NSName returns a unique namespace name "alk<pid36>x<n>-<tag>".
func NSName(tag string) string {
	return fmt.Sprintf("alk%sx%s-%s", pid36, strconv.FormatUint(seq.Add(1), 36), tag)
}

var (
	sandboxRE = regexp.MustCompile(`^airlock-p([0-9]+)-`)
	poolRE    = regexp.MustCompile(`^airlock-pool-([0-9]+)-`)
	alkRE     = regexp.MustCompile(`^alk([0-9a-z]+)x`)
)

// ownerPid returns the pid encoded in a name this package (or the netns pool)
// made, or 0.
func ownerPid(name string) int {
	if m := sandboxRE.FindStringSubmatch(name); m != nil {
		p, _ := strconv.Atoi(m[1])
		return p
	}
	if m := poolRE.FindStringSubmatch(name); m != nil {
		p, _ := strconv.Atoi(m[1])
		return p
	}
	if m := alkRE.FindStringSubmatch(name); m != nil {
		p, _ := strconv.ParseInt(m[1], 36, 64)
		return int(p)
	}
	return 0
}

func alive(pid int) bool {
	if pid == os.Getpid() {
		return true
	}
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// RemoveStale deletes namespaces under runDir and links in the calling
// namespace whose names carry the pid of a process that no longer runs. Names
// without a pid (another engineer's, or production ones) are never touched. It
// also removes state files (stateDir/<id>.json) of removed sandboxes. It returns
// what it removed.
func RemoveStale(runDir, stateDir string) []string {
	var removed []string
	entries, _ := os.ReadDir(runDir)
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "airlock-") && !strings.HasPrefix(name, "alk") {
			continue
		}
		pid := ownerPid(name)
		if pid == 0 || alive(pid) {
			continue
		}
		path := runDir + "/" + name
		_ = unix.Unmount(path, unix.MNT_DETACH)
		if err := os.Remove(path); err == nil {
			removed = append(removed, path)
		}
		if id, ok := strings.CutPrefix(name, "airlock-"); ok && stateDir != "" {
			_ = os.Remove(stateDir + "/" + id + ".json")
		}
	}
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if !strings.HasPrefix(name, "alk") {
				continue
			}
			pid := ownerPid(name)
			if pid == 0 || alive(pid) {
				continue
			}
			if exec.Command("ip", "link", "delete", name).Run() == nil {
				removed = append(removed, "link "+name)
			}
		}
	}
	return removed
}
