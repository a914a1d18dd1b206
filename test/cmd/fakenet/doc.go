// Command fakenet runs a fake internet for `make demo` and manual testing: a
// namespace reachable from the host with a DNS server and HTTPS servers for
// real registry names, signed by a throwaway CA. It writes an env file
// describing it (FAKENET_DNS, FAKENET_CIDR, FAKENET_CA, one FAKENET_HOST_<name>
// per server) and serves until interrupted, then removes everything it made.
//
// Entry point: main (flags in main.go); scripts/demo.sh runs it.
//
// test/cmd/fakenet must never import: any other airlock package but test/fakenet, test/tcptest.
package main
