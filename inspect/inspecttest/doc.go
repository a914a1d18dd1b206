// Package inspecttest holds the content-inspection corpus as data: attack
// and benign cases over every transport the gateway inspects (query, path,
// headers, bodies streamed and as JSON, WebSocket frames, gRPC messages,
// consecutive requests, DNS names, MCP and agent-to-agent calls, responses),
// with realistic benign traffic (registry metadata, API calls, source code,
// lock files, base64 images). inspect's tests run it at the library level
// through Evaluate; the gateway's tests replay the same cases through the
// proxy against a fake origin.
//
// Entry points: Cases, Evaluate, Blocks, Rates.
//
// inspect/inspecttest must never import: any other airlock package but inspect.
package inspecttest
