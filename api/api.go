package api

import (
	"time"

	"github.com/airlock-dev/airlock/identity"
	"github.com/airlock-dev/airlock/units"
)

// Version is the path prefix of every route.
const Version = "/v1"

// Limits are a sandbox's resource limits. In a request, zero fields take the
// daemon's configured defaults; sizes use the config file's spellings ("512M")
// or a number of bytes, durations Go's ("30s", "10m").
type Limits struct {
	Memory  units.Size `json:"memory,omitempty"`
	CPUs    float64    `json:"cpus,omitempty"`
	Pids    int64      `json:"pids,omitempty"`
	TmpSize units.Size `json:"tmp_size,omitempty"`
	// ExecTimeout is the default timeout of each exec (an exec may ask for its
	// own); for POST /v1/run it is the run's timeout.
	ExecTimeout units.Duration `json:"exec_timeout,omitempty"`
}

// CreateSandboxRequest is the body of POST /v1/sandboxes.
type CreateSandboxRequest struct {
	Labels map[string]string `json:"labels,omitempty"`
	Limits Limits            `json:"limits,omitempty"`
	// Workspace is a host directory bound read-write at the same path inside
	// the sandbox. Empty means an empty workspace in the sandbox's own tmpfs at
	// WorkspaceDir. A caller that is not root must own the directory.
	Workspace string `json:"workspace,omitempty"`
	// Env is KEY=VALUE entries every exec gets (an exec's own env wins).
	Env []string `json:"env,omitempty"`
	// Mode is "enforce" or "report" for this sandbox; empty means the daemon's.
	Mode string `json:"mode,omitempty"`
	// Allow adds hosts for this sandbox only, with --allow's meaning
	// ("host" = ports 443 and 80, "host:port", "*.x", "**.x"), each written
	// as enforced; for a caller other than root a wildcard stays inside one
	// registrable domain (*.example.com, **.api.example.com).
	Allow []string `json:"allow,omitempty"`
	// IdleTimeout ends the sandbox after this long with no exec running and no
	// API call for it; 0 means the daemon's default (sandbox.idle_timeout).
	IdleTimeout units.Duration `json:"idle_timeout,omitempty"`
	// MaxLifetime ends the sandbox this long after creation whatever it does;
	// 0 means the daemon's default (sandbox.max_lifetime).
	MaxLifetime units.Duration `json:"max_lifetime,omitempty"`
	// SecretBindings names bindings of the daemon's secrets file to attach
	// to this sandbox (their id; docs/CREDENTIALS.md, "Attaching bindings").
	// Only a binding with an attach block may be named: root may name any,
	// another caller only one whose attach.uids lists it. One refused name
	// refuses the sandbox. A value is never returned.
	SecretBindings []string `json:"secret_bindings,omitempty"`
}

// SecretBinding is a binding attached to a sandbox, as the API shows it:
// never a value, only the held secret's keyed fingerprint (as in audit
// records) when its source could be read at creation.
type SecretBinding struct {
	ID          string `json:"id"`
	Secret      string `json:"secret"`
	Host        string `json:"host"`
	Port        int    `json:"port"`
	Mode        string `json:"mode"`
	Fingerprint string `json:"fingerprint,omitempty"`
	Version     string `json:"version,omitempty"`
}

// WorkspaceDir is where an empty (tmpfs) workspace is mounted in a sandbox.
const WorkspaceDir = "/workspace"

// Sandbox states.
const (
	StateRunning  = "running"
	StateStopping = "stopping"
	StateStopped  = "stopped"
)

