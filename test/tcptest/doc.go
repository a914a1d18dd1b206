// Package tcptest serves raw TCP in tests, as net/http/httptest serves HTTP:
// Serve hands every connection a listener accepts to a handler on its own
// goroutine, and Listen does so on a fresh loopback listener that closes when
// the test ends. Only tests and test support (test/fakenet) import it.
//
// Entry points: Listen, Serve.
//
// test/tcptest must never import: any other airlock package.
package tcptest
