// Package secrets adds credentials to a sandbox's HTTPS requests at the gateway,
// so the sandbox never holds a raw key, and keeps the key from coming back in
// responses (DESIGN.md section 5).
//
// It owns: the secrets file (LoadFile, Parse, Config), the sources of values
// (an environment variable, a file re-read when it changes, a command run on
// the host with a TTL), versions and keyed fingerprints, binding matching,
// placeholders, request checks and response scrubbing. It never decides policy
// and never dials: the gateway asks policy first and only then asks secrets,
// so a binding never widens policy. secrets imports hostname and audit only; it
// must never import policy, gateway or anything that dials.
//
// # Wiring (for the gateway and the executor)
//
//	cfg, err := secrets.LoadFile(path)           // strict YAML, errors name the field
//	inj, err := secrets.New(cfg, logger)
//	sb := secrets.Sandbox(in.Sandbox)            // same fields as policy.Sandbox
//
//	// executor, when it builds a sandbox's environment:
//	env, err := inj.Placeholders(sb)             // PLACEHOLDER_ENV -> airlock-ph-...
//	defer inj.Forget(sb.ID)                      // when the sandbox ends
//
//	// gateway, on a CONNECT or a transparent TLS connection, after policy allowed it:
//	mitm := decision.MITM || inj.NeedsMITM(sb, host, port)
//	err = inj.CheckName(sb, sni)                 // also for DNS questions
//
//	// gateway, on every request that is not intercepted (plain HTTP, CONNECT line):
//	err = inj.Check(sb, req)                     // *Denial -> 403, flag it
//
//	// gateway, on every intercepted request, after policy allowed it, with the
//	// outgoing request (URL scheme https, URL host and Host agreeing):
//	applied, err := inj.Inject(ctx, sb, req)     // runs Check too
//	if err != nil { status := secrets.HTTPStatus(err); ... }   // 403 or 503: send nothing
//	resp, err := transport.RoundTrip(req)        // never follow redirects
//	err = inj.ScrubResponse(applied, resp)       // *ResponseError -> 502: pass nothing
//	... copy resp to the sandbox ...
//	record.Secrets = applied.Audit()             // after the body: id, version, fingerprint, where, scrubbed
//
// Errors: *Denial (HTTPStatus 403; Code is the audit reason id, Flag goes in
// audit.Record.Flags), *UnavailableError (503: a source failed; nothing, not even
// a placeholder, is forwarded), *ResponseError (502), *BusyError (429,
// secret_body_scan_busy: the sandbox's scans hold its whole
// Config.MaxBodyScanPerSandbox; not a denial, nothing is flagged). A body longer
// than Config.MaxBodyScan is scanned while it streams: its reader then fails with
// a *Denial that RoundTrip returns wrapped, before any byte of a placeholder leaves.
//
// # Semantics
//
// A binding applies to a request when the sandbox matches (id, or every listed
// label), the URL scheme is https, the normalized host matches the binding's
// exact host or "*."/"**." pattern, the port matches (default 443), the method
// is listed (or none are), and the path matches a prefix on whole segments.
// Paths to a bound host that use dot segments, "//", backslashes, ";", or the
// encoded bytes %2e %2f %5c %25 %00 %3b are refused, not guessed at. Exactly one
// binding may apply; two is a denial (secret_binding_ambiguous).
//
// Modes: default strips the bound header (plus the strip list) and sets the
// credential from the operator's template ("Bearer {{value}}", "token
// {{value}}", or basic_user for "Basic base64(user:value)"). placeholder does
// the same only when the sandbox's own placeholder is in the bound header (raw
// or inside a Basic credential); the header is then rebuilt from the template.
// require is placeholder, and a request to the bound host without the
// placeholder is denied (the agent cannot bring its own credential). A
// placeholder, or any token starting with airlock-ph-, seen anywhere else (host,
// path, query, fragment, userinfo, another header, a trailer, a body, a DNS name,
// plain HTTP, another port, another sandbox) is denied and flagged.
//
// A sandbox that may hold a placeholder (a placeholder or require binding
// selects it, or one was issued to it: HoldsPlaceholders) could send it to
// any destination policy allows, so the gateway must see everything it sends:
// NeedsMITM is true for every TLS destination of such a sandbox (every
// CONNECT and transparent TLS connection is intercepted), and what it sends on
// a stream that is not parsed as HTTP (a raw TCP tunnel, a websocket after its
// upgrade, whose client frames are unmasked first) goes through a StreamGuard
// that cuts the stream at the chunk that completes the placeholder prefix.
// The trade-off: such a sandbox's clients must trust the airlock CA for every
// host, so a client that pins certificates (or that speaks something other
// than TLS through CONNECT) breaks for every --allow'ed host, not only for
// the bound one; websocket compression is not offered upstream for it.
//
// What the checks recognize is the placeholder as written (any case), after
// percent-decoding in the URL and Basic-decoding in credentials. A sandbox
// that transforms it (base64 in a body, split over two headers, reversed)
// can always hide it; that is accepted, because a placeholder is worth
// nothing outside the gateway: it becomes the secret only in its bound header,
// to its bound destination, from its own sandbox. The flag is an alarm for
// careless or hostile code, not the boundary.
//
// Injected requests also lose Range and If-Range (a partial response could hand
// out a secret a few bytes at a time) and get Accept-Encoding: identity.
// Responses are scrubbed of every form CanaryForms lists, in the status line's
// reason phrase, header names (in any case: they arrive canonicalized or
// lower-cased), values (Location too), trailers and the body, by a streaming
// window of the longest form minus one byte, so a value split across reads,
// chunks or SSE events is still found. A response that cannot be scrubbed is refused: any
// Content-Encoding other than identity (gzip is refused, not decoded), a 101
// upgrade, a 206. Limits: a value inside a compressed payload that is not
// labelled as such (a .tar.gz download) or transformed by the upstream in
// another way cannot be recognized.
//
// Versions: each source value gets "v1", "v2", ... (per process) and a
// fingerprint "hmac-sha256:<32 hex>" keyed by fingerprint_key_file or a random
// per-process key; never a bare hash. A new value is used by new requests; a
// request in flight keeps its Applied (and scrubs the value it sent). A command
// that fails is not run again for retry_after; its stderr is never logged or
// returned (only its size), since it may hold the value.
//
// The Value type prints [REDACTED] through String, GoString, every fmt verb,
// JSON, text, YAML and slog, and errors never carry a value.
//
// # Example secrets file
//
//	secrets:
//	  - id: github
//	    command: ["gh", "auth", "token"]
//	    ttl: 5m
//	  - id: openai
//	    env: OPENAI_API_KEY
//	bindings:
//	  - secret: github
//	    sandboxes: {labels: {agent: coder}}
//	    host: api.github.com
//	    paths: [/repos/acme/]
//	    template: "Bearer {{value}}"
//	  - secret: openai
//	    sandboxes: {labels: {agent: coder}}
//	    host: api.openai.com
//	    template: "Bearer {{value}}"
//	    mode: placeholder
//	    placeholder_env: OPENAI_API_KEY
//
// testdata/example.yaml is a longer example; both are loaded by tests.
package secrets
