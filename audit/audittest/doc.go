// Package audittest is test support for code that writes audit records: Log,
// an in-memory audit.Logger that is also an audit.Reserver and an audit.Health
// and fails as the real writer does (Break, Refuse, RefuseRoom), with Wait,
// Kind, Match and Last to find records; Discard; ReadFile and ReadLog for a
// real audit file; HasReason. Only tests import it.
//
// Entry point: a &Log{} handed to the code under test as its audit.Logger.
//
// audit/audittest must never import: any other airlock package but audit, budget,
// hostname, identity, oplog, termtext, test/poll.
package audittest
