package sandboxd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Limits and counters of a sandbox's cgroup.
//
// v2: memory.max with memory.swap.max=0, cpu.max, pids.max, io.max; counters from
// memory.events, memory.peak, pids.events and cpu.stat.
//
// v1: memory.limit_in_bytes plus memory.memsw.limit_in_bytes at the same value, so
// swap is no escape; where the kernel lacks memsw (swap accounting off) swappiness is
// set to 0, which keeps anonymous memory out of swap except under global pressure,
// and the log says so. cpu.cfs_quota_us, pids.max, blkio.throttle.*. There is no v1
// io weight file on kernels built without CFQ/BFQ weights, so only throttles are
// offered. Counters from memory.oom_control, memory.max_usage_in_bytes,
// pids.events and cpuacct.usage.

// The pids limit must leave init room: init makes a thread for every job, and
// a Go program whose thread cannot be made aborts (the sandbox with it). The
// sandbox's cgroup gets Limits.Pids plus initPidsOverhead; the sandbox's own
// processes get Limits.Pids: on v1 in the jobs child of the pids cgroup,
// where init moves each job's thread before it forks (a thread can have a v1
// cgroup of its own; the child's limit is one more, for init's spare job
// thread that waits there, spareThreads); on v2, where a domain cgroup holds whole processes, as
// RLIMIT_NPROC of the sandbox's uid, which no other process has. On v2 the
// cgroup's pids.events then counts only init running out, so PidsLimitHit
// is not reported there (a threaded pids subtree would give it).

// spareThreads is how many of init's threads wait in the v1 jobs child for
// their job (init_jobs_linux.go); its limit is Limits.Pids plus them.
const spareThreads = 1

// cpuPeriod is the CFS period (µs) both hierarchies' quotas are written against.
const cpuPeriod = 100000

// limitWriter writes one run's limits into a cgroup and collects the warnings
// for limits that are not enforced or weakened.
type limitWriter struct {
	cg       *cgroup
	warnings []string
	// The values both hierarchies write; jobsPids goes to the v1 jobs child.
	mem, pids, jobsPids string
	quota               int64
}

// apply writes the limits. warnings name each limit that is not enforced because
// its controller is missing and allowed missing, or weakened (v1 without memsw).
func (cg *cgroup) apply(l Limits) (warnings []string, err error) {
	if cg.m.none {
		return nil, nil // rlimits only (rootless.go)
	}
	quota := int64(l.CPUs * cpuPeriod)
	if quota < 1000 {
		quota = 1000
	}
	w := &limitWriter{cg: cg, quota: quota,
		mem:  strconv.FormatInt(l.Memory, 10),
		pids: strconv.FormatInt(l.Pids+initPidsOverhead, 10), jobsPids: strconv.FormatInt(l.Pids+spareThreads, 10)}
	if cg.v2 {
		err = w.applyV2(l)
	} else {
		err = w.applyV1(l)
	}
	return w.warnings, err
}

// unenforced records a limit whose controller c is missing: a warning when c is
// allowed missing, an error naming it otherwise.
func (w *limitWriter) unenforced(c, what string) error {
	if !w.cg.m.allowMissing[c] {
		return fmt.Errorf("sandboxd: cgroup %s controller missing: cannot enforce %s", c, what)
	}
	w.warnings = append(w.warnings, fmt.Sprintf("%s controller missing: %s NOT enforced (allow_missing_controllers)", c, what))
	return nil
}

// LimitError is a limit the kernel refused when it was written into the
// sandbox's cgroup (EINVAL for a value out of its range, EBUSY for a memory
// limit below what the cgroup already uses): the limit asked for is at
// fault, not the host. Limit is the Limits field: memory, cpus, pids or io.
type LimitError struct {
	Limit string
	File  string // the cgroup file
	Value string // what was written
	Err   error
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("sandboxd: cgroup %s=%s: %v", e.File, e.Value, e.Err)
}

func (e *LimitError) Unwrap() error { return e.Err }

// limitOf names the Limits field a cgroup file holds.
func limitOf(file string) string {
	switch {
	case strings.HasPrefix(file, "memory."):
		return "memory"
	case strings.HasPrefix(file, "cpu."):
		return "cpus"
	case strings.HasPrefix(file, "pids."):
		return "pids"
	}
	return "io"
}

func (w *limitWriter) set(dir, file, v string) error {
	p := filepath.Join(dir, file)
	if err := w.cg.m.write(p, v); err != nil {
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EBUSY) {
			return &LimitError{Limit: limitOf(file), File: p, Value: v, Err: err}
		}
		return fmt.Errorf("sandboxd: cgroup %s=%s: %w", p, v, err)
	}
	return nil
}

