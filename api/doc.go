// Package api holds the wire types of the daemon's planned sandbox API
// (sandboxes, exec stream frames, files, events, error codes) as the contract
// between the daemon and its clients (issue 10). Nothing serves them yet: the
// daemon's API today is daemon.Handler (docs/ARCHITECTURE.md, "Daemon and
// command line"; "Known gaps").
//
// Entry point: the types themselves; there is no logic here beyond JSON. It
// uses config only for the Size and Duration spellings.
//
// api must never import: any other airlock package but config.
package api
