// Package fakenet builds the "fake internet" the root and end-to-end tests
// (and `make demo`) run against: a network namespace of the test's own,
// reached from the host over a veth, holding addresses in 198.19.N.0/24
// (inside the 198.18.0.0/15 benchmark range no real host uses), a DNS server
// that answers for real names (pypi.org, registry.npmjs.org, github.com ...),
// and HTTP and TLS servers with a test CA for those names.
//
// Every server counts what reaches it, so a "blocked" test can prove the
// target saw nothing: TCP connections per host, HTTP requests, UDP datagrams,
// ICMP echo requests and DNS queries. Everything it creates is named
// alk-inet-* / alk-i* and removed by Close; Clean removes what a crashed run
// left. It needs root. Only tests, benchmarks and test/cmd/fakenet import it.
//
// Entry point: New.
//
// test/fakenet must never import: any other airlock package but test/tcptest.
package fakenet
