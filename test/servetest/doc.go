// Package servetest runs a real `airlock serve` for the whole-system tests
// (test/e2e) and benchmarks (bench): Start launches the binary with a config
// and run directory, waits until its API answers through package client, and
// kills it when the test ends; Stop sends a signal and waits for the exit.
// The helpers beside it find what a sandbox leaves on the host (processes by
// a marker in their command line, their cgroups, namespaces, state files)
// so a test can prove it is gone.
//
// Entry points: Start, (*Daemon).Stop, MarkedProcs, CgroupsOf, CgroupDirs,
// Namespaces, FilesMentioning.
//
// test/servetest must never import: any other airlock package but api, client,
// config, hostname, identity, test/poll, units.
package servetest
