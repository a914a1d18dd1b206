// Package client is the Go client of airlock's daemon API (the routes of
// `airlock serve` on its unix socket, wire types in package api): sandboxes,
// streaming exec with stdin, files as tar streams, the events stream, one-shot
// run, attach, policy reload, summary and health. The CLI's `airlock sandbox`
// and `airlock run` (through a daemon) are built on it.
//
// Entry point: New(socket) and the *Client methods; Exec streams a command's
// output to writers, StartExec gives its frames, Events the sandbox's
// decisions. An error the daemon returned is an *api.Error (errors.As); a
// daemon that cannot be reached is a *ConnError. Cancelling a call's context
// closes its request, which ends a running exec on the server.
//
// client must never import: any other airlock package but api, config,
// hostname, identity, units.
package client
