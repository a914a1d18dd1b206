package api

import "net/http"

// codeStatuses pairs each error code with its HTTP status. For a status
// several codes share, the first listed is the one StatusCode's inverse,
// CodeOf, returns.
var codeStatuses = []struct {
	code   string
	status int
}{
	{CodeBadRequest, http.StatusBadRequest},
	{CodeInvalidField, http.StatusBadRequest},
	{CodeInvalidPath, http.StatusBadRequest},
	{CodeNotFound, http.StatusNotFound},
	{CodeForbidden, http.StatusForbidden},
	{CodeConflict, http.StatusConflict},
	{CodeTooLarge, http.StatusRequestEntityTooLarge},
	{CodeLimit, http.StatusTooManyRequests},
	{CodeUnprocessable, http.StatusUnprocessableEntity},
	{CodeUnavailable, http.StatusServiceUnavailable},
}

// StatusOf is the HTTP status an error with code is answered with; an
// unknown code is 500.
func StatusOf(code string) int {
	for _, c := range codeStatuses {
		if c.code == code {
			return c.status
		}
	}
	return http.StatusInternalServerError
}

// CodeOf is the code of an error response whose body carried none (a proxy
// or an older daemon in between): the first code answered with status, and
// CodeForbidden for 401; CodeInternal for any other status.
func CodeOf(status int) string {
	if status == http.StatusUnauthorized {
		return CodeForbidden
	}
	for _, c := range codeStatuses {
		if c.status == status {
			return c.code
		}
	}
	return CodeInternal
}
