package hostcheck

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Mode is one way of running airlock.
type Mode string

// The modes a report covers.
const (
	ModeRoot       Mode = "root"        // airlock run / serve as root
	ModeRootless   Mode = "rootless"    // airlock run as an ordinary user
	ModeUserDaemon Mode = "user-daemon" // airlock serve --user
	ModeCNI        Mode = "cni"         // the CNI plugin and attach (root daemon)
)

// Modes lists every mode, in the order a report shows them.
var Modes = []Mode{ModeRoot, ModeRootless, ModeUserDaemon, ModeCNI}

// ParseMode reads a mode's name.
func ParseMode(s string) (Mode, error) {
	for _, m := range Modes {
		if string(m) == s {
			return m, nil
		}
	}
	names := make([]string, len(Modes))
	for i, m := range Modes {
		names[i] = string(m)
	}
	return "", fmt.Errorf("mode %q: must be one of %s", s, strings.Join(names, ", "))
}

// Status is a check's outcome.
type Status string

// A check's outcomes. Fail stops the check's modes; Warn names something
// weaker or slower than it could be; Skip is a check that does not apply
// here (a rootless probe when no user is named).
const (
	StatusOK   Status = "ok"
	StatusWarn Status = "warn"
	StatusFail Status = "fail"
	StatusSkip Status = "skip"
)

// Check is one line of the report.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	// Detail says what was found.
	Detail string `json:"detail"`
	// Fix says what to change (empty when nothing needs to).
	Fix string `json:"fix,omitempty"`
	// Modes are the modes this check is about: a Fail stops each of them.
	Modes []Mode `json:"modes"`
	// needed: skipped, its modes are not checked at all (the probe).
	needed bool
}

// Report is what Run found.
type Report struct {
	// Mode is the mode asked about; OK says whether it works.
	Mode Mode `json:"mode"`
	OK   bool `json:"ok"`
	// Works says, for every mode, whether no check stops it; a mode whose
	// essential check could not run (the rootless probe, as root without
	// --user) is Unchecked and does not work.
	Works     map[Mode]bool `json:"works"`
	Unchecked []Mode        `json:"unchecked,omitempty"`
	Checks    []Check       `json:"checks"`
}

// works reports whether no check fails for m; checked is false when an
// essential check of m was skipped.
func (r Report) works(m Mode) (works, checked bool) {
	works, checked = true, true
	for _, c := range r.Checks {
		if !slices.Contains(c.Modes, m) {
			continue
		}
		if c.Status == StatusFail {
			works = false
		}
		if c.Status == StatusSkip && c.needed {
			checked = false
		}
	}
	return works && checked, checked
}

// Host is what the checks read. Zero fields take the real host's (Defaults).
type Host struct {
	// Proc, Sys, Etc and Boot are the roots of /proc, /sys, /etc and /boot.
	Proc, Sys, Etc, Boot string
	// EUID is the checking process's effective uid.
	EUID int
	// User, UID and GID name the user rootless mode is checked for; UID < 0
	// means none (root asked without --user): the rootless checks skip.
	User     string
	UID, GID int
	// Self says the checking process is that user (its own probe, its own
	// cgroup in Proc/self/cgroup).
	Self bool
	// LookPath finds a tool (exec.LookPath).
	LookPath func(string) (string, error)
	// Run runs a command and returns its combined output (iptables as root).
	Run func(ctx context.Context, name string, args ...string) ([]byte, error)
	// Probe makes a user and network namespace as the user (ProbeUserns);
	// nil skips the probe.
	Probe func(ctx context.Context) (ProbeResult, error)
	// NoFile returns RLIMIT_NOFILE.
	NoFile func() (soft, hard uint64, err error)
	// Writable reports whether the checking user may create files in dir.
	Writable func(dir string) error
	// AuditDir is the root daemon's audit directory; UserAuditDir the
	// per-user daemon's.
	AuditDir, UserAuditDir string
	// UserRuntimeDir is where the per-user daemon's socket directory goes
	// ($XDG_RUNTIME_DIR, else /run/user/UID): it must be the user's and
	// writable by nobody else.
	UserRuntimeDir string
	// TrustStore is the system CA bundle sandboxes are given.
	TrustStore string
	// CNIDirs are where a runtime looks for CNI plugins.
	CNIDirs []string
}

