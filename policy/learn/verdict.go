package learn

import "github.com/airlock-dev/airlock/audit"

// Reason ids the library and the default policy give when no rule allowed a
// request: an allowlist says no. A record denied with these only is one an
// allowlist can open (Learnable).
var allowlistRefusals = map[string]bool{
	"default_deny":           true, // lib/airlock.rego: nothing allowed it
	"port_not_allowed":       true, // default.rego: a listed host on another port
	"read_only_body":         true, // default.rego: a registry read with a body
	"git_fetch_not_git_host": true, // default.rego: git fetch to a registry without git
}

// Reason ids that never come from policy: the gateway's, the DNS filter's,
// secrets' and audit's own refusals, written on a record besides (or instead
// of) the policy's reasons. TestOutsideReasonsListed keeps this list whole.
var outsideReasons = map[string]bool{
	// gateway/errors.go, gateway/socks.go
	"host_mismatch": true, "bad_request": true, "bad_destination": true,
	"destination_forbidden": true, "mitm_unavailable": true, "connection_limit": true,
	"tunnel_limit": true, "stream_limit": true, "audit_unavailable": true, "secret_injection_error": true,
	"no_original_destination": true, "upstream_error": true, "resolve_error": true,
	"upstream_tls_error": true, "upstream_timeout": true, "shutting_down": true,
	"too_many_query_params": true, "body_scan_timeout": true,
	"parent_proxy_unavailable": true, "parent_proxy_refused": true,
	"socks_no_acceptable_method": true, "socks_command_not_supported": true,
	"socks_address_type_not_supported": true, "policy_changed": true,
	// gateway/approval.go: a person's answer (or none) to what policy asked
	"approval_asked": true, "approved_once": true, "approved_sandbox": true,
	"approved_policy": true, "approval_denied": true, "approval_timeout": true,
	"approval_limit": true, "approval_unavailable": true,
	// gateway/secrets.go, gateway/wsinspect.go
	"secret_unavailable": true, "secret_response_refused": true, "websocket_compressed_refused": true,
	// gateway/respstream.go: a strip policy asked for on a body whose length was already sent
	"content_strip_fixed_length": true, "content_response_undecodable": true,
	// dnsfilter
	"dns_malformed": true, "dns_bad_name": true, "dns_ip_literal": true,
	"dns_flag_blocked": true, "dns_qtype_refused": true, "dns_upstream_failed": true,
	"dns_audit_summary": true, "dns_rate_limited": true, "dns_unique_names": true,
	"dns_long_label": true, "dns_high_entropy": true, "unknown_sandbox": true,
}

// Notes an allowed decision carries among its reasons (allow_reasons, the
// library's dns_port_optin): not refusals.
var allowNotes = map[string]bool{
	"dns_port_optin":  true,
	"dns_qtype_optin": true,
}

// secretReasonPrefix marks the secrets check's refusals (a placeholder sent to
// the wrong host, ...): gateway's secrets stage, never policy.
const secretReasonPrefix = "secret_"

func isOutside(id string) bool {
	return outsideReasons[id] || len(id) > len(secretReasonPrefix) && id[:len(secretReasonPrefix)] == secretReasonPrefix
}

// PolicyAllowed is what the policy that decided r said: allowed, or not. A
// record denied only for reasons outside policy (the address guard, the
// secrets check, the DNS filter's own rules) was allowed by policy; one whose
// reasons include a policy refusal (report mode writes both) was not. A
// policy error is a deny.
func PolicyAllowed(r *audit.Record) bool {
	switch r.Decision {
	case audit.DecisionAllow:
		return true
	case audit.DecisionError:
		return false
	}
	outside := false
	for _, x := range r.Reasons {
		switch {
		case isOutside(x.ID):
			outside = true
		case allowNotes[x.ID]:
		default:
			return false
		}
	}
	return outside
}

// Learnable reports whether r is a request only an allowlist refused: denied
// (or, in report mode, let through but logged as denied) with allowlist
// refusals and nothing else. What else refused a request (a metadata
// address, a DNS port, a secret, a deny rule) is never learnable.
func Learnable(r *audit.Record) bool {
	if r.Decision != audit.DecisionDeny || len(r.Reasons) == 0 {
		return false
	}
	for _, x := range r.Reasons {
		if !allowlistRefusals[x.ID] {
			return false
		}
	}
	return true
}
