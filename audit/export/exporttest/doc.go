// Package exporttest has the collectors audit/export's tests ship to: an
// OTLP/HTTP receiver that decodes protobuf, an OTLP/gRPC logs service, and an
// RFC 5424 syslog listener over TCP or TLS (RFC 6587 octet counting). Each
// keeps the record lines it received, can be taken down and brought back,
// and listens on loopback only.
//
// audit/export/exporttest must never import: any other airlock package.
package exporttest
