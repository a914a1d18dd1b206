// Package fakenet builds the "fake internet" the root and end-to-end tests (and
// `make demo`) run against: a network namespace of the test's own, reached from
// the host over a veth, holding addresses in 198.19.N.0/24 (inside the
// 198.18.0.0/15 benchmark range that no real host uses), a DNS server that
// answers for real names (pypi.org, registry.npmjs.org, github.com ...), and
// HTTP and TLS servers with a test CA for those names.
//
// Every server counts what reaches it, so a "blocked" test can prove the target
// saw nothing: TCP connections per host, HTTP requests, UDP datagrams, ICMP
// echo requests (from an iptables counter inside the namespace) and DNS queries.
//
// Everything it creates is named alk-inet-* / alk-i* and removed by Close, and
// Clean removes what a crashed run left. It needs root.
//
// fakenet is test support: no airlock package may import it outside tests,
// except the demo command under test/cmd.
package fakenet