// Sandbox is what GET /v1/sandboxes/{id} returns (and POST /v1/sandboxes,
// DELETE /v1/sandboxes/{id}, each entry of GET /v1/sandboxes).
type Sandbox struct {
	ID     string            `json:"id"`
	State  string            `json:"state"`
	Owner  int               `json:"owner"` // uid of the caller that created it
	Labels map[string]string `json:"labels,omitempty"`
	// Limits in force: bytes, cores, tasks, milliseconds.
	Limits ResolvedLimits `json:"limits"`
	// Workspace is the host directory bound in, or "" for a tmpfs workspace;
	// WorkDir is the workspace's path inside the sandbox (the default cwd).
	Workspace string   `json:"workspace,omitempty"`
	WorkDir   string   `json:"workdir"`
	Mode      string   `json:"mode"`
	Allow     []string `json:"allow,omitempty"`
	// SecretBindings are the bindings attached at creation
	// (CreateSandboxRequest.SecretBindings).
	SecretBindings []SecretBinding `json:"secret_bindings,omitempty"`

	CreatedAt     time.Time `json:"created_at"`
	AgeMS         int64     `json:"age_ms"`
	IdleMS        int64     `json:"idle_ms"`
	IdleTimeoutMS int64     `json:"idle_timeout_ms"`
	MaxLifetimeMS int64     `json:"max_lifetime_ms"`
	// EndReason says why a stopped sandbox ended: deleted, idle_timeout,
	// max_lifetime, daemon_stopped, failed.
	EndReason string `json:"end_reason,omitempty"`

	ExecsRunning int64  `json:"execs_running"`
	ExecsTotal   int64  `json:"execs_total"`
	Usage        Usage  `json:"usage"`
	Egress       Egress `json:"egress"`
}

// ResolvedLimits are the limits in force, in plain units.
type ResolvedLimits struct {
	MemoryBytes   int64   `json:"memory_bytes"`
	CPUs          float64 `json:"cpus"`
	Pids          int64   `json:"pids"`
	TmpSizeBytes  int64   `json:"tmp_size_bytes"`
	ExecTimeoutMS int64   `json:"exec_timeout_ms"`
}

// Usage is a sandbox's resource use now (or at its end).
type Usage struct {
	CPUMS           float64 `json:"cpu_ms"`
	MemoryBytes     int64   `json:"memory_bytes"`
	MemoryPeakBytes int64   `json:"memory_peak_bytes"`
	Pids            int64   `json:"pids"`
	OOMKills        int64   `json:"oom_kills"`
}

// Egress counts a sandbox's audited decisions.
type Egress struct {
	Allowed int64 `json:"allowed"`
	// Denied counts the decisions that refused egress; WouldDeny those that
	// report mode let through although enforce mode would have refused them.
	Denied    int64 `json:"denied"`
	WouldDeny int64 `json:"would_deny"`
	// DeniedByKind counts denials by record kind (http, connect, tls, tcp,
	// dns, drop).
	DeniedByKind map[string]int64 `json:"denied_by_kind"`
	// Destinations are the sandbox's decisions by destination, as GET
	// /v1/summary's rows: errors, denials, would-denials, then allows, most
	// first; at most MaxEgressDestinations, DestinationsOmitted more.
	Destinations        []SummaryRow `json:"destinations,omitempty"`
	DestinationsOmitted int          `json:"destinations_omitted,omitempty"`
}

// MaxEgressDestinations bounds Egress.Destinations.
const MaxEgressDestinations = 50

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec.
type ExecRequest struct {
	Argv []string `json:"argv"`
	// Env is KEY=VALUE entries added after the sandbox's own.
	Env []string `json:"env,omitempty"`
	// Cwd is the working directory inside the sandbox; empty means WorkDir.
	Cwd string `json:"cwd,omitempty"`
	// Stdin is the whole standard input, base64 (std encoding). With
	// StdinStream, standard input is streamed instead by PUT
	// /v1/sandboxes/{id}/execs/{exec_id}/stdin; with neither it is empty.
	Stdin       string `json:"stdin,omitempty"`
	StdinStream bool   `json:"stdin_stream,omitempty"`
	// Timeout ends this exec (its whole process group); 0 means the sandbox's
	// exec_timeout.
	Timeout units.Duration `json:"timeout,omitempty"`
}

// Frame is one line of an exec's response stream (Content-Type
// application/x-ndjson). The first frame is "started" (or "error"), then
// "stdout" and "stderr" frames as output is produced, and the last is "exit"
// (or "error" if the exec was lost). A client reads lines until the last
// frame.
type Frame struct {
	Type string `json:"type"` // started, stdout, stderr, exit, error
	// started
	ExecID string `json:"exec_id,omitempty"`
	PID    int    `json:"pid,omitempty"` // the command's pid inside the sandbox
	// stdout, stderr: the bytes, base64 (std encoding)
	Data string `json:"data,omitempty"`
	// exit
	Result *ExecResult `json:"result,omitempty"`
	// error
	Error *Error `json:"error,omitempty"`
}

