// Command airlock-init is the sandbox's init (PID 1 of its namespaces) and the
// files stage init starts, as a binary of its own: it links sandboxd, netns
// (a rootless init builds its island with netns.BuildIsland), the small
// leaves they use and the standard library, so a sandbox start pays about a
// hundred package initializers and a 5 MB image instead of airlock-core's
// ~290 (the gateway, OPA, OCI, Prometheus, OpenTelemetry) and 41 MB. It is not for
// people: it refuses to run unless the executor's stage marker is set, and
// its configuration arrives on fd 3.
//
// The executor finds it beside the running airlock binary
// (sandboxd.InitBinary, checked by sandboxd.New), opens it once and executes that
// open file for every sandbox; without one it re-executes its own binary
// (`airlock __sandbox-init`), so `go run` and an airlock copied alone work.
// `make build` writes it to bin/ next to bin/airlock.
//
// cmd/airlock-init must never import: any other airlock package but sandboxd, netns, audit, budget, hostname, identity, oplog, termtext.
package main
