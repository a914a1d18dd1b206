package learn

import (
	"encoding/json"
	"net/netip"
	"strings"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// Why a record has no replayable input (Rebuilder.Input's skip value).
const (
	// SkipNotDecision: the record is no policy decision (close, exec, sandbox,
	// drop, checkpoint, summary, retention, ...).
	SkipNotDecision = "not_a_decision"
	// SkipUndecided: a decision kind the gateway or DNS filter refused before
	// asking policy (a bad request, a rate limit): the record has no mode.
	SkipUndecided = "not_decided_by_policy"
	// SkipSummary: a DNS audit-budget summary standing for many questions,
	// whose names are not listed one by one.
	SkipSummary = "summary"
)

// Extra keys the gateway writes on decision records (gateway/pipeline.go).
const (
	extraCarries    = "carries"         // what an allowed CONNECT turned out to carry: tcp or tls
	extraCarriedDec = "carried_decided" // true: that was decided a second time, as the record says
	extraOriginalIP = "original_ip"     // a raw connection decided by name: the address the sandbox used
)

// flagAfterDecision is the DNS flag the filter adds after policy decided
// (dnsfilter.FlagRebindingDropped): never part of the input.
const flagAfterDecision = "rebinding_dropped"

// Rebuilder turns records into policy inputs. It remembers each daemon
// sandbox's labels, mode and allow list from its creation record (kind
// sandbox), so records that follow carry them as the live input did. Not safe
// for concurrent use.
type Rebuilder struct {
	sandboxes map[string]policy.Sandbox
}

// NewRebuilder returns an empty Rebuilder.
func NewRebuilder() *Rebuilder {
	return &Rebuilder{sandboxes: map[string]policy.Sandbox{}}
}

// Sandbox is what the Rebuilder knows of a sandbox: its id alone unless a
// creation record was seen.
func (b *Rebuilder) Sandbox(id string) policy.Sandbox {
	if sb, ok := b.sandboxes[id]; ok {
		return sb
	}
	return policy.Sandbox{ID: id}
}

// Observe reads what a non-decision record says about a sandbox (its creation
// record: labels, mode, allow). Input calls it; a caller that filters records
// before Input calls it itself for the records it drops.
func (b *Rebuilder) Observe(r *audit.Record) {
	if r.Kind != audit.KindSandbox || r.Extra == nil {
		return
	}
	if _, ok := r.Extra["labels"]; !ok {
		return // an end record
	}
	sb := policy.Sandbox{ID: r.Sandbox}
	_ = json.Unmarshal(r.Extra["labels"], &sb.Labels)
	var mode string
	if json.Unmarshal(r.Extra["mode"], &mode) == nil {
		sb.Mode = policy.Mode(mode)
	}
	if raw, ok := r.Extra["allow"]; ok && string(raw) != "null" {
		var al policy.AllowList
		if json.Unmarshal(raw, &al) == nil && al.Len() > 0 {
			sb.Allow = &al
		}
	}
	b.sandboxes[r.Sandbox] = sb
}

// Inputs rebuilds the policy inputs that decided r, or says why r has none
// (one of the Skip* constants). A record has one input, but a CONNECT whose
// carried bytes were decided a second time (extra.carried_decided) has two:
// the CONNECT's, then the carried one, which the record's decision is; both
// had to allow. Input is the last of them. What a record does not keep is absent from the input:
// header values (so body_size is 0 and no header is set), query values (each
// logged key has one empty value), and for kind http the scheme, taken as
// https on port 443 and http elsewhere (an https request is then marked as
// intercepted TLS with the host as SNI).
func (b *Rebuilder) Inputs(r *audit.Record) ([]policy.Input, string) {
	in, skip := b.input(r)
	if skip != "" {
		return nil, skip
	}
	// Opaque bytes are always decided again; a ClientHello only without a
	// server name, which the gateway marks (logs older than the mark name no
	// such case).
	carries := extraString(r, extraCarries)
	if r.Kind != audit.KindConnect || carries != string(policy.KindTCP) && string(r.Extra[extraCarriedDec]) != "true" {
		return []policy.Input{in}, ""
	}
	carried := in
	if !rebuildCarried(&carried, r) {
		return []policy.Input{in}, ""
	}
	return []policy.Input{in, carried}, ""
}

// Input is the input r's decision was taken on: the last of Inputs.
func (b *Rebuilder) Input(r *audit.Record) (policy.Input, string) {
	ins, skip := b.Inputs(r)
	if skip != "" {
		return policy.Input{}, skip
	}
	return ins[len(ins)-1], ""
}

func (b *Rebuilder) input(r *audit.Record) (policy.Input, string) {
	b.Observe(r)
	switch r.Kind {
	case audit.KindHTTP, audit.KindConnect, audit.KindTLS, audit.KindTCP, audit.KindDNS:
	default:
		return policy.Input{}, SkipNotDecision
	}
	if r.Kind == audit.KindDNS && r.Extra[audit.SummaryQueriesKey] != nil {
		return policy.Input{}, SkipSummary
	}
	if r.Mode == "" {
		return policy.Input{}, SkipUndecided
	}
	in := policy.Input{
		Kind:        policy.Kind(r.Kind),
		Sandbox:     b.Sandbox(r.Sandbox),
		Destination: policy.Destination{Host: r.Host, Port: r.Port},
	}
	switch r.Kind {
	case audit.KindHTTP:
		in.HTTP = httpOf(r)
		if in.HTTP.Scheme == "https" {
			in.TLS = &policy.TLS{SNI: r.Host, Intercepted: true}
		}
	case audit.KindTLS:
		in.TLS = &policy.TLS{SNI: r.Host}
		if isIP(r.Host) { // no server name: decided by the address
			in.TLS.SNI = ""
			in.Destination.IP = r.Host
		}
	case audit.KindTCP:
		in.Destination.Protocol = "tcp"
		in.Destination.IP = r.IP
		if ip := extraString(r, extraOriginalIP); ip != "" {
			in.Destination.IP = ip
		}
	case audit.KindDNS:
		in.Destination.Protocol = r.Protocol
		in.DNS = &policy.DNS{QName: r.Host, QType: r.QType}
		for _, f := range r.Flags {
			if f != flagAfterDecision {
				in.DNS.Flags = append(in.DNS.Flags, f)
			}
		}
	}
	return in, ""
}

// rebuildCarried makes in the second decision of a CONNECT that carried
// opaque bytes or a ClientHello without a name (gateway decideCarried);
// false for anything else.
func rebuildCarried(in *policy.Input, r *audit.Record) bool {
	switch extraString(r, extraCarries) {
	case string(policy.KindTCP):
		in.Kind = policy.KindTCP
		in.Destination.Protocol = "tcp"
	case string(policy.KindTLS):
		in.Kind = policy.KindTLS
		in.TLS = &policy.TLS{}
	default:
		return false
	}
	return true
}

func httpOf(r *audit.Record) *policy.HTTP {
	h := &policy.HTTP{Method: r.Method, Scheme: "http", Path: r.Path}
	if r.Port == policy.PortHTTPS {
		h.Scheme = "https"
	}
	if h.Path == "" {
		h.Path = "/"
	}
	for _, k := range r.Query {
		if strings.HasPrefix(k, "(+") { // the writer's "(+N more parameters)"
			continue
		}
		if h.Query == nil {
			h.Query = map[string][]string{}
		}
		h.Query[k] = []string{""}
	}
	return h
}

func extraString(r *audit.Record, key string) string {
	raw, ok := r.Extra[key]
	if !ok {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}