// Frame types.
const (
	FrameStarted = "started"
	FrameStdout  = "stdout"
	FrameStderr  = "stderr"
	FrameExit    = "exit"
	FrameError   = "error"
)

// ExecResult is how an exec ended.
type ExecResult struct {
	ExecID string `json:"exec_id"`
	// ExitStatus is shell-style: 124 timed out, 137 OOM-killed, 128+n killed by
	// signal n, 127 not found, 126 not executable, else the exit code.
	ExitStatus int    `json:"exit_status"`
	ExitCode   int    `json:"exit_code"`
	Signal     int    `json:"signal,omitempty"`
	SignalName string `json:"signal_name,omitempty"`
	TimedOut   bool   `json:"timed_out"`
	OOMKilled  bool   `json:"oom_killed"`
	// Error says why the command could not be started (ExitStatus 126/127).
	Error       string  `json:"error,omitempty"`
	WallMS      float64 `json:"wall_ms"`
	CPUMS       float64 `json:"cpu_ms"`
	PeakMemory  int64   `json:"peak_memory_bytes"`
	StdoutBytes int64   `json:"stdout_bytes"`
	StderrBytes int64   `json:"stderr_bytes"`
}

// Exec is one entry of GET /v1/sandboxes/{id}/execs.
type Exec struct {
	ExecID    string      `json:"exec_id"`
	Argv      []string    `json:"argv"`
	PID       int         `json:"pid"`
	StartedAt time.Time   `json:"started_at"`
	Running   bool        `json:"running"`
	Result    *ExecResult `json:"result,omitempty"`
}

// SignalRequest is the body of POST /v1/sandboxes/{id}/execs/{exec_id}/signal.
type SignalRequest struct {
	Signal string `json:"signal"` // "TERM", "SIGTERM", "KILL", "INT", "HUP", ...
}

// FilesResult is what PUT /v1/sandboxes/{id}/files returns.
type FilesResult struct {
	Files int64 `json:"files"` // regular files, directories and links written
	Bytes int64 `json:"bytes"` // bytes of file content written
}

// Event is the data of one server-sent event on GET
// /v1/sandboxes/{id}/events. Event types (the SSE "event:" field) are
// "decision" (an audit record of the sandbox, as written to the log) and
// "sandbox" (a lifecycle change: state and end reason).
type Event struct {
	Record  map[string]any `json:"record,omitempty"`
	Sandbox *Sandbox       `json:"sandbox,omitempty"`
	// Dropped counts events this subscriber missed because it read too slowly.
	Dropped int64 `json:"dropped,omitempty"`
	// History marks a decision event as one of the sandbox's past records
	// (events?history=true), sent before the live ones.
	History bool `json:"history,omitempty"`
	// HistoryOmitted, on the first event of a stream with history, counts
	// the sandbox's older records the daemon no longer keeps (the audit log
	// has them).
	HistoryOmitted int64 `json:"history_omitted,omitempty"`
}

// RunRequest is the body of POST /v1/run: create, exec once, delete.
type RunRequest struct {
	Labels    map[string]string `json:"labels,omitempty"`
	Argv      []string          `json:"argv"`
	Env       []string          `json:"env,omitempty"`
	Workspace string            `json:"workspace,omitempty"`
	Stdin     string            `json:"stdin,omitempty"` // the whole standard input, as text
	Limits    Limits            `json:"limits,omitempty"`
	Mode      string            `json:"mode,omitempty"`
	Allow     []string          `json:"allow,omitempty"`
	// SecretBindings attaches bindings of the daemon's secrets file to the
	// run's sandbox, as CreateSandboxRequest.SecretBindings does (the same
	// rule; one refused name refuses the run before anything is built).
	SecretBindings []string `json:"secret_bindings,omitempty"`
}

// RunResponse is the result of POST /v1/run.
type RunResponse struct {
	ID string `json:"id"`
	ExecResult
	PidsLimitHit bool   `json:"pids_limit_hit"`
	Stdout       string `json:"stdout"`
	Stderr       string `json:"stderr"`
	Truncated    bool   `json:"truncated"`
	Egress       Egress `json:"egress"`
	// SecretBindings are the bindings the run's sandbox had attached
	// (RunRequest.SecretBindings), without values.
	SecretBindings []SecretBinding `json:"secret_bindings,omitempty"`
}

