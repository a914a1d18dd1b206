package gateway

import (
	"errors"
	"fmt"
	"net/http"
)

// Reason ids the gateway itself gives (policy gives its own).
const (
	ReasonHostMismatch      = "host_mismatch"          // CONNECT/URL/Host/SNI disagree, or change on a connection
	ReasonBadRequest        = "bad_request"            // unparsable or unsupported request
	ReasonBadDestination    = "bad_destination"        // host or port failed normalization
	ReasonForbiddenAddress  = "destination_forbidden"  // every resolved address refused by the guard
	ReasonMITMUnavailable   = "mitm_unavailable"       // policy asked for interception but no CA is configured
	ReasonConnLimit         = "connection_limit"       // per-sandbox connection cap
	ReasonTunnelLimit       = "tunnel_limit"           // per-sandbox tunnel cap
	ReasonAuditUnavailable  = "audit_unavailable"      // the audit logger refused a record
	ReasonInjectFailed      = "secret_injection_error" // the Injector refused
	ReasonOriginalDst       = "no_original_destination"
	ReasonUpstream          = "upstream_error"
	ReasonResolve           = "resolve_error"
	ReasonUpstreamTLS       = "upstream_tls_error"
	ReasonTimeout           = "upstream_timeout"
	ReasonShuttingDown      = "shutting_down"
	ReasonTooManyParams     = "too_many_query_params"    // more than max_query_params query parameters
	ReasonBodyScanTimeout   = "body_scan_timeout"        // the body the secrets check reads did not arrive in time
	ReasonParentUnavailable = "parent_proxy_unavailable" // the parent proxy could not be reached or did not answer
	ReasonParentRefused     = "parent_proxy_refused"     // the parent proxy answered the CONNECT with a non-2xx status
	ReasonStreamLimit       = "stream_limit"             // per-sandbox HTTP/2 stream cap
	ReasonPolicyChanged     = "policy_changed"           // an open connection the policy in force no longer allows
)

// denial is a refusal decided by the gateway or by policy. It is distinct from a
// failure: the destination was never contacted.
type denial struct {
	reason string
	msg    string
	status int
	flag   string // goes in audit.Record.Flags (a secrets denial's Flag)
}

func (d *denial) Error() string { return "denied: " + d.reason + ": " + d.msg }

func deny(reason, format string, args ...any) error {
	return &denial{reason: reason, msg: fmt.Sprintf(format, args...), status: http.StatusForbidden}
}

// failure is an error after allow: resolving, dialing or talking to the upstream.
type failure struct {
	reason string
	status int
	err    error
	note   string // shown to the sandbox after the reason; "" for none
}

func (f *failure) Error() string { return f.reason + ": " + f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

func fail(reason string, status int, err error) error {
	return &failure{reason: reason, status: status, err: err}
}

// asDenial is errors.As for a *denial, without errors.As's allocation of
// its target on the common paths: no error at all, or a *denial itself.
func asDenial(err error) *denial {
	if err == nil {
		return nil
	}
	if d, ok := err.(*denial); ok {
		return d
	}
	var d *denial
	errors.As(err, &d)
	return d
}

// asFailure is asDenial for a *failure.
func asFailure(err error) *failure {
	if err == nil {
		return nil
	}
	if f, ok := err.(*failure); ok {
		return f
	}
	var f *failure
	errors.As(err, &f)
	return f
}

// refusalOf maps an error to the status and reason id the client sees.
func refusalOf(err error) (status int, reason string) {
	var d *denial
	if errors.As(err, &d) {
		return d.status, d.reason
	}
	var f *failure
	if errors.As(err, &f) {
		return f.status, f.reason
	}
	return http.StatusBadGateway, ReasonUpstream
}
