package secrets

import (
	"context"
	"fmt"
	"strings"
)

// BearerAuthorization returns a function that renders the secret id as an
// Authorization header value, "Bearer <value>", read from its source on each
// call like any secret: the policy bundle source sends it to the bundle
// server (config policy.bundle.token_secret). It is an error when the file has
// no secret id. The value is never logged; errors never carry it.
func (in *Injector) BearerAuthorization(id string) (func(ctx context.Context) (string, error), error) {
	return in.headerValue(id, func(raw string) (string, error) {
		if strings.ContainsAny(raw, "\r\n") {
			return "", fmt.Errorf("secrets: secret %q: a bearer token is one line", id)
		}
		return "Bearer " + raw, nil
	})
}
