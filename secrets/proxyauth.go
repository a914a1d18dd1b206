package secrets

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
)

// ProxyAuthorization returns a function that renders the secret id, whose
// value is "user:password", as a Proxy-Authorization header value (Basic),
// read from its source on each call like any secret: the gateway sends it
// to its parent proxy (config upstream.proxy_auth_secret). It is an error
// when the file has no secret id. The value is never logged; errors never
// carry it.
func (in *Injector) ProxyAuthorization(id string) (func(ctx context.Context) (string, error), error) {
	return in.headerValue(id, func(raw string) (string, error) {
		if !strings.Contains(raw, ":") {
			return "", fmt.Errorf("secrets: secret %q: a proxy credential is user:password", id)
		}
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(raw)), nil
	})
}

// headerValue returns a function that reads the secret id from its source on
// each call and renders it with render (whose errors must never carry the
// value). It is an error when the file has no secret id.
func (in *Injector) headerValue(id string, render func(raw string) (string, error)) (func(ctx context.Context) (string, error), error) {
	s := in.secrets[id]
	if s == nil {
		return nil, fmt.Errorf("secrets: no secret %q", id)
	}
	return func(ctx context.Context) (string, error) {
		v, err := s.get(ctx)
		if err != nil {
			return "", err
		}
		return render(v.value.reveal())
	}, nil
}
