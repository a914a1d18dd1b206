package audit

import (
	"encoding/json"
	"time"

	"github.com/airlock-dev/airlock/identity"
)

// Record is one audit line (audit/DESIGN.md). Seq, TS,
// Prev and Node are set by the writer; callers fill the rest. Fields that do
// not apply stay zero and are omitted.
type Record struct {
	Seq  uint64    `json:"seq"`
	TS   time.Time `json:"ts"`
	Prev string    `json:"prev"`
	ID   string    `json:"id"`
	// Node names the machine whose writer wrote the record (Config.Node: a
	// Kubernetes node name, a host name). The writer stamps it on every line,
	// its own included, so the chain covers it; a caller's value is ignored.
	Node    string `json:"node,omitempty"`
	Sandbox string `json:"sandbox,omitempty"`
	// Owner is the decimal uid of the caller that created the sandbox (the
	// daemon stamps it, by sandbox id, on every record of the sandbox).
	Owner string `json:"owner,omitempty"`
	// Pod is the Kubernetes pod of a sandbox the CNI plugin attached (the
	// daemon stamps it, by sandbox id, as it stamps Owner).
	Pod        *Pod     `json:"pod,omitempty"`
	Kind       string   `json:"kind"`               // one of the Kind* constants
	Decision   string   `json:"decision,omitempty"` // DecisionAllow, DecisionDeny or DecisionError
	Mode       string   `json:"mode,omitempty"`
	Reasons    []Reason `json:"reasons,omitempty"`
	PolicyRev  string   `json:"policy_rev,omitempty"`
	Host       string   `json:"host,omitempty"`
	Port       int      `json:"port,omitempty"`
	IP         string   `json:"ip,omitempty"`
	Protocol   string   `json:"protocol,omitempty"`
	Method     string   `json:"method,omitempty"`
	Path       string   `json:"path,omitempty"`
	Query      []string `json:"query,omitempty"` // keys only, never values
	Status     int      `json:"status,omitempty"`
	BytesUp    int64    `json:"bytes_up,omitempty"`
	BytesDown  int64    `json:"bytes_down,omitempty"`
	DurationMS float64  `json:"duration_ms,omitempty"`
	Secrets    []Secret `json:"secrets,omitempty"`
	QName      string   `json:"qname,omitempty"`
	QType      string   `json:"qtype,omitempty"`
	RCode      string   `json:"rcode,omitempty"`
	Answers    []Answer `json:"answers,omitempty"`
	Upstream   string   `json:"upstream,omitempty"`
	Flags      []string `json:"flags,omitempty"`
	// Findings are what content inspection found (finding.go): never a value.
	Findings []Finding `json:"findings,omitempty"`
	Error    string    `json:"error,omitempty"`
	Exec     *Exec     `json:"exec,omitempty"`
	// Checkpoint is set only on KindCheckpoint records written by the writer.
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
	// Extra carries kind-specific detail that has no field of its own. Never put a
	// secret or a credential header value here.
	Extra map[string]json.RawMessage `json:"extra,omitempty"`
}

// Pod is a Kubernetes pod's identity on a record (identity.Pod). Empty
// fields were not given.
type Pod = identity.Pod

// Record kinds. The first five are policy's decision kinds (policy.Kind), spelled
// the same; audit does not import policy.
const (
	KindHTTP    = "http"    // a plain HTTP request, decided on its own
	KindConnect = "connect" // a CONNECT tunnel's decision
	KindTLS     = "tls"     // a TLS connection by its ClientHello
	KindTCP     = "tcp"     // raw TCP to a host and port
	KindDNS     = "dns"     // a DNS question (and the DNS filter's summaries)
	KindDrop    = "drop"    // a packet the sandbox's namespace dropped (netns)
	KindExec    = "exec"    // a sandboxed command's start or end (Record.Exec)
	KindClose   = "close"   // a tunnel's end: bytes, duration, a mid-stream denial
	// KindSandbox is a daemon sandbox's creation or end (decision allow; the
	// reason says why it ended: deleted, idle_timeout, max_lifetime, ...).
	KindSandbox = "sandbox"
	// KindSummary is a Budget's count of the requests a sandbox made while
	// over its audit budget (see ReasonAuditSummary, SummaryRequestsKey).
	KindSummary = "summary"
	// KindCheckpoint is the signed record the writer appends itself.
	KindCheckpoint = "checkpoint"
	// KindRetention is the record a writer appends before retention
	// (Config.MaxFiles, MaxBytes) deletes rotated files: which files, and the
	// seq and hash of the last line they held, so a verifier knows where the
	// kept chain must begin (see Verify).
	KindRetention = "retention"
	// KindOutage is the record a writer appends when it writes again after a
	// failure: the log was unavailable from when to when, and how many records
	// were refused meanwhile.
	KindOutage = "audit_outage"
	// KindCrashRecovered is the record a writer appends at open when the
	// previous writer died without closing the log: how many records it left
	// after its last checkpoint (seq from..through) and the torn line it was
	// writing, if any. A checkpoint covering them follows.
	KindCrashRecovered = "crash_recovered"
	// KindExportGap marks, in an exported copy of the log (never in the log),
	// records an exporter could not ship because retention had deleted them
	// (package audit/export): Extra-less, with from_seq and through_seq. Verify
	// accepts one where a retention record of the chain deleted exactly
	// through that seq, with the head the next line continues from.
	KindExportGap = "export_gap"
	// KindPolicyBundle is a policy bundle put in force or refused (the daemon
	// writes it; no decision): reason bundle_activated or bundle_refused,
	// policy_rev the revision in force after it, error why it was refused,
	// extra url, revision, stage, from_disk.
	KindPolicyBundle = "policy_bundle"
	// KindApproval is a question the policy asked a person about a held
	// request (reason approval_asked) or its answer (approved_once,
	// approved_sandbox, approved_policy, approval_denied,
	// approval_timeout): the daemon writes it, extra approval_id and by.
	KindApproval = "approval"
)