// applyV2 writes memory.max, memory.swap.max, cpu.max, pids.max and io.max.
func (w *limitWriter) applyV2(l Limits) error {
	m, d := w.cg.m, w.cg.dirs[""]
	if m.have["memory"] {
		if err := w.set(d, "memory.max", w.mem); err != nil {
			return err
		}
		if err := w.set(d, "memory.swap.max", "0"); err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				return err
			}
			if m.swapActive {
				return fmt.Errorf("sandboxd: cgroup memory.swap.max missing (swap accounting off) while swap is on: "+
					"memory would escape into swap; enable swap accounting or turn swap off: %w", err)
			}
			w.warnings = append(w.warnings, "memory.swap.max missing (no swap accounting), harmless while no swap device is on")
		}
	} else if err := w.unenforced("memory", "memory limit "+w.mem); err != nil {
		return err
	}
	if m.have["cpu"] {
		if err := w.set(d, "cpu.max", fmt.Sprintf("%d %d", w.quota, cpuPeriod)); err != nil {
			return err
		}
	} else if err := w.unenforced("cpu", fmt.Sprintf("cpu quota %g", l.CPUs)); err != nil {
		return err
	}
	if err := w.applyPids(d); err != nil {
		return err
	}
	if len(l.IO) > 0 && !m.have["io"] {
		return w.unenforced("io", "limits.io")
	}
	for _, io := range l.IO {
		line := io.Device
		for _, kv := range []struct {
			k string
			v uint64
		}{{"rbps", io.ReadBPS}, {"wbps", io.WriteBPS}, {"riops", io.ReadIOPS}, {"wiops", io.WriteIOPS}} {
			if kv.v > 0 {
				line += fmt.Sprintf(" %s=%d", kv.k, kv.v)
			}
		}
		if err := w.set(d, "io.max", line); err != nil {
			return err
		}
	}
	return nil
}

