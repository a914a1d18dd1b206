// Package audit owns airlock's tamper-evident egress log: the Record type,
// the single Writer that appends, hash-chains, signs checkpoints, rotates,
// prunes and recovers the file (after a failed write, and after a writer that
// died), the one filter in front of it (Budget: per-sandbox floods of
// refusals folded into summary records, see package budget), the one
// pass-through (Observed) that shows accepted records to observers: the Tally
// behind the egress summary and the Tap that feeds live per-sandbox
// subscribers. And the readers (Verify, Query, Tail, SummaryOf).
//
// The Writer is four files: writer.go (type, New), enqueue.go (the callers'
// side: Log, Reserve, Err, Sync, Close), loop.go (its one goroutine:
// batching, ticks, shutdown), append.go (chain, checkpoints, write, failure).
//
// Entry points: New (the Writer), NewBudget, Observe, NewTally, NewTap, Verify and
// VerifyFiles, Query, Tail. Every writer of records depends only on the Logger seam, and on
// Reserver and Reservation where a request must not leave before its record
// is accepted (record.go). Values of credential headers never reach the file.
//
// How the chain, checkpoints, rotation, retention, recovery and budgets work:
// audit/DESIGN.md, which also lists the record kinds and fields.
//
// audit must never import: any other airlock package but budget, hostname,
// identity, oplog, termtext.
package audit
