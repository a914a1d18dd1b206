// Package bench holds airlock's whole-system benchmarks (bench_test.go): the
// real airlock binary against the fake internet of package test/fakenet, each
// figure reported beside the same client's direct result from the same run,
// as a ratio. They need root and skip without it (AIRLOCK_REQUIRE_ROOT_TESTS=1
// fails instead). bench/loadclient is the client they run on both sides.
//
// Entry point: go test -run '^$' -bench . ./bench/. The package has no code
// of its own outside tests. Numbers measured so far: docs/BENCHMARKS.md.
//
// bench must never import: cmd/airlock, daemon, dnsfilter, gateway, netns,
// policy, sandboxd, secrets.
package bench
