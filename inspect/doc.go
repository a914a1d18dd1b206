// Package inspect owns the content detectors the gateway runs on what leaves
// a sandbox through an allowed destination and on what comes back:
// credentials (gitleaks' MIT rule set, embedded as data in rules/, behind one
// keyword automaton whose single pass also finds the token runs the decoders
// read, so cost does not grow with the rule count); the same data encoded
// (base64 std and url-safe, base32, hex, URL and double URL encoding, \u and
// \x escapes, reversal; bounded depth and bytes) or split (fields of one
// message, writes of one Stream, requests of one sandbox in a Window);
// high-entropy DNS labels and URL path segments (a scored finding, never a
// block by itself); canaries, keyed decoys recognized without a list; and
// instructions injected into responses (imperative text, tag and zero-width
// characters, HTML comments and hidden elements, MCP tool descriptions,
// agent cards). A Finding carries a keyed fingerprint, never the value.
// ParseJSONRPC and ParseLLM read MCP, agent-to-agent and LLM API bodies for
// policy; malformed input is an error wrapping ErrMalformed, never a panic.
//
// It cannot find data sent by timing or ordering, transformations no decoder
// here undoes (encryption, compression, custom alphabets, pieces finer or
// farther apart than a Window keeps, pieces under 4 bytes across requests),
// or secrets with no known format that are not canaries. A canary folded to
// one case (a DNS name) is recognized by its format or by the set of
// canaries For issued; the clean-input cache, the folded canaries and the
// prefilter are in DESIGN.md. inspecttest holds the corpus the gateway
// replays.
//
// Entry points: New (Scan, ScanFields, NewStream, Window, ScanResponse),
// ParseJSONRPC, ParseLLM, JSONFields, NewCanaries (For gives the Files and
// EnvList that sandboxd.StartSpec.HomeFiles and DefaultEnv plant).
//
// inspect must never import: any other airlock package.
package inspect