// Defaults fills the zero fields of h with the real host's.
func (h Host) Defaults() Host {
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&h.Proc, "/proc")
	def(&h.Sys, "/sys")
	def(&h.Etc, "/etc")
	def(&h.Boot, "/boot")
	def(&h.TrustStore, "/etc/ssl/certs/ca-certificates.crt")
	if h.CNIDirs == nil {
		h.CNIDirs = []string{"/opt/cni/bin", "/usr/lib/cni", "/usr/libexec/cni"}
	}
	if h.LookPath == nil {
		h.LookPath = exec.LookPath
	}
	if h.Run == nil {
		h.Run = func(ctx context.Context, name string, args ...string) ([]byte, error) {
			return exec.CommandContext(ctx, name, args...).CombinedOutput()
		}
	}
	if h.NoFile == nil {
		h.NoFile = func() (uint64, uint64, error) {
			var rl unix.Rlimit
			err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl)
			return rl.Cur, rl.Max, err
		}
	}
	if h.Writable == nil {
		h.Writable = func(dir string) error { return unix.Access(dir, unix.W_OK|unix.X_OK) }
	}
	return h
}

// Run checks h for every mode and reports on mode.
func Run(ctx context.Context, h Host, mode Mode) Report {
	h = h.Defaults()
	var cs []Check
	cs = append(cs, checkPrivilege(h))
	cs = append(cs, checkKernel(h)...)
	cs = append(cs, checkUsernsSysctls(h))
	cs = append(cs, checkProbe(ctx, h)...)
	cs = append(cs, checkSubIDs(h))
	cs = append(cs, checkCgroup(h)...)
	cs = append(cs, checkIPTables(ctx, h))
	cs = append(cs, checkNoFile(h))
	cs = append(cs, checkTrustStore(h))
	cs = append(cs, checkAuditDirs(h)...)
	cs = append(cs, checkRuntimeDir(h))
	cs = append(cs, checkCNI(h))
	r := Report{Mode: mode, Checks: cs, Works: map[Mode]bool{}}
	for _, m := range Modes {
		w, checked := r.works(m)
		r.Works[m] = w
		if !checked {
			r.Unchecked = append(r.Unchecked, m)
		}
	}
	r.OK = r.Works[mode]
	return r
}

// Text is the report for a person: one line per check (status, name, what
// was found, and after "->" what to change), then one line saying which
// modes work.
func (r Report) Text() string {
	var b strings.Builder
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "%-4s  %-18s %s", strings.ToUpper(string(c.Status)), c.Name, c.Detail)
		if c.Fix != "" {
			fmt.Fprintf(&b, " -> %s", c.Fix)
		}
		b.WriteByte('\n')
	}
	var modes []string
	for _, m := range Modes {
		s := string(m) + ": works"
		switch {
		case slices.Contains(r.Unchecked, m):
			s = string(m) + ": not checked"
		case !r.Works[m]:
			var why []string
			for _, c := range r.Checks {
				if c.Status == StatusFail && slices.Contains(c.Modes, m) {
					why = append(why, c.Name)
				}
			}
			s = string(m) + ": does not work (" + strings.Join(why, ", ") + ")"
		}
		if m == r.Mode {
			s = "[" + s + "]"
		}
		modes = append(modes, s)
	}
	fmt.Fprintf(&b, "modes: %s\n", strings.Join(modes, "; "))
	return b.String()
}

// readTrim reads a small file and trims it; ok is false when it is missing
// or unreadable.
func readTrim(path string) (string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}
