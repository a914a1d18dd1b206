// Package export ships the audit log to collectors (a SIEM) without ever
// sitting in its write path: a Shipper reads the chain's files (the rotated
// siblings, then the live file, followed with audit.Tail), resumes from the
// last seq a collector acknowledged (kept in a state file written atomically
// after every acknowledged batch), retries a collector that is down with
// capped, jittered exponential back-off, and marks a gap where retention
// deleted records before they were shipped. Sinks encode the records as
// JSONL (the lines as-is, so a collected copy verifies with `airlock audit
// verify`), OCSF 1.x JSON, OTLP logs (HTTP/protobuf or gRPC, with the
// OpenTelemetry Go SDK) or RFC 5424 syslog over TCP or TLS.
//
// Entry points: New (a Shipper from a Config), NewSink, Read. The formats'
// field mapping: audit/DESIGN.md, "Audit export".
//
// audit/export must never import: any other airlock package but audit, budget, hostname,
// identity, oplog, termtext.
package export
