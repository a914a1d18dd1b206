// Package budget owns the one windowed audit budget airlock uses wherever a
// sandbox can cause records cheaply: the gateway's refusals (audit.Budget)
// and the DNS filter's queries. A Meter is one sandbox's budget: a GCRA token
// Bucket of individual records and, past it, one Summary window at a time
// that counts what had no record of its own until the window's interval ends
// and its summary is written. A summary its writer refuses is carried into
// the next window; one refused after Close is handed to Hooks.Lost. Every
// event is either its own record or counted in exactly one summary.
//
// A Summary is bounded whatever a sandbox sends (MaxKeys values per count,
// MaxNames distinct names) and renders itself as a record's extra fields
// (Summary.Extra) in one place for every caller.
//
// Entry points: NewMeter, NewBucket, NewSummary, (*Summary).Extra.
//
// budget must never import: any other airlock package.
package budget
