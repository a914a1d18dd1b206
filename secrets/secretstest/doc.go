// Package secretstest is test support for code that must keep an injected
// credential from coming back to a sandbox: Upstream, an HTTP server that
// leaks the credential a request carries in every place a response can hold
// it (headers, header names, bodies, chunks, events, trailers, the status
// line, a redirect) and counts the requests that carried a watched value.
// Only tests import it, secrets' own included.
//
// Entry points: New (plain or TLS with a given certificate), NewTLS.
//
// secrets/secretstest must never import: any other airlock package.
package secretstest