// Decisions as records spell them.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
	DecisionError = "error"
)

// Exec phases (Exec.Phase).
const (
	ExecStart = "start"
	ExecEnd   = "end"
)

// Reason mirrors policy.Reason without importing policy.
type Reason struct {
	ID  string `json:"id"`
	Msg string `json:"msg"`
}

// Secret names an injected secret: never its value.
type Secret struct {
	ID          string `json:"id"`
	Version     string `json:"version"`
	Fingerprint string `json:"fingerprint"` // keyed HMAC, never a bare hash
	Where       string `json:"where,omitempty"`
	Scrubbed    int    `json:"scrubbed,omitempty"`
	// Reauth: what a 401 to a minted token led to (retried, not_retried,
	// held, refresh_failed); empty when there was none.
	Reauth string `json:"reauth,omitempty"`
}

// Answer is one DNS answer as logged.
type Answer struct {
	Type string `json:"type"`
	Data string `json:"data"`
	TTL  uint32 `json:"ttl"`
}

// Exec describes a sandboxed command's start or end.
type Exec struct {
	Phase       string   `json:"phase"` // ExecStart or ExecEnd
	Argv        []string `json:"argv,omitempty"`
	ExitCode    *int     `json:"exit_code,omitempty"`
	Signal      string   `json:"signal,omitempty"`
	TimedOut    bool     `json:"timed_out,omitempty"`
	OOMKilled   bool     `json:"oom_killed,omitempty"`
	PidsLimit   bool     `json:"pids_limit_hit,omitempty"`
	WallMS      float64  `json:"wall_ms,omitempty"`
	CPUMS       float64  `json:"cpu_ms,omitempty"`
	PeakMemory  int64    `json:"peak_memory,omitempty"`
	StdoutBytes int64    `json:"stdout_bytes,omitempty"`
	StderrBytes int64    `json:"stderr_bytes,omitempty"`
	Truncated   bool     `json:"truncated,omitempty"`
}

// Checkpoint is an Ed25519 signature over the chain head.
type Checkpoint struct {
	Head      string `json:"head"`      // hex SHA-256 of the previous line
	Seq       uint64 `json:"upto_seq"`  // last record covered
	KeyID     string `json:"key_id"`    // hex SHA-256 of the public key, first 16 bytes
	Signature string `json:"signature"` // base64 Ed25519 over "airlock-audit-v1\n<seq>\n<head>"
}

// Logger is the seam every writer of audit records uses. Log returns an error only
// when the record could not be queued and the configured overflow policy is "deny";
// the caller must then refuse the request it was about to allow.
type Logger interface {
	Log(r *Record) error
}

// Reserver is a Logger that can hold room for one record before the event the
// record describes happens. A caller that must not let a request out unless its
// record will be accepted (audit.overflow: deny) reserves first, lets the
// request out only when Reserve succeeded, and writes the record through the
// reservation afterwards.
type Reserver interface {
	Logger
	// Reserve takes room for one record. An error means a record would be
	// refused now (queue full with overflow deny, writer failed or closed): the
	// caller must not let the event happen.
	Reserve() (Reservation, error)
}

// Health is implemented by a Logger that can tell whether it accepts records
// now (Writer, and Budget and Observed for the logger they wrap). Err is nil while
// it does and the failure otherwise (a failed write, ErrClosed). A caller about
// to let traffic through asks first, so a broken log stops traffic before the
// request goes out; a Logger that is not a Health is taken as healthy, and its
// Log errors still deny.
type Health interface {
	Err() error
}

// Reservation is room for one record, taken by Reserver.Reserve. Exactly one
// of Log or Cancel must be called, once.
type Reservation interface {
	// Log writes the record into the reserved room. It is never refused for
	// overflow; it fails only when the writer has failed or closed since.
	Log(r *Record) error
	// Cancel gives the room back without writing a record.
	Cancel()
}
