// Package reporttest writes the signed audit logs the report's tests read: a
// small realistic one whose every number the tests know by heart, and a large
// generated one for the size and speed benchmark.
//
// Entry points: Write, WriteLarge.
//
// audit/report/reporttest must never import: any other airlock package but audit, oplog.
package reporttest
