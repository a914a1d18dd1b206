// Command compare is `make bench-compare`: airlock beside the tools users
// would pick instead, measured in one run on one machine, written into a
// marked section of docs/BENCHMARKS.md.
//
// It builds a fake internet (test/fakenet) with one origin, starts the peers
// on loopback (squid with and without ssl-bump, dnsmasq and unbound as
// forwarding caches), and runs each measure against direct, airlock (the
// real binary, real policy and audit, the client inside `airlock run`) and
// the peers, alternating the order, for several rounds; the table holds the
// medians of the rounds and their ratios to direct and to the best peer, and
// each airlock row's targets (goal.go: goals as data, so met or missed is
// computed from the numbers, also by -render).
//
// With -before (BENCH_BEFORE=<rev>: the script builds that revision), every
// airlock subject has a twin run with the before build (before.go, twin):
// in the same rounds, the two alternating which goes first; the daemon rows
// run a daemon of each build in turn (daemonRounds). The table gains a
// "before" column and the after/before ratio. A before build that lacks a
// row's feature (a run flag missing from its help, or a failure naming an
// unknown flag, command or config field) prints n/a for that row.
// Every process, namespace and file it makes is named alk-/airlock- and is
// removed on exit, on failure and on SIGINT/SIGTERM. No traffic leaves
// loopback and the fake internet's namespace.
//
// Entry point: main (flags in main.go); scripts/bench-compare.sh installs
// the peers (Debian packages), makes the rootless rows' user (alk-ci,
// scripts/ci-user.sh), builds both builds and it, and runs it. BENCH_QUICK=1 (-quick)
// is a smoke run that writes under bin/ instead of docs/; -only runs some
// measures and prints their table; -perf records every airlock run with perf.
// The targets are reported beside the numbers, never asserted.
//
// bench/compare must never import: cmd/airlock, daemon, dnsfilter, gateway, netns, policy, sandboxd, secrets.
package main