// AttachRequest is the body of POST /v1/attach (root only).
type AttachRequest struct {
	ID     string            `json:"id"`
	NetNS  string            `json:"netns"`
	Labels map[string]string `json:"labels,omitempty"`
	// Pod is the Kubernetes pod the namespace belongs to (airlock-cni sends
	// it): policy sees it as input.sandbox.pod and every audit record of the
	// sandbox carries it.
	Pod *Pod `json:"pod,omitempty"`
	// Inbound says what becomes of traffic arriving on the namespace's
	// interfaces other than lo; omitted, it is captured (InboundCapture).
	Inbound *Inbound `json:"inbound,omitempty"`
}

// Inbound modes (Inbound.Mode).
const (
	// InboundCapture: what arrives on the namespace's interfaces is the
	// workload's egress (a VM behind a tap, a veth whose peer is the
	// workload): TCP and DNS go to airlock's listeners, the rest is dropped.
	InboundCapture = "capture"
	// InboundAccept: what arrives comes from the network to the namespace
	// (a pod on a bridge): new TCP connections to the namespace's own
	// addresses on Ports (every TCP port when none are listed) are
	// accepted and only their replies may leave; everything else arriving
	// is dropped and logged, and the workload's own egress is captured as
	// always.
	InboundAccept = "accept"
)

// MaxInboundPorts bounds Inbound.Ports.
const MaxInboundPorts = 32

// Inbound is an attach's choice for traffic arriving on the namespace's
// interfaces.
type Inbound struct {
	// Mode is InboundCapture (when empty) or InboundAccept.
	Mode string `json:"mode,omitempty"`
	// Ports are the TCP ports InboundAccept lets connections in on (1-65535,
	// at most MaxInboundPorts, no repeats); empty lets in every TCP port.
	// Not allowed with InboundCapture.
	Ports []int `json:"ports,omitempty"`
}

// Pod is a Kubernetes pod's identity, as its runtime passed it to the CNI
// plugin (identity.Pod). Each field is at most MaxPodField bytes; empty ones
// were not given.
type Pod = identity.Pod

// MaxPodField bounds each field of Pod (Kubernetes names are at most 253).
const MaxPodField = 253

// Attached is what POST /v1/attach returns.
type Attached struct {
	ID   string `json:"id"`
	Path string `json:"path"` // where airlock keeps the namespace bound
}

// AttachStatus is what GET /v1/attach/{id} returns: whether the attached
// namespace's rules are still as Attach left them (the CNI CHECK).
type AttachStatus struct {
	ID   string `json:"id"`
	Path string `json:"path"`
	Pod  *Pod   `json:"pod,omitempty"`
	// Inbound is the mode (and ports) the namespace was attached with.
	Inbound Inbound `json:"inbound"`
	// InboundAccepted counts the inbound connections InboundAccept let in
	// since the namespace was attached, or re-attached after a restart (as
	// logged by the kernel: under a flood some may not be counted).
	InboundAccepted uint64 `json:"inbound_accepted"`
	InForce         bool   `json:"in_force"`
	// Problem says what is missing or out of place when InForce is false.
	Problem string `json:"problem,omitempty"`
}

// PolicyRev is what POST /v1/policy/reload returns: the revision in force.
type PolicyRev struct {
	PolicyRev string `json:"policy_rev"`
}

// SummaryRow is one entry of GET /v1/summary: decisions of one kind about
// one destination since the daemon started.
type SummaryRow struct {
	// Decision is allow, deny, error, or would_deny: a request report mode
	// let through that enforce mode would have refused.
	Decision string `json:"decision"`
	Kind     string `json:"kind"`
	Host     string `json:"host"`
	Port     int    `json:"port,omitempty"`
	Count    int    `json:"count"`
}

// Health is what GET /v1/health returns: 200 when every part is ok, 503
// (with this same body) when any is failing.
type Health struct {
	// OK is false when any part in Parts is failing: the daemon then must
	// not be trusted to create or attach (airlock-cni refuses ADD).
	OK bool `json:"ok"`
	// Parts is the state of each part the daemon depends on, in a fixed
	// order (HealthPart* names; a part the daemon does not have is absent).
	Parts     []HealthPart `json:"parts"`
	PolicyRev string       `json:"policy_rev"`
	Sandboxes []string     `json:"sandboxes"` // ids the caller may see
	PoolDepth int          `json:"pool_depth"`
	Audit     string       `json:"audit"` // "ok" or why the log refuses records
	// PolicyBundle is the bundle source's state when the policy comes from
	// an OPA bundle (config policy.bundle); absent otherwise.
	PolicyBundle *PolicyBundle `json:"policy_bundle,omitempty"`
}

