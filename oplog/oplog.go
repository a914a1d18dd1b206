// Package oplog names the fields of airlock's operational log: the log/slog
// lines operators read, which are not the audit log (package audit writes
// that). Every component logs a sandbox, an error, a policy revision under
// the same key, so one query finds a sandbox's lines across the gateway, the
// DNS filter, netns, secrets and the daemon; For scopes a component's logger.
//
// A key that only one package logs stays a literal at its call site; a line
// that logs an audit record's fields (a summary that could not be written)
// uses the record's own keys from package audit.
//
// oplog imports only the standard library and must never import an airlock
// package: every package that logs imports it, audit and policy included.
package oplog

import "log/slog"

// Keys, named as log/slog names its own (slog.MessageKey). The request keys
// spell the audit record's JSON fields, so a log line and an audit record of
// the same request read alike.
const (
	ComponentKey = "component"  // the part of airlock that logged (For)
	SandboxKey   = "sandbox"    // a sandbox id
	ErrorKey     = "error"      // the error, never "err"
	PolicyRevKey = "policy_rev" // a policy revision
	IDKey        = "id"         // a decision id (X-Airlock-Decision, audit id)
	KindKey      = "kind"       // a decision kind (http, connect, tls, tcp, dns)
	HostKey      = "host"       // a destination host
	PortKey      = "port"       // a destination port
	PathKey      = "path"       // a file-system path
	FileKey      = "file"       // a file a component owns (the audit log)
)

// For returns logger scoped to component (ComponentKey), or a logger that
// discards everything when logger is nil.
func For(logger *slog.Logger, component string) *slog.Logger {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return logger.With(ComponentKey, component)
}
