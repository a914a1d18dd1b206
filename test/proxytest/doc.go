// Package proxytest serves a counting CONNECT proxy for tests of airlock's
// parent-proxy support: Serve accepts on a listener the test made (loopback
// in gateway's tests, an address inside the fake internet in test/e2e),
// records every connection, CONNECT target and Proxy-Authorization it sees,
// and relays a CONNECT only to what the test's dial function opens for the
// target (anything else is answered 502, never dialed). Only tests import it.
//
// Entry points: Serve, (*Parent).Seen.
//
// test/proxytest must never import: any other airlock package.
package proxytest
