// Package audit owns airlock's tamper-evident egress log (DESIGN.md section 4).
//
// A Writer appends one JSON Record per line from a single goroutine. Every line
// carries Seq (1, 2, 3, ...) and Prev, the lowercase hex SHA-256 of the previous
// line's exact bytes WITHOUT its trailing newline; the very first line of a chain
// has Prev = GenesisPrev (64 zeros). Every CheckpointEvery records, every
// CheckpointInterval, at rotation and at Close the writer appends a record of kind
// "checkpoint" whose Checkpoint field is an Ed25519 signature over
// "airlock-audit-v1\n<upto_seq>\n<head>", where head is that record's own Prev, so
// a verifier holding the public key detects a rewrite of the whole chain.
//
// Rotation renames the live file to <file>.<n> (n = one more than the highest
// existing sibling) and the chain continues in the new file. Retention
// (MaxFiles, MaxBytes) then deletes the oldest rotated files, never the newest,
// after appending a "retention" record that names them and the seq and hash of
// the last line they held; Verify accepts a chain that starts where such a
// signed record says the deleted part ended. On open, a torn last line left by
// a crash is copied to <file>.torn-<UTC time> and cut off, and the chain
// continues from the last whole line.
//
// A failed write (a full disk) makes the writer refuse records (Log, Reserve
// and Err report it) but not for good: it retries with back-off, and once
// writing works it cuts what a partial write left, writes the records it had
// accepted, appends an "audit_outage" record (from, until, how many refused)
// and accepts records again. Budget, a Logger wrapper, bounds each sandbox's
// records of refused requests and counts the rest into summary records.
//
// Redaction happens here as defense in depth: values of Authorization, Cookie,
// Set-Cookie and Proxy-Authorization never reach the file, and query strings are
// logged as keys only.
//
// Package audit imports only the standard library; it must never import policy,
// gateway or any other airlock package (they import it).
package audit
