// Package bench holds airlock's whole-system benchmarks (bench_test.go): the real
// airlock binary against the fake internet of package test/fakenet, each figure
// reported beside the same client's direct result from the same run, as a ratio.
// They need root and skip without it (AIRLOCK_REQUIRE_ROOT_TESTS=1 fails instead).
//
// loadclient is the small HTTP client the benchmarks run both inside a sandbox
// and directly on the host. The package has no code of its own outside tests.
package bench
