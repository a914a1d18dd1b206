// Command airlock is the egress gateway for AI-agent sandboxes: run, serve,
// attach, policy, audit, ca, version and the hidden __sandbox-init. It parses
// flags, loads the config and hands over to package daemon; the logic lives in
// the packages.
//
// Entry point: main.go builds the cobra command tree; every subcommand lives in
// its own file. Commands and exit codes: daemon/DESIGN.md; usage: README.md
// and docs/CLI.md.
//
// Built twice (core.go): airlock-core is the whole tree; airlock, with the
// airlock_front tag, leaves out the files that link the gateway, OPA and the
// exporters and executes airlock-core beside it for those commands
// (front.go), so the others start with ~100 package initializers, not ~290.
//
// cmd/airlock must never import: bench/..., netns/netnstest, test/....
package main
