package daemon

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/netns"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/sandboxd"
)

// Bounds of what a request may ask for. Past them a value is absurd, not
// merely large, and is refused naming the field.
const (
	maxPids        = 1_000_000
	maxExecTimeout = 24 * time.Hour
	minMemory      = 4 << 20
	minTmpSize     = 4096
	maxLabels      = 64
	maxLabelKey    = 63
	maxLabelValue  = 256
	maxEnv         = 1024
	maxEnvEntry    = 128 << 10
	maxArgv        = 4096
	maxAllow       = 10_000
	maxPathLen     = 4096
)

// hostBounds are the machine's size, the ceiling of a sandbox's limits.
type hostBounds struct {
	memory int64
	cpus   int
	pids   int64 // sandboxd.MaxPids: pid_max and RLIMIT_NPROC's bound
	pidMax int64 // the kernel's pid_max
}

func readHostBounds() hostBounds {
	b := hostBounds{cpus: runtime.NumCPU(), pids: sandboxd.MaxPids()}
	if v, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		b.pidMax, _ = strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		b.memory = int64(si.Totalram) * int64(si.Unit)
	}
	return b
}

// createParams is a validated POST /v1/sandboxes (or the create half of POST
// /v1/run).
type createParams struct {
	labels      map[string]string
	limits      sandboxd.Limits
	resolved    api.ResolvedLimits
	workspace   string
	env         []string
	mode        string // as asked: "" is the daemon's
	shownMode   string // the mode in force
	allow       []string
	allowList   *policy.AllowList // allow, parsed by the policy's parser
	idleTimeout time.Duration
	maxLifetime time.Duration
	// secretBindings are the binding ids asked for; bindings what Attach
	// gave (set by createSandbox).
	secretBindings []string
	bindings       []api.SecretBinding
}

// validateCreate checks a create request of caller c against the host and
// the config.
func (d *Daemon) validateCreate(c caller, req *api.CreateSandboxRequest) (*createParams, *api.Error) {
	p := &createParams{labels: req.Labels, env: req.Env, allow: req.Allow}
	if e := validateLabels(req.Labels); e != nil {
		return nil, e
	}
	if e := validateEnv("env", req.Env); e != nil {
		return nil, e
	}
	var e *api.Error
	if p.limits, p.resolved, e = d.resolveLimits(req.Limits); e != nil {
		return nil, e
	}
	if req.Workspace != "" {
		if e := validateAbsPath("workspace", req.Workspace); e != nil {
			return nil, e
		}
		p.workspace = filepath.Clean(req.Workspace)
	}
	switch req.Mode {
	case "", string(policy.ModeEnforce), string(policy.ModeReport):
		p.mode, p.shownMode = req.Mode, req.Mode
		if p.shownMode == "" {
			p.shownMode = d.cfg.Policy.Mode
		}
	default:
		return nil, apiErr(api.CodeInvalidField, "mode", "mode: %q is not one of enforce, report (or empty for the daemon's %s)", req.Mode, d.cfg.Policy.Mode)
	}
	// Report lets what policy denies pass: only root may turn enforcement off.
	if p.shownMode == string(policy.ModeReport) && d.cfg.Policy.Mode != string(policy.ModeReport) && !c.root() {
		return nil, apiErr(api.CodeForbidden, "mode", "mode: report lets denied requests out; only root may ask for it on a daemon that enforces")
	}
	if p.allowList, e = parseAllow(req.Allow, c.root()); e != nil {
		return nil, e
	}
	if p.secretBindings, e = d.validateSecretBindings(req.SecretBindings); e != nil {
		return nil, e
	}
	sc := d.cfg.Sandbox
	p.maxLifetime = time.Duration(sc.MaxLifetime)
	if req.MaxLifetime != 0 {
		if e := durationIn("max_lifetime", req.MaxLifetime, config.MinSandboxTimeout, p.maxLifetime, "sandbox.max_lifetime"); e != nil {
			return nil, e
		}
		p.maxLifetime = time.Duration(req.MaxLifetime)
	}
	p.idleTimeout = min(time.Duration(sc.IdleTimeout), p.maxLifetime)
	if req.IdleTimeout != 0 {
		if e := durationIn("idle_timeout", req.IdleTimeout, config.MinSandboxTimeout, time.Duration(sc.MaxLifetime), "sandbox.max_lifetime"); e != nil {
			return nil, e
		}
		p.idleTimeout = time.Duration(req.IdleTimeout)
	}
	return p, nil
}

func durationIn(field string, v config.Duration, lo, hi time.Duration, hiName string) *api.Error {
	if time.Duration(v) < lo || time.Duration(v) > hi {
		return apiErr(api.CodeInvalidField, field, "%s: %s is not between %s and %s (%s)", field, v, lo, hiName, hi)
	}
	return nil
}