// applyV1 writes the memory (with memsw or swappiness), cpu (CFS), pids and
// blkio throttle files, each in its controller's hierarchy.
func (w *limitWriter) applyV1(l Limits) error {
	m := w.cg.m
	if m.have["memory"] {
		md := w.cg.dirs["memory"]
		if err := w.set(md, "memory.limit_in_bytes", w.mem); err != nil {
			return err
		}
		if err := w.set(md, "memory.memsw.limit_in_bytes", w.mem); err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				return err
			}
			w.warnings = append(w.warnings, "memory.memsw.limit_in_bytes missing (swapaccount off): using swappiness=0, swap can still absorb memory under global pressure")
			if err := w.set(md, "memory.swappiness", "0"); err != nil {
				return err
			}
		}
	} else if err := w.unenforced("memory", "memory limit "+w.mem); err != nil {
		return err
	}
	if m.have["cpu"] {
		cd := w.cg.dirs["cpu"]
		if err := w.set(cd, "cpu.cfs_period_us", strconv.Itoa(cpuPeriod)); err != nil {
			return err
		}
		if err := w.set(cd, "cpu.cfs_quota_us", strconv.FormatInt(w.quota, 10)); err != nil {
			return err
		}
	} else if err := w.unenforced("cpu", fmt.Sprintf("cpu quota %g", l.CPUs)); err != nil {
		return err
	}
	if err := w.applyPids(w.cg.dirs["pids"]); err != nil {
		return err
	}
	if w.cg.jobs != "" {
		if err := w.set(w.cg.jobs, "pids.max", w.jobsPids); err != nil {
			return err
		}
	}
	if len(l.IO) == 0 {
		return nil
	}
	if !m.have["io"] {
		return w.unenforced("io", "limits.io (v1 blkio)")
	}
	bd := w.cg.dirs["blkio"]
	for _, io := range l.IO {
		for _, kv := range []struct {
			f string
			v uint64
		}{{"blkio.throttle.read_bps_device", io.ReadBPS}, {"blkio.throttle.write_bps_device", io.WriteBPS},
			{"blkio.throttle.read_iops_device", io.ReadIOPS}, {"blkio.throttle.write_iops_device", io.WriteIOPS}} {
			if kv.v == 0 {
				continue
			}
			if err := w.set(bd, kv.f, fmt.Sprintf("%s %d", io.Device, kv.v)); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyPids writes pids.max in dir (the same file in both hierarchies).
func (w *limitWriter) applyPids(dir string) error {
	if w.cg.m.have["pids"] {
		return w.set(dir, "pids.max", w.pids)
	}
	return w.unenforced("pids", "pids limit "+w.pids+" (RLIMIT_NPROC stays as a backstop)")
}

// jobsPids reads the task count and limit of the cgroup the sandbox's jobs
// are in (the v1 jobs child, else the sandbox's cgroup) and how many tasks
// below the limit a new job needs: 1 in the jobs child (its thread), 4 in a
// cgroup shared with init (init makes the thread, see pidsReserve). ok is
// false without a pids controller or when they cannot be read.
func (cg *cgroup) jobsPids() (current, max, reserve int64, ok bool) {
	if !cg.m.have["pids"] {
		return 0, 0, 0, false
	}
	d, reserve := cg.dirs[""], int64(pidsReserve)
	switch {
	case cg.jobs != "":
		d, reserve = cg.jobs, 1
	case !cg.v2:
		d = cg.dirs["pids"]
	}
	current, err := readInt(filepath.Join(d, "pids.current"))
	if err != nil {
		return 0, 0, 0, false
	}
	if max, err = readInt(filepath.Join(d, "pids.max")); err != nil {
		return 0, 0, 0, false // "max": unlimited
	}
	return current, max, reserve, true
}

// oomKills reads the cgroup's OOM kill counter (0 without a memory
// controller or when unreadable).
func (cg *cgroup) oomKills() int64 {
	if !cg.m.have["memory"] {
		return 0
	}
	if cg.v2 {
		n, _ := readKeyed(filepath.Join(cg.dirs[""], "memory.events"), "oom_kill")
		return n
	}
	n, _ := readKeyed(filepath.Join(cg.dirs["memory"], "memory.oom_control"), "oom_kill")
	return n
}

// usage reads the cgroup's counters. A counter whose controller is missing
// reads 0; pids without a pids controller is the number of processes.
//
// v2: cpu.stat usage_usec, memory.current, memory.peak (Linux >= 5.19),
// memory.events oom_kill, pids.current, pids.events max. v1: cpuacct.usage,
// memory.usage_in_bytes, memory.max_usage_in_bytes, memory.oom_control
// oom_kill, pids.current, pids.events max.
func (cg *cgroup) usage() (Usage, error) {
	if cg.m.none {
		return Usage{}, nil
	}
	var u Usage
	var errs []error
	get := func(path, key string) int64 {
		v, err := readKeyed(path, key)
		if err != nil {
			errs = append(errs, err)
		}
		return v
	}
	num := func(path string) int64 {
		v, err := readInt(path)
		if err != nil {
			errs = append(errs, err)
		}
		return v
	}
	m := cg.m
	memDir, pidsDir := cg.dirs[""], cg.dirs[""]
	if !cg.v2 {
		memDir, pidsDir = cg.dirs["memory"], cg.dirs["pids"]
	}
	if m.have["memory"] {
		if cg.v2 {
			u.OOMKills = get(filepath.Join(memDir, "memory.events"), "oom_kill")
			u.Memory = num(filepath.Join(memDir, "memory.current"))
			u.PeakMemory, _ = readInt(filepath.Join(memDir, "memory.peak")) // Linux >= 5.19
		} else {
			u.OOMKills = get(filepath.Join(memDir, "memory.oom_control"), "oom_kill")
			u.Memory = num(filepath.Join(memDir, "memory.usage_in_bytes"))
			u.PeakMemory = num(filepath.Join(memDir, "memory.max_usage_in_bytes"))
		}
	}
	if m.have["pids"] {
		u.PidsLimitHits = get(filepath.Join(pidsDir, "pids.events"), "max")
		if cg.jobs != "" {
			u.PidsLimitHits += get(filepath.Join(cg.jobs, "pids.events"), "max")
		}
		u.Pids = num(filepath.Join(pidsDir, "pids.current"))
	} else if ps, err := cg.pids(); err == nil {
		u.Pids = int64(len(ps))
	}
	if cg.v2 {
		u.CPU = time.Duration(get(filepath.Join(cg.dirs[""], "cpu.stat"), "usage_usec")) * time.Microsecond
	} else {
		u.CPU = time.Duration(num(filepath.Join(cg.dirs["cpuacct"], "cpuacct.usage")))
	}
	if err := errors.Join(errs...); err != nil {
		return u, fmt.Errorf("sandboxd: cgroup %s counters: %w", cg.name, err)
	}
	return u, nil
}
