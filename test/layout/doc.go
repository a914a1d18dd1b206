// Package layout checks the shape of the repository as a whole: every package
// in the module (go list ./...) has exactly one package doc comment, in its
// doc.go, of at most 30 lines, ending in its import rule
//
//	<path> must never import: <path>, <path>, ....
//	<path> must never import: any other airlock package.
//	<path> must never import: any other airlock package but <path>, <path>.
//
// and that rule holds: no package depends on a forbidden one, directly or
// through another airlock package. Paths are relative to the module; a path
// ending in /... names it and everything below it. A package's non-test code is
// what the rule covers; for a package that is only a doc.go beside tests, its
// tests. The failure message shows the import chain. TestMap keeps the map,
// docs/ARCHITECTURE.md, true: every package in its table, on a floor above
// what it imports, and every function its walks name declared.
//
// Entry point: go test ./test/layout/ (make test runs it). The package has no
// code of its own outside tests.
//
// test/layout must never import: any other airlock package.
package layout
