package main

import (
	"os"
	"path/filepath"
	"strings"
)

// The front and the core. `make build` writes airlock twice from this
// package: bin/airlock-core is the whole command tree (as `go build` and
// `go run` give it), bin/airlock is the front, built with the airlock_front
// tag, which leaves out the files that link the gateway, OPA and the
// exporters (their files carry //go:build !airlock_front). The front runs
// every other command itself and, for the commands below, executes
// airlock-core from beside it with the same arguments (front.go), so a
// user still types `airlock <command>` and sees the same help and exit
// status. `airlock run` is the front's own: through a daemon it stays in
// the front; in-process it is handed to the core (run_inprocess.go).
//
// A new command: if its file imports gateway, daemon, policy, netns,
// audit/export (or anything that reaches OPA, goproxy, Prometheus or
// OpenTelemetry), tag the file //go:build !airlock_front, add a row below
// and a one-line constructor in front.go. Otherwise add nothing: the front
// links it. TestCoreCommands checks the rows against the real commands;
// TestFrontDeps fails when the front links the heavy packages.

// frontTag is the build tag that makes this package the front.
const frontTag = "airlock_front"

// coreBinary is the core's file name, looked for beside the front.
const coreBinary = "airlock-core"

// coreCommand is a command only the core runs: its path below the root and
// what the front's help lists for it (the real command's Short and Hidden).
type coreCommand struct {
	path   string
	short  string
	hidden bool
}

// coreCommands are the commands the front hands to the core.
var coreCommands = []coreCommand{
	{path: "attach", short: "Give an existing network namespace (a container's or a VM's) airlock's listeners and rules until interrupted"},
	{path: "audit export", short: "Ship audit records to a SIEM or collector as OCSF, OTLP logs, RFC 5424 syslog or JSONL"},
	{path: "ca", short: "Manage the TLS interception CA"},
	{path: "policy", short: "Test, check, evaluate, suggest and replay Rego egress policies (the embedded default when no directory is given)"},
	{path: "serve", short: "Run the gateway, DNS filter and executor as a daemon with an HTTP+JSON API on a unix socket"},
	{path: "__sandbox-init", hidden: true},
}

// nameProcess gives the core the name ps and top show for the front: the
// front executes it from an open file (front.go), which names the process
// after the descriptor ("5").
func nameProcess() {
	b, err := os.ReadFile("/proc/self/comm")
	if err != nil || strings.Trim(string(b), "0123456789\n") != "" {
		return
	}
	_ = os.WriteFile("/proc/self/comm", []byte(filepath.Base(os.Args[0])), 0)
}
