package secrets

import (
	"errors"
	"fmt"
	"net/http"
)

// Denial codes. Each is a stable reason id for the audit record.
const (
	// CodeAmbiguous: more than one binding matches the request.
	CodeAmbiguous = "secret_binding_ambiguous"
	// CodePlaceholderMisuse: a placeholder was seen where it must not be (another
	// host, a body, path, query, another header, plain HTTP, a CONNECT line).
	CodePlaceholderMisuse = "secret_placeholder_misuse"
	// CodePlaceholderForeign: a placeholder of another sandbox, or an unknown
	// placeholder-shaped token, was seen.
	CodePlaceholderForeign = "secret_placeholder_foreign"
	// CodePlaceholderRequired: a require-mode binding's host was asked without
	// the placeholder in the bound header.
	CodePlaceholderRequired = "secret_placeholder_required"
	// CodePathRefused: the path to a bound host uses an encoding trick.
	CodePathRefused = "secret_path_refused"
	// CodeHostMismatch: the URL host and the Host header name different hosts.
	CodeHostMismatch = "secret_host_mismatch"
	// CodeBodyUnreadable: the request body could not be read for scanning.
	CodeBodyUnreadable = "secret_body_unreadable"
	// CodeBodyScanBusy: the sandbox's other body scans hold its whole
	// body-scan budget (a *BusyError, not a denial).
	CodeBodyScanBusy = "secret_body_scan_busy"
)

// Flags put on the audit record (audit.Record.Flags) with a denial.
const (
	FlagPlaceholderLeak = "secret_placeholder_leak"
	FlagForeignToken    = "secret_foreign_placeholder"
	FlagOwnCredential   = "secret_own_credential"
	FlagPathTrick       = "secret_path_trick"
)

// Denial is a typed refusal of a request; the gateway answers 403 with Code and
// logs Msg. It never carries a secret value or a placeholder.
type Denial struct {
	Code     string // one of the Code* constants
	Flag     string // one of the Flag* constants, or "" when nothing is flagged
	SecretID string // the secret concerned, if known
	Where    string // "header:X-Api-Key", "body", "query", "path", "host", ...
	Msg      string
}

func (d *Denial) Error() string {
	s := "secrets: denied (" + d.Code + ")"
	if d.SecretID != "" {
		s += " secret " + d.SecretID
	}
	if d.Where != "" {
		s += " at " + d.Where
	}
	if d.Msg != "" {
		s += ": " + d.Msg
	}
	return s
}

// UnavailableError says a secret's source failed; the gateway answers 503 and
// forwards nothing (never the placeholder).
type UnavailableError struct {
	SecretID string
	Err      error // never contains the value or the command's output
	// Note, when set, is safe to show the sandbox: which binding's token
	// could not be had, and the endpoint's status and error code. Never a
	// value, never a host path.
	Note string
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("secrets: secret %s unavailable: %v", e.SecretID, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// ResponseError says a response to an injected request cannot be scrubbed
// (compressed, upgraded, partial); the gateway answers 502 and passes nothing.
type ResponseError struct {
	Reason string
}

func (e *ResponseError) Error() string { return "secrets: response refused: " + e.Reason }

// BusyError says a request body could not be scanned now: the sandbox's other
// scans hold its whole body-scan budget (Config.MaxBodyScanPerSandbox). The
// gateway answers 429 and forwards nothing; the sandbox may retry once its
// other requests are done. It is a refusal for load, not a denial: nothing is
// flagged.
type BusyError struct {
	Code    string // CodeBodyScanBusy
	Sandbox string
	Limit   int64 // bytes
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("secrets: request refused (%s): sandbox %s already holds its body-scan budget of %d bytes",
		e.Code, e.Sandbox, e.Limit)
}

// HTTPStatus maps an error from this package to the status the gateway sends
// the sandbox: 403 for a Denial, 503 for an UnavailableError, 502 for a
// ResponseError, 429 for a BusyError, 500 for anything else, 0 for nil.
func HTTPStatus(err error) int {
	if err == nil {
		return 0
	}
	var d *Denial
	var u *UnavailableError
	var r *ResponseError
	var b *BusyError
	switch {
	case errors.As(err, &d):
		return http.StatusForbidden
	case errors.As(err, &u):
		return http.StatusServiceUnavailable
	case errors.As(err, &r):
		return http.StatusBadGateway
	case errors.As(err, &b):
		return http.StatusTooManyRequests
	}
	return http.StatusInternalServerError
}
