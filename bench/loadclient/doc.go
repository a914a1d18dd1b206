// Command loadclient is the benchmarks' HTTP client: it runs inside an airlock
// sandbox (through the gateway) and on the host (direct), so both sides of a
// ratio use the same code. It prints one JSON line: requests, errors, bytes
// and seconds. Every run is bounded by -n and -max. -tunnel reaches the proxy
// with CONNECT for http:// URLs too; -hold N opens N connections (tunnels),
// holds them and then asks once on each (bench/compare's memory measure);
// -upload N POSTs an N-byte text body with each request (the body scan).
//
// Entry point: main (flags in main.go); package bench builds and runs it.
//
// bench/loadclient must never import: any other airlock package.
package main
