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

// HTTPStatus maps an error from this package to the status the gateway sends
// the sandbox: 403 for a Denial, 503 for an UnavailableError, 502 for a
// ResponseError, 500 for anything else, 0 for nil.
func HTTPStatus(err error) int {
	if err == nil {
		return 0
	}
	var d *Denial
	var u *UnavailableError
	var r *ResponseError
	switch {
	case errors.As(err, &d):
		return http.StatusForbidden
	case errors.As(err, &u):
		return http.StatusServiceUnavailable
	case errors.As(err, &r):
		return http.StatusBadGateway
	}
	return http.StatusInternalServerError
}
