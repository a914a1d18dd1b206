// Command airlock-init is the sandbox's init (PID 1 of its namespaces) and the
// files stage init starts, as a binary of its own: it links sandboxd and the
// standard library only, so a sandbox start pays a few dozen package
// initializers and a 3 MB image instead of the airlock binary's ~280 (the
// gateway, OPA, OCI, Prometheus, OpenTelemetry) and 39 MB. It is not for
// people: it refuses to run unless the executor's stage marker is set, and
// its configuration arrives on fd 3.
//
// The executor finds it beside the running airlock binary
// (sandboxd.InitBinary, checked by sandboxd.New), opens it once and executes that
// open file for every sandbox; without one it re-executes its own binary
// (`airlock __sandbox-init`), so `go run` and an airlock copied alone work.
// `make build` writes it to bin/ next to bin/airlock.
//
// cmd/airlock-init must never import: any other airlock package but sandboxd, audit, budget, hostname, identity, oplog, termtext.
package main
