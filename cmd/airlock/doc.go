// Command airlock is the egress gateway for AI-agent sandboxes: run, serve,
// attach, policy, audit, ca, version and the hidden __sandbox-init. It parses
// flags, loads the config and hands over to package daemon; the logic lives in
// the packages.
//
// Entry point: main.go builds the cobra command tree; every subcommand lives in
// its own file. Commands and exit codes: daemon/DESIGN.md; usage: README.md.
//
// cmd/airlock must never import: bench/..., netns/netnstest, test/....
package main
