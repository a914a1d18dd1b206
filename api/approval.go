package api

import "time"

// Approval is a request the policy asked a person about (GET
// /v1/approvals): held until an answer (POST /v1/approvals/{id}), its
// time-out, or the end of its sandbox. The follow stream sends it again
// each time its State changes.
type Approval struct {
	ID        string `json:"id"`
	Sandbox   string `json:"sandbox"`
	RequestID string `json:"request_id"` // the held request's decision id
	Kind      string `json:"kind"`       // connect, tls, tcp, http
	Host      string `json:"host"`
	Port      int    `json:"port"`
	Method    string `json:"method,omitempty"`
	Path      string `json:"path,omitempty"`
	// Msg is the policy's question (its ask rule's message).
	Msg       string    `json:"msg"`
	AskedAt   time.Time `json:"asked_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// State is pending, approved, denied or timed_out; Answer and By say
	// how and by whom it was answered ("uid 1000", "root").
	State  string `json:"state"`
	Answer string `json:"answer,omitempty"`
	By     string `json:"by,omitempty"`
}

// Approval states.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
	ApprovalTimedOut = "timed_out"
)

// Answers to an approval (ApprovalAnswer.Answer).
const (
	// AnswerOnce lets this one request pass.
	AnswerOnce = "once"
	// AnswerSandbox lets it pass, and every later request of the sandbox to
	// the same host and port, for the sandbox's life, without asking.
	AnswerSandbox = "sandbox"
	// AnswerPolicy lets it pass and adds host:port to the sandbox's allow
	// list (as PATCH allow_add would: audited, shown by GET).
	AnswerPolicy = "policy"
	// AnswerDeny refuses it (reason approval_denied).
	AnswerDeny = "deny"
)

// ApprovalAnswer is POST /v1/approvals/{id}.
type ApprovalAnswer struct {
	Answer string `json:"answer"`
}
