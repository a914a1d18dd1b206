// Package audit owns airlock's tamper-evident egress log: the Record type,
// the single Writer that appends, hash-chains, signs checkpoints, rotates,
// prunes and recovers the file (after a failed write, and after a writer that
// died), the per-sandbox Budget that folds floods of refusals into summary
// records, the Tally behind the egress summary, the Tap that feeds live
// per-sandbox subscribers, and the readers (Verify, Query, Tail).
//
// Entry points: New (the Writer), NewBudget, NewTally, NewTap, Verify and
// VerifyFiles, Query, Tail. Every writer of records depends only on the Logger seam, and on
// Reserver and Reservation where a request must not leave before its record
// is accepted (record.go). Values of credential headers never reach the file.
//
// How the chain, checkpoints, rotation, retention, recovery and budgets work:
// docs/ARCHITECTURE.md, "Audit log". Record kinds and fields: the same section.
//
// audit must never import: any other airlock package but oplog, termtext.
package audit
