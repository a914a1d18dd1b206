// Package api holds the wire types of the daemon's API (sandboxes, exec
// stream frames, files, events, error codes) as the contract between the
// daemon (package daemon serves them) and its clients, and the OpenAPI 3
// document that describes every route (openapi.json, embedded: OpenAPI).
//
// Entry point: the types themselves and OpenAPI; there is no logic here
// beyond JSON. It uses units for the Size and Duration spellings and
// identity for Pod.
//
// api must never import: any other airlock package but hostname, identity,
// units.
package api
