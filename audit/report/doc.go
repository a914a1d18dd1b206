// Package report turns audit logs into a report people can read and hand on:
// one streaming pass over the records (audit.Query) folds them into bounded
// aggregates (per sandbox, per destination, a bucketed timeline, DNS flags,
// secret uses, drops, budget summaries), audit.VerifyFiles checks the chain
// beside it, and the result is written as JSON or as one self-contained HTML
// page that embeds exactly that JSON and draws it with inline script and SVG.
//
// Entry points: Build (the aggregates), Report.WriteJSON, Report.WriteHTML.
// What is aggregated and how it is bounded: audit/DESIGN.md, "Audit report".
//
// audit/report must never import: any other airlock package but audit, budget, hostname,
// identity, oplog, termtext.
package report
