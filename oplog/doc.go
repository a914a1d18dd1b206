// Package oplog names the fields of airlock's operational log, the log/slog
// lines operators read (not the audit log, which package audit writes): every
// component logs a sandbox, an error, a policy revision under the same key
// (SandboxKey, ErrorKey, PolicyRevKey, ...), so one query finds a sandbox's
// lines across the gateway, the DNS filter, netns, secrets and the daemon. A
// key only one package logs stays a literal at its call site; a line that
// logs an audit record's fields uses the record's own keys from audit.
//
// Entry point: For(logger, component), the scoped logger every constructor
// keeps (a nil logger discards).
//
// oplog must never import: any other airlock package.
package oplog
