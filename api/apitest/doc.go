// Package apitest checks HTTP exchanges against the daemon's contract,
// api/openapi.json: Handler wraps any handler (the fake daemon of
// client/clienttest) so that every response it writes must be a documented
// route, a documented status of it, and a body that matches its schema
// (NDJSON lines and server-sent events each on their own). A test double
// that answers what the real daemon does not is caught where it is used.
//
// Entry points: Load, (*Checker).Handler, Check (a handler that fails the
// test on a mismatch), RegisterStreamDecoders.
//
// api/apitest must never import: any other airlock package but api,
// hostname, identity, units.
package apitest
