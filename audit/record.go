package audit

import (
	"encoding/json"
	"time"
)

// Record is one audit line (docs/ARCHITECTURE.md, "Audit log"). Seq, TS and
// Prev are set by the writer; callers fill the rest. Fields that do not apply
// stay zero and are omitted.
type Record struct {
	Seq        uint64    `json:"seq"`
	TS         time.Time `json:"ts"`
	Prev       string    `json:"prev"`
	ID         string    `json:"id"`
	Sandbox    string    `json:"sandbox,omitempty"`
	Kind       string    `json:"kind"`               // http, connect, tls, tcp, dns, drop, exec, close, checkpoint
	Decision   string    `json:"decision,omitempty"` // allow, deny, error
	Mode       string    `json:"mode,omitempty"`
	Reasons    []Reason  `json:"reasons,omitempty"`
	PolicyRev  string    `json:"policy_rev,omitempty"`
	Host       string    `json:"host,omitempty"`
	Port       int       `json:"port,omitempty"`
	IP         string    `json:"ip,omitempty"`
	Protocol   string    `json:"protocol,omitempty"`
	Method     string    `json:"method,omitempty"`
	Path       string    `json:"path,omitempty"`
	Query      []string  `json:"query,omitempty"` // keys only, never values
	Status     int       `json:"status,omitempty"`
	BytesUp    int64     `json:"bytes_up,omitempty"`
	BytesDown  int64     `json:"bytes_down,omitempty"`
	DurationMS float64   `json:"duration_ms,omitempty"`
	Secrets    []Secret  `json:"secrets,omitempty"`
	QName      string    `json:"qname,omitempty"`
	QType      string    `json:"qtype,omitempty"`
	RCode      string    `json:"rcode,omitempty"`
	Answers    []Answer  `json:"answers,omitempty"`
	Upstream   string    `json:"upstream,omitempty"`
	Flags      []string  `json:"flags,omitempty"`
	Error      string    `json:"error,omitempty"`
	Exec       *Exec     `json:"exec,omitempty"`
	// Checkpoint is set only on kind "checkpoint" records written by the writer.
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
	// Extra carries kind-specific detail that has no field of its own. Never put a
	// secret or a credential header value here.
	Extra map[string]json.RawMessage `json:"extra,omitempty"`
}

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
}

// Answer is one DNS answer as logged.
type Answer struct {
	Type string `json:"type"`
	Data string `json:"data"`
	TTL  uint32 `json:"ttl"`
}

// Exec describes a sandboxed command's start or end.
type Exec struct {
	Phase       string   `json:"phase"` // start, end
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

// Reservation is room for one record, taken by Reserver.Reserve. Exactly one
// of Log or Cancel must be called, once.
type Reservation interface {
	// Log writes the record into the reserved room. It is never refused for
	// overflow; it fails only when the writer has failed or closed since.
	Log(r *Record) error
	// Cancel gives the room back without writing a record.
	Cancel()
}
