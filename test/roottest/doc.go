// Package roottest gates tests that need root: namespaces, iptables, cgroups
// and the executor. They skip with "requires root" for an unprivileged
// developer and fail instead when AIRLOCK_REQUIRE_ROOT_TESTS=1 (set in CI), so
// a CI machine that lost root cannot go green by skipping.
//
// Entry point: Require(t), first thing in every root test.
//
// test/roottest must never import: any other airlock package.
package roottest