// resolveLimits fills a request's zero limits from the config and refuses
// absurd ones: more memory or tmpfs than the host has, more CPUs than it
// has, over a million tasks, an exec timeout over a day.
func (d *Daemon) resolveLimits(l api.Limits) (sandboxd.Limits, api.ResolvedLimits, *api.Error) {
	lim := execLimits(d.cfg.Limits)
	hb := d.host
	if l.Memory != 0 {
		if l.Memory < minMemory || (hb.memory > 0 && int64(l.Memory) > hb.memory) {
			return lim, api.ResolvedLimits{}, apiErr(api.CodeInvalidField, "limits.memory", "limits.memory: %s is not between 4M and the host's memory (%s)", l.Memory, config.Size(hb.memory))
		}
		lim.Memory = int64(l.Memory)
	}
	if l.CPUs != 0 {
		if !(l.CPUs >= 0.01 && l.CPUs <= float64(hb.cpus)) {
			return lim, api.ResolvedLimits{}, apiErr(api.CodeInvalidField, "limits.cpus", "limits.cpus: %v is not between 0.01 and the host's %d", l.CPUs, hb.cpus)
		}
		lim.CPUs = l.CPUs
	}
	if l.Pids != 0 {
		top := int64(maxPids)
		if hb.pids > 0 {
			top = min(top, hb.pids)
		}
		if l.Pids < 1 || l.Pids > top {
			return lim, api.ResolvedLimits{}, apiErr(api.CodeInvalidField, "limits.pids", "limits.pids: %d is not between 1 and %d (the host's bound: kernel.pid_max, RLIMIT_NPROC)", l.Pids, top)
		}
		lim.Pids = l.Pids
	}
	if l.TmpSize != 0 {
		if l.TmpSize < minTmpSize || (hb.memory > 0 && int64(l.TmpSize) > hb.memory) {
			return lim, api.ResolvedLimits{}, apiErr(api.CodeInvalidField, "limits.tmp_size", "limits.tmp_size: %s is not between 4096 bytes and the host's memory (%s)", l.TmpSize, config.Size(hb.memory))
		}
		lim.TmpSize = int64(l.TmpSize)
	}
	if l.ExecTimeout != 0 {
		if e := durationIn("limits.exec_timeout", l.ExecTimeout, time.Millisecond, maxExecTimeout, "a day"); e != nil {
			return lim, api.ResolvedLimits{}, e
		}
		lim.Timeout = time.Duration(l.ExecTimeout)
	}
	return lim, api.ResolvedLimits{MemoryBytes: lim.Memory, CPUs: lim.CPUs, Pids: lim.Pids, TmpSizeBytes: lim.TmpSize,
		ExecTimeoutMS: lim.Timeout.Milliseconds()}, nil
}

func validateLabels(labels map[string]string) *api.Error {
	if len(labels) > maxLabels {
		return apiErr(api.CodeInvalidField, "labels", "labels: %d labels, at most %d", len(labels), maxLabels)
	}
	for k, v := range labels {
		if k == "" || len(k) > maxLabelKey || strings.ContainsAny(k, "\x00=") {
			return apiErr(api.CodeInvalidField, "labels", "labels: name %q is not 1-%d characters without '=' or NUL", k, maxLabelKey)
		}
		if len(v) > maxLabelValue || strings.ContainsRune(v, 0) {
			return apiErr(api.CodeInvalidField, "labels."+k, "labels.%s: value over %d bytes or with a NUL", k, maxLabelValue)
		}
	}
	return nil
}

// validatePod checks an attach request's pod identity: each field at most
// api.MaxPodField bytes of printable text (they end up in policy input and
// on every audit record of the sandbox).
func validatePod(p *api.Pod) *api.Error {
	if p == nil {
		return nil
	}
	for _, f := range [...]struct {
		name, v, syntax string
		max             int
		ok              func(rune) bool
	}{
		// Kubernetes' own syntax, so a policy comparing pod.namespace with
		// "prod" can never be handed "prod " or "PROD": a namespace is a
		// DNS-1123 label, a name and a service account DNS-1123 subdomains,
		// a uid a UUID.
		{"namespace", p.Namespace, "a DNS-1123 label (lower-case letters, digits and '-')", 63, dns1123},
		{"name", p.Name, "a DNS-1123 subdomain (lower-case letters, digits, '-' and '.')", 253, dns1123Sub},
		{"uid", p.UID, "a UID (letters, digits and '-')", api.MaxPodField, uidRune},
		{"service_account", p.ServiceAccount, "a DNS-1123 subdomain (lower-case letters, digits, '-' and '.')", 253, dns1123Sub},
	} {
		if f.v == "" {
			continue
		}
		if len(f.v) > min(f.max, api.MaxPodField) || strings.IndexFunc(f.v, func(r rune) bool { return !f.ok(r) }) >= 0 ||
			!edge(f.v[0]) || !edge(f.v[len(f.v)-1]) {
			return apiErr(api.CodeInvalidField, "pod."+f.name, "pod.%s: %.80q is not %s of at most %d bytes", f.name, f.v, f.syntax, min(f.max, api.MaxPodField))
		}
	}
	return nil
}

