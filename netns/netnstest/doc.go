// Package netnstest is test support for code that makes network namespaces and
// links: names that are unique per test and carry the creating process's pid
// (LinkName, SandboxID, NSName), and RemoveStale, which deletes what a crashed earlier run
// left behind without touching what a concurrently running test still uses.
//
// Only tests import it.
//
// netns/netnstest must never import: any other airlock package.
package netnstest
