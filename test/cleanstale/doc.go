// Package cleanstale tests scripts/clean-stale.sh, the script that removes
// what a crashed test run left (namespaces, links, cgroups, mounts named
// airlock-* or alk*) and, with --check, fails the suite on what a run left
// behind: it must remove a dead process's resources and never one that a
// live process owns, so it can run beside another test run.
//
// Entry point: go test ./test/cleanstale/ (as root; make test runs it).
//
// test/cleanstale must never import: any other airlock package but test/roottest.
package cleanstale
