// Package clienttest is a fake airlock daemon for tests of the daemon's
// clients (package client, the CLI's sandbox commands): the daemon's
// routes on a unix socket, with sandboxes held in memory, execs run as
// host processes of the test in a directory per sandbox that stands for its
// workspace, files kept there, and events the test emits. It checks requests
// as the contract says (strict JSON, fields named in errors, unknown ids 404,
// paths outside the workspace or $HOME refused) but isolates nothing: it is
// not a sandbox. Every response it writes is checked against
// api/openapi.json (api/apitest), and its routes against the document's
// (TestRoutesMatchOpenAPI), so a client test cannot pass against behaviour
// the real daemon does not have. Root tests use the real daemon instead.
//
// Entry points: New (the fake on a socket in t.TempDir()), Serve (any handler
// on a unix socket, for malformed responses).
//
// client/clienttest must never import: any other airlock package but api,
// api/apitest, config, client, hostname, identity, units.
package clienttest
