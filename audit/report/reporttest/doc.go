// Package reporttest writes the signed audit logs the report's tests read (a
// small realistic one whose every number the tests know by heart, a large
// generated one for the size and speed bar) and opens a report in headless
// chromium that cannot reach any network, to read what the page shows.
//
// Entry points: Write, WriteLarge, Chromium, Open.
//
// audit/report/reporttest must never import: any other airlock package but audit, budget, hostname,
// identity, oplog, termtext.
package reporttest
