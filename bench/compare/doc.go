// Command compare is `make bench-compare`: airlock beside the tools users
// would pick instead, measured in one run on one machine, written into a
// marked section of docs/BENCHMARKS.md.
//
// It builds a fake internet (test/fakenet) with one origin, starts the peers
// on loopback (squid with and without ssl-bump, dnsmasq, unbound), and runs
// each measure against direct, airlock (the real binary, policy and audit,
// the client inside `airlock run`) and the peers, alternating the order, for
// several rounds: medians, ratios to direct and to the best peer, and each
// airlock row's targets (goal.go: data, so met or missed is computed, also
// by -render; reported, never asserted).
//
// With -before (BENCH_BEFORE=<rev>), every airlock subject has a twin run
// with that build (before.go, twin) in the same rounds, the two alternating;
// daemon rows run a daemon of each build in turn (daemonRounds). The table
// gains a "before" column and the after/before ratio; a build that lacks a
// row's feature (a run flag absent from its help, or a failure naming an
// unknown flag, command or config field) prints n/a there. Every process,
// namespace and file it makes is named alk-/airlock- and removed on exit,
// on failure and on SIGINT/SIGTERM; no traffic leaves loopback and the fake
// internet's namespace.
//
// Entry point: main (flags in main.go); scripts/bench-compare.sh installs
// the peers, makes the rootless rows' user (alk-ci, scripts/ci-user.sh),
// builds both builds and runs it. -quick (BENCH_QUICK=1) is a smoke run
// written under bin/; -only runs some groups and prints their table; -perf
// records every airlock run with perf.
//
// bench/compare must never import: cmd/airlock, daemon, dnsfilter, gateway, netns, policy, sandboxd, secrets.
package main