func isAlnum(r rune) bool { return r >= 'a' && r <= 'z' || r >= '0' && r <= '9' }

// edge: a pod field starts and ends with a letter or digit.
func edge(b byte) bool { return isAlnum(rune(b)) || b >= 'A' && b <= 'Z' }

func dns1123(r rune) bool    { return isAlnum(r) || r == '-' }
func dns1123Sub(r rune) bool { return dns1123(r) || r == '.' }
func uidRune(r rune) bool    { return dns1123(r) || r >= 'A' && r <= 'Z' }

// netnsInbound checks an attach's inbound and turns it into netns's (the
// zero value, capture, for none). The error names the field at fault.
func netnsInbound(in *api.Inbound) (netns.Inbound, *api.Error) {
	if in == nil {
		return netns.Inbound{}, nil
	}
	out := netns.Inbound{Mode: netns.InboundMode(in.Mode), Ports: slices.Clone(in.Ports)}
	if err := out.Validate(); err != nil {
		field, _, _ := strings.Cut(err.Error(), ":")
		return netns.Inbound{}, apiErr(api.CodeInvalidField, field, "%v", err)
	}
	return out, nil
}

// apiInbound is in as the API shows it.
func apiInbound(in netns.Inbound) api.Inbound {
	return api.Inbound{Mode: string(in.Mode), Ports: slices.Clone(in.Ports)}
}

// clonePod is a copy of p (nil for none): the API's, policy's and the
// audit record's Pod are one type (identity.Pod), each holder its own copy.
func clonePod(p *api.Pod) *api.Pod {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

func validateEnv(field string, env []string) *api.Error {
	if len(env) > maxEnv {
		return apiErr(api.CodeInvalidField, field, "%s: %d entries, at most %d", field, len(env), maxEnv)
	}
	for i, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || len(kv) > maxEnvEntry || strings.ContainsRune(kv, 0) {
			return apiErr(api.CodeInvalidField, fmt.Sprintf("%s[%d]", field, i), "%s[%d]: %.40q is not KEY=VALUE (at most %d bytes, no NUL)", field, i, kv, maxEnvEntry)
		}
	}
	return nil
}

func validateAbsPath(field, p string) *api.Error {
	if !strings.HasPrefix(p, "/") || len(p) > maxPathLen || strings.ContainsRune(p, 0) {
		return apiErr(api.CodeInvalidPath, field, "%s: %.80q is not an absolute path (at most %d bytes, no NUL)", field, p, maxPathLen)
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return apiErr(api.CodeInvalidPath, field, "%s: %.80q has a '..' component", field, p)
		}
	}
	return nil
}

// execParams is a validated POST .../exec.
type execParams struct {
	argv, env []string
	cwd       string
	stdin     []byte
	stream    bool
	timeout   time.Duration
}

func validateExec(req *api.ExecRequest) (*execParams, *api.Error) {
	p := &execParams{argv: req.Argv, env: req.Env, cwd: req.Cwd, stream: req.StdinStream, timeout: time.Duration(req.Timeout)}
	if e := validateArgv(req.Argv); e != nil {
		return nil, e
	}
	if e := validateEnv("env", req.Env); e != nil {
		return nil, e
	}
	if req.Cwd != "" {
		if e := validateAbsPath("cwd", req.Cwd); e != nil {
			e.Code = api.CodeInvalidField
			return nil, e
		}
	}
	if req.Stdin != "" {
		if req.StdinStream {
			return nil, apiErr(api.CodeInvalidField, "stdin", "stdin: give the whole input or stdin_stream, not both")
		}
		b, err := base64.StdEncoding.DecodeString(req.Stdin)
		if err != nil {
			return nil, apiErr(api.CodeInvalidField, "stdin", "stdin: not base64 (standard encoding): %v", err)
		}
		p.stdin = b
	}
	if req.Timeout != 0 {
		if e := durationIn("timeout", req.Timeout, time.Millisecond, maxExecTimeout, "a day"); e != nil {
			return nil, e
		}
	}
	return p, nil
}

func validateArgv(argv []string) *api.Error {
	if len(argv) == 0 || argv[0] == "" {
		return apiErr(api.CodeInvalidField, "argv", "argv: missing command")
	}
	if len(argv) > maxArgv {
		return apiErr(api.CodeInvalidField, "argv", "argv: %d arguments, at most %d", len(argv), maxArgv)
	}
	for i, a := range argv {
		if strings.ContainsRune(a, 0) {
			return apiErr(api.CodeInvalidField, fmt.Sprintf("argv[%d]", i), "argv[%d]: contains NUL", i)
		}
	}
	return nil
}
