// Command loadclient is the benchmarks' HTTP client: it runs inside an airlock
// sandbox (through the gateway) and on the host (direct), so both sides of a
// ratio use the same code. It prints one JSON line: requests, errors, bytes
// and seconds. Every run is bounded by -n and -max.
//
// Entry point: main (flags in main.go); package bench builds and runs it.
//
// bench/loadclient must never import: any other airlock package.
package main
