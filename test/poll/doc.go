// Package poll waits, in tests, for a condition another goroutine or process
// makes true (a record written, a pool filled, a process gone): it checks an
// observable state until it holds or a limit passes, and never asserts on
// elapsed time. Only tests import it.
//
// Entry points: Until (fails the test at the limit), Within (reports it).
//
// test/poll must never import: any other airlock package.
package poll
