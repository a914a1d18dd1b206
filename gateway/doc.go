// Package gateway is airlock's filtering HTTP/HTTPS proxy: the explicit proxy
// (absolute-form HTTP and CONNECT on its own loop, goproxy dispatching each
// request to the pipeline; SOCKS5), the transparent listener for connections
// redirected inside a sandbox's namespace (raw TCP decided by the name the
// sandbox resolved), TLS interception where policy or a secret binding asks
// (HTTP/1.1 or HTTP/2 by ALPN; h2c with prior knowledge on the listeners and
// in a CONNECT), and the guarded dialer with its per-sandbox upstream pool.
//
// Every request, tunnel, connection and HTTP/2 stream (h2.go: one stream is one
// request) goes through one pipeline, coded once in (*Gateway).serve
// (pipeline.go; the stages before relay are the list admitStages), in order:
//
//	normalize -> screen (secrets) -> inspect (content, inspect.go) -> decide
//	  -> reserve (audit room) -> inject (secrets) -> dial (ipguard) -> relay
//	refuse: the one place that answers a refusal
//	finish: the one deferred call that writes the audit record
//
// A CONNECT's dial only resolves and checks; it connects in relay, once what
// the tunnel carries is decided, so nothing refused is ever dialed. Tunnels and
// websockets are re-decided on a policy change and on one sandbox's (Redecide,
// UpdateSandbox); a streamed body or websocket message on a new content
// finding (inspect.go); an Ask decision waits for Config.Approver (approval.go).
//
// Entry points: New, (*Gateway).ServeSandbox, UpdateSandbox, StopSandbox,
// Shutdown, Redecide. Seams: policy.Decider, audit.Logger, Resolver,
// SandboxNamer, Injector (secrets), Inspector (content). Each stage, transparent
// sniffing and HTTP/2: gateway/DESIGN.md.
//
// gateway must never import: config, dnsfilter, netns, sandboxd, daemon,
// cmd/airlock.
package gateway
