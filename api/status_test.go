package api

import (
	"net/http"
	"testing"
)

// TestStatusOf pins the status of every code (the Code* comments) and that a
// bodiless error response maps back to a code answered with that status.
func TestStatusOf(t *testing.T) {
	tests := []struct {
		code   string
		status int
	}{
		{CodeBadRequest, 400}, {CodeInvalidField, 400}, {CodeInvalidPath, 400},
		{CodeNotFound, 404}, {CodeForbidden, 403}, {CodeConflict, 409},
		{CodeTooLarge, 413}, {CodeLimit, 429}, {CodeUnprocessable, 422},
		{CodeUnavailable, 503}, {CodeInternal, 500}, {"no-such-code", 500},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			if got := StatusOf(tt.code); got != tt.status {
				t.Fatalf("got %d, want %d", got, tt.status)
			}
			if got := StatusOf(CodeOf(tt.status)); got != tt.status {
				t.Fatalf("CodeOf(%d) = %q, whose status is %d", tt.status, CodeOf(tt.status), got)
			}
		})
	}
	if got := CodeOf(http.StatusUnauthorized); got != CodeForbidden {
		t.Fatalf("CodeOf(401): got %q, want %q", got, CodeForbidden)
	}
	if got := CodeOf(http.StatusBadRequest); got != CodeBadRequest {
		t.Fatalf("CodeOf(400): got %q, want %q", got, CodeBadRequest)
	}
}