// HealthPart is one part's state in Health.
type HealthPart struct {
	// Name is one of the HealthPart* names.
	Name string `json:"name"`
	// Status is HealthOK or HealthFailing.
	Status string `json:"status"`
	// Problem says what is wrong when Status is HealthFailing.
	Problem string `json:"problem,omitempty"`
}

// The parts of Health and their statuses.
const (
	// HealthPartStateDir: the run directory (CA, bundle, namespace state)
	// exists and this daemon holds its lock.
	HealthPartStateDir = "state_dir"
	// HealthPartAudit: the audit log takes records.
	HealthPartAudit = "audit"
	// HealthPartPolicy: a policy is in force (not the fail-closed deny of
	// an engine with none) and its last reload did not fail (a failed one
	// leaves an older policy than its files in force).
	HealthPartPolicy = "policy"
	// HealthPartPolicyBundle: the bundle source has a bundle in force and
	// its last download, verification and activation succeeded.
	HealthPartPolicyBundle = "policy_bundle"
	// HealthPartPool: the warm pool's last preparation succeeded.
	HealthPartPool = "pool"

	HealthOK      = "ok"
	HealthFailing = "failing"
)

// Failing returns the parts of h that are failing, as "name: problem".
func (h *Health) Failing() []string {
	var out []string
	for _, p := range h.Parts {
		if p.Status != HealthOK {
			out = append(out, p.Name+": "+p.Problem)
		}
	}
	return out
}

// PolicyBundle is a policy bundle source's state in GET /v1/health. Times
// are absent until the event first happens.
type PolicyBundle struct {
	URL string `json:"url"`
	// Active says a bundle is in force; without one every request is denied.
	Active bool `json:"active"`
	// Revision is the active bundle's manifest revision (Health.PolicyRev
	// is the revision audit records carry: this, "@", a content hash).
	Revision string `json:"revision,omitempty"`
	ETag     string `json:"etag,omitempty"`
	// FromDisk: the active bundle is the one persisted by an earlier run.
	FromDisk bool `json:"from_disk"`
	// LastRequest is the last request the server answered (200 or 304);
	// LastDownload the last bundle received; LastActivation the last one
	// put in force.
	LastRequest    *time.Time `json:"last_request,omitempty"`
	LastDownload   *time.Time `json:"last_download,omitempty"`
	LastActivation *time.Time `json:"last_activation,omitempty"`
	// Error is the last failure since the last activation: its stage
	// (download, verify, activate, persist), message and time.
	Error      string     `json:"error,omitempty"`
	ErrorStage string     `json:"error_stage,omitempty"`
	ErrorAt    *time.Time `json:"error_at,omitempty"`
}

// Error is every error response's body, and the error frame's payload.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field names the request field at fault, when there is one
	// ("limits.memory", "argv", "path").
	Field string `json:"field,omitempty"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Stable error codes.
const (
	CodeBadRequest    = "bad_request"    // 400: malformed JSON, unknown field, trailing data
	CodeInvalidField  = "invalid_field"  // 400: a field's value is refused (Field says which)
	CodeInvalidPath   = "invalid_path"   // 400: a files path outside the workspace or $HOME, or unsafe
	CodeNotFound      = "not_found"      // 404: no such sandbox/exec visible to the caller
	CodeForbidden     = "forbidden"      // 403: the caller may not do this (root only, workspace not owned)
	CodeConflict      = "conflict"       // 409: the sandbox is stopping or stopped
	CodeTooLarge      = "too_large"      // 413: a body or upload over its limit
	CodeLimit         = "limit_exceeded" // 429: too many sandboxes/execs for the daemon or caller
	CodeUnprocessable = "unprocessable"  // 422: understood but cannot be done (a policy that does not compile, a namespace that cannot be attached)
	CodeUnavailable   = "unavailable"    // 503: the daemon cannot take it now (audit log down, low disk, shutting down)
	CodeInternal      = "internal"       // 500
)
