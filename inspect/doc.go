// Package inspect owns the content detectors the gateway runs on what leaves
// a sandbox through an allowed destination, and on what comes back: credential
// formats (gitleaks' MIT rule set, embedded as data, behind one keyword
// automaton so cost does not grow with the rule count), the same data encoded
// (base64 std and url-safe, base32, hex, URL and double URL encoding, \u and \x
// escapes, reversal; bounded depth and size) or split (across the fields of one
// message, the writes of one stream, the requests of one sandbox in a window),
// high-entropy labels in DNS names and URL paths (a scored finding, never a
// block by itself), canary credentials planted in every sandbox, and
// instructions injected into responses (imperative tool-use text, hidden and
// zero-width text, poisoned MCP tool descriptions and agent cards).
//
// A Finding names the detector, where it was found, the decoding chain and a
// keyed fingerprint; never the matched value. Policy decides what a finding
// does. ParseJSONRPC and ParseLLM turn MCP, agent-to-agent and LLM API bodies
// into policy input; malformed input is an error, never a panic.
//
// What it cannot find: data sent by timing or ordering (covert channels),
// transformations no decoder here undoes (encryption, compression, custom
// alphabets, splitting finer than a window keeps), and secrets without a known
// format or a canary's mark.
//
// Entry points: New (Scanner.Scan, ScanFields, NewStream, Window,
// ScanResponse), ParseJSONRPC, ParseLLM, JSONFields, NewCanaries.
//
// inspect must never import: any other airlock package.
package inspect
