// Package api holds the wire types of the daemon's HTTP+JSON API (the
// `airlock serve` unix socket): requests, responses, exec stream frames,
// events and error codes. The daemon serves them, package client and the
// Python client speak them, and api/openapi.json describes them.
//
// Entry point: the types themselves; there is no logic here beyond JSON.
//
// api must never import an airlock package other than config (for the Size
// and Duration spellings).
package api
