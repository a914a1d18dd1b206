package policy

import (
	"context"

	"github.com/airlock-dev/airlock/identity"
)

// Identity types, defined in package identity so the layers that only pass
// them along do not compile the engine.
type (
	Kind      = identity.Kind
	Mode      = identity.Mode
	Sandbox   = identity.Sandbox
	Pod       = identity.Pod
	AllowList = identity.AllowList
)

// The kinds of decision the gateway, DNS filter and netns drop logger ask for.
const (
	KindHTTP    = identity.KindHTTP
	KindConnect = identity.KindConnect
	KindTLS     = identity.KindTLS
	KindTCP     = identity.KindTCP
	KindDNS     = identity.KindDNS
)

// Modes.
const (
	ModeEnforce = identity.ModeEnforce
	ModeReport  = identity.ModeReport
)

// Input is the document policy sees as `input` (policy/DESIGN.md).
// Absent parts are nil and so absent from the JSON, never empty objects.
type Input struct {
	Kind        Kind        `json:"kind"`
	Sandbox     Sandbox     `json:"sandbox"`
	Destination Destination `json:"destination"`
	HTTP        *HTTP       `json:"http,omitempty"`
	TLS         *TLS        `json:"tls,omitempty"`
	DNS         *DNS        `json:"dns,omitempty"`
	// Content, JSONRPC and LLM are what content inspection saw (content.go).
	Content *Content `json:"content,omitempty"`
	JSONRPC *JSONRPC `json:"jsonrpc,omitempty"`
	LLM     *LLM     `json:"llm,omitempty"`
	// Attributes mirrors the Envoy ext_authz shape; the engine fills it from HTTP
	// and Destination, callers leave it nil.
	Attributes *Attributes `json:"attributes,omitempty"`
}

// Destination is the normalized target. Host is the output of hostname.Normalize
// (or a canonical IP literal); Suffixes is hostname.Suffixes(Host). For kind
// tcp (a raw connection the transparent listener captured), Host is the name
// the DNS filter last answered the sandbox with the destination address,
// while that answer's TTL lasts, and IP is that address; without such an
// answer Host is the address itself.
type Destination struct {
	Host     string   `json:"host"`
	Port     int      `json:"port"`
	Suffixes []string `json:"suffixes,omitempty"`
	// Keys are the host-list keys that match Host, most specific first: Host,
	// "*.<parent>", then "**.<ancestor>" for every proper ancestor. The engine
	// fills them from Host and Suffixes (callers leave them nil; a given value
	// is replaced), so the policy library does not rebuild them per request.
	Keys     []string `json:"keys,omitempty"`
	IP       string   `json:"ip,omitempty"`
	Protocol string   `json:"protocol,omitempty"` // "tcp", "udp", "icmp" for kind tcp and drops
}

// HTTP describes one request. Header names are lowercase; values of credential
// headers are passed as they are (policy may need them) but never audited.
type HTTP struct {
	Method  string              `json:"method"`
	Scheme  string              `json:"scheme"`
	Path    string              `json:"path"`
	Query   map[string][]string `json:"query,omitempty"`
	Headers map[string]string   `json:"headers,omitempty"`
	// BodySize says whether the request carries a body: 0 (absent) none, n > 0
	// a declared Content-Length, -1 a body of unknown length (chunked).
	BodySize int64 `json:"body_size,omitempty"`
}

// TLS describes a TLS connection seen by the transparent listener or a MITM.
type TLS struct {
	SNI         string `json:"sni"`
	Intercepted bool   `json:"intercepted"`
}

// DNS describes one question.
type DNS struct {
	QName string   `json:"qname"`
	QType string   `json:"qtype"`
	Flags []string `json:"flags,omitempty"` // exfiltration signals from dnsfilter
}

// Attributes is the Envoy ext_authz compatible view: attributes.request.http.
type Attributes struct {
	Request AttributesRequest `json:"request"`
}

// AttributesRequest holds the ext_authz http block.
type AttributesRequest struct {
	HTTP AttributesHTTP `json:"http"`
}

// AttributesHTTP is Envoy's CheckRequest.attributes.request.http subset.
type AttributesHTTP struct {
	Method  string            `json:"method"`
	Host    string            `json:"host"`
	Path    string            `json:"path"`
	Scheme  string            `json:"scheme"`
	Headers map[string]string `json:"headers,omitempty"`
}

// Reason explains a decision. ID is stable and machine-readable.
type Reason struct {
	ID  string `json:"id"`
	Msg string `json:"msg"`
}

// ReasonPolicyError is the reason of every fail-closed deny: an eval error, an
// undefined or malformed decision, or a deadline.
const ReasonPolicyError = "policy_error"

// Decision is what data.airlock.decision evaluated to, plus what the engine adds.
type Decision struct {
	// Allowed is what the policy said (what enforce mode does).
	Allowed bool     `json:"allowed"`
	Reasons []Reason `json:"reasons,omitempty"`
	MITM    bool     `json:"mitm,omitempty"`
	// Passthrough: the allowed connect or tls is tunneled end to end, never
	// intercepted, not even for a sandbox that holds secret placeholders (so
	// nothing is injected into it); it wins over MITM. For clients that pin a
	// certificate or carry compiled-in roots.
	Passthrough bool `json:"passthrough,omitempty"`
	// Strip: an allowed response with content findings reaches the agent
	// without what the response detectors flag (hidden text, injected
	// instructions) instead of whole (data.airlock.egress.strip). Only a
	// response's decision reads it.
	Strip      bool `json:"strip,omitempty"`
	HTTPStatus int  `json:"http_status,omitempty"`
	// Ask: the policy asks a person about this denied request (its ask
	// rules, or on_unmatched "ask"); AskMsg is the question. A caller with
	// an approver holds the request for the answer; any other denies it as
	// Allowed says.
	Ask    bool   `json:"ask,omitempty"`
	AskMsg string `json:"ask_msg,omitempty"`
	// Mode is the mode this decision was taken in: the policy's own (report or
	// enforce rules), else the sandbox's (Sandbox.Mode), else the global one.
	Mode Mode `json:"mode"`
	// Rev is the policy revision that decided.
	Rev string `json:"policy_rev"`
	// Err is set when the decision is a fail-closed deny; never serialized.
	Err error `json:"-"`
}

// Permit reports whether the caller lets the request pass: an allow, or a deny in
// report mode. A policy error never passes, in any mode.
func (d *Decision) Permit() bool {
	if d.Err != nil {
		return false
	}
	return d.Allowed || d.Mode == ModeReport
}

// Decider is the seam every caller of policy uses. Decide never fails open: on any
// error it returns a deny with reason policy_error and Err set.
type Decider interface {
	Decide(ctx context.Context, in *Input) Decision
}
