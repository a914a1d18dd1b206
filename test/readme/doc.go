// Package readme checks that every example in the top-level README and in
// the reference documents under docs/ (wherever an example lives) still
// works, and that every airlock command has one: the YAML config decodes
// strictly, the secrets file validates, the Rego policy compiles in strict
// mode against the input schema, the CNI conflist parses as libcni and
// airlock-cni read it, every airlock (and airlock-cni) command line names
// subcommands and flags that exist, and the Go client's instructions build
// its example in a new module. As root it also runs `make demo`'s script and
// checks what it shows, the `airlock run` examples from a project directory
// (TestRootReadmeRun), the daemon section's commands for real
// (TestRootReadmeDaemon) and the Python agent loop against a real serve.
//
// Entry point: go test ./test/readme/. The package has no code of its own
// outside tests; it builds ./cmd/airlock and ./cmd/airlock-cni and runs them.
//
// test/readme must never import: cmd/airlock, daemon, dnsfilter, gateway,
// netns, sandboxd.
package readme
