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
