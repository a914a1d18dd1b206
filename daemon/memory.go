package daemon

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/oplog"
)

// What a daemon's start leaves behind. Starting compiles the policy (OPA),
// the content scanner's rules and the trust bundle and runs ~290 package
// initializers: the heap it grew for them stays mapped (the GC's headroom
// and the scavenger's slow return keep it), and every page of the 41 MB
// binary that code touched once stays resident. Once the daemon serves, its
// scanner is warm and its warm pool is full, settleMemory collects that
// garbage and returns the free heap to the kernel (debug.FreeOSMemory), and
// releaseText drops the binary's read-only pages from the resident set.
// It runs once, never per request.

// settleWait bounds the wait for the warm pool's first fill: a pool that
// cannot fill (a broken executor) does not keep the start's memory.
const settleWait = 30 * time.Second

// settleInBackground warms the scanner's rules off the start's path (the
// first scan would compile them itself), then settles the start's memory
// (settleMemory); Close ends the wait.
func (d *Daemon) settleInBackground() {
	var warm func() error
	if d.scanner != nil {
		warm = d.scanner.Warm
	}
	stop := make(chan struct{})
	d.closers = append(d.closers, func() error { close(stop); return nil })
	go d.settleMemory(warm, stop)
}

// settleMemory waits for the scanner's rules (warm, nil when there are
// none to compile) and the pool's first fill, then settles; stop ends the
// wait (the daemon closing).
func (d *Daemon) settleMemory(warm func() error, stop <-chan struct{}) {
	if warm != nil {
		_ = warm()
	}
	deadline := time.Now().Add(settleWait)
	for d.pool != nil && d.pool.depth() < d.pool.size && time.Now().Before(deadline) {
		select {
		case <-stop:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	select {
	case <-stop:
		return
	default:
	}
	debug.FreeOSMemory()
	n, err := releaseText()
	if err != nil {
		d.log.Debug("memory: the binary's pages were not released", oplog.ErrorKey, err)
		return
	}
	d.log.Debug("memory: start settled", "released_text_bytes", n)
}

// releaseText drops this process's pages of its own executable that are
// never written (code and read-only data) from its resident set, with
// MADV_DONTNEED. The pages stay in the page cache; the next access to one
// maps it again (a minor fault), so what stays resident is what the daemon
// uses from now on, not everything its start touched once. A mapping
// holding a private copy of any page (Anonymous above zero: relocations
// applied by a loader, a debugger's breakpoint) is left alone, since
// dropping it would lose the copy. It returns the bytes of the mappings
// advised.
func releaseText() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	raw, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	var total int64
	for _, m := range textMappings(raw, exe) {
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_DONTNEED); errno != 0 {
			return total, fmt.Errorf("madvise %#x-%#x: %w", m.start, m.end, errno)
		}
		total += int64(m.end - m.start)
	}
	return total, nil
}

// mapping is one address range of /proc/self/smaps.
type mapping struct{ start, end uintptr }

// textMappings parses smaps and returns the private mappings of the file
// exe that are not writable and whose Anonymous line says 0 kB (a mapping
// without one is left alone).
func textMappings(smaps []byte, exe string) []mapping {
	var out []mapping
	var cand *mapping // the mapping whose fields follow, when it qualifies
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m, perms, path, ok := mappingHeader(line); ok {
			cand = nil
			if len(perms) == 4 && perms[1] == '-' && perms[3] == 'p' && path == exe {
				cand = &m
			}
			continue
		}
		if v, ok := strings.CutPrefix(line, "Anonymous:"); ok && cand != nil {
			if strings.TrimSpace(v) == "0 kB" {
				out = append(out, *cand)
			}
			cand = nil
		}
	}
	return out
}

// mappingHeader parses a mapping's first line in smaps ("start-end perms
// offset dev inode [path]").
func mappingHeader(line string) (m mapping, perms, path string, ok bool) {
	f := strings.Fields(line)
	if len(f) < 5 || strings.HasSuffix(f[0], ":") {
		return m, "", "", false
	}
	lo, hi, found := strings.Cut(f[0], "-")
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	if !found || err1 != nil || err2 != nil || end <= start {
		return m, "", "", false
	}
	if len(f) >= 6 {
		path = strings.Join(f[5:], " ")
	}
	return mapping{uintptr(start), uintptr(end)}, f[1], path, true
}
