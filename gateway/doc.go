// Package gateway is airlock's filtering HTTP/HTTPS proxy: the explicit proxy
// (plain HTTP in absolute form and CONNECT), the transparent listener that
// receives connections redirected inside a sandbox's namespace, TLS interception
// where policy or a secret binding asks for it, and the guarded dialer.
//
// Every request, tunnel and connection goes through one pipeline, in this order,
// coded once in (*Gateway).serve:
//
//	listener (explicit | transparent)
//	  -> identify sandbox: the sandbox whose listener accepted the connection;
//	     nothing the sandbox sends can change it
//	  -> normalize destination: hostname.Normalize on the CONNECT target, the URL
//	     host, the Host header and the TLS SNI; all of them must name the same host
//	     (and port) on every request of a connection, else deny (domain fronting);
//	     a query of more than MaxQueryParams parameters is denied here, before
//	     policy (a query cut short could hide what a deny rule looks for)
//	  -> secrets screen: a placeholder in a name (CONNECT host, SNI), the CONNECT
//	     line or any request that is not its binding's is denied and flagged
//	     (Injector.CheckName, Injector.Check), whatever policy would say; the
//	     body Check reads must arrive whole within BodyScanTimeout, else 408
//	     body_scan_timeout
//	  -> policy.Decide: fail closed (an error, undefined result or timeout is a
//	     deny); a secret binding forces interception of an allowed tunnel, and
//	     so does a sandbox that holds placeholders, for every tunnel
//	     (Injector.NeedsMITM; no CA configured is a deny, mitm_unavailable)
//	  -> audit reserve: when the audit log can hold room (audit.Reserver,
//	     overflow deny), room for an allowed HTTP request's record is taken
//	     now, before anything leaves; no room is a deny, audit_unavailable
//	  -> secrets inject: Injector.Inject, only after allow, only on intercepted
//	     requests, whose upstream connection is always verified TLS; the
//	     response goes through Injector.ScrubResponse before a byte of it
//	     reaches the sandbox, and redirects are never followed
//	  -> dial: resolve through the gateway's Resolver (never the sandbox's answer),
//	     charged to the requesting sandbox when it is a SandboxResolver (a
//	     refusal by the sandbox's DNS limits is a denial with their reason),
//	     check every candidate with ipguard, dial exactly the address checked;
//	     kept-alive upstream connections are pooled per sandbox and destination
//	     (one that carried a sandbox's exchange never carries another's) and
//	     StopSandbox closes the stopped sandbox's idle ones
//	  -> relay: HTTP request/response, CONNECT or TLS passthrough tunnel, or the
//	     intercepted (MITM) request loop, where each inner request runs this
//	     pipeline again as kind http; a CONNECT tunnel relays nothing until
//	     the client's first bytes say what it carries (below)
//	  -> audit: one record per request, tunnel or connection, written by one
//	     deferred call (through its reservation, if any); tunnels also get a
//	     close record with bytes and duration, whose room is reserved when the
//	     decision record is written, before the tunnel's bytes flow;
//	     a record lists at most 64 query keys (never values) and cuts the path,
//	     method, messages and errors to fixed bounds
//
// Exactly one function writes a refusal to the client (403 with a short body
// naming the reason id and the decision id, header X-Airlock-Decision). A
// secrets error maps through secrets.HTTPStatus (403 denial, 503 source
// unavailable, 502 unscrubbable response); a *secrets.Denial's Code is the
// record's reason id and its Flag goes in the record's flags.
//
// A CONNECT allows a destination, not every protocol to it. Unless it is
// intercepted, the client's first bytes are sniffed as the transparent
// listener sniffs them (first byte within PeekTimeout; a ClientHello complete
// within HandshakeTimeout and 16 KiB, else refused) and the tunnel carries
// TLS whose ClientHello names the CONNECT host (one without a server name
// only where policy allows kind tls with an empty sni for the destination),
// plaintext HTTP served by a session pinned to the CONNECT's host and port
// (every request decided and audited as kind http), or opaque bytes, or none
// (a server-first protocol), only where policy allows kind tcp to the same
// host and port. The second decision is the tunnel record's, and the record's
// extra.carries says what the tunnel carried.
//
// A sandbox that holds placeholders (Injector.HoldsPlaceholders) has every TLS
// tunnel intercepted, so the placeholder check sees each request it sends
// anywhere; its clients must then trust the airlock CA for every host (a
// client that pins a certificate, or a non-TLS protocol through CONNECT,
// fails for such a sandbox). What it sends on a raw TCP tunnel or a websocket
// after the upgrade is checked chunk by chunk (secrets.StreamGuard, splice
// given up); a placeholder cuts the stream and the close record (or the
// websocket's request record) carries the denial and its flag.
//
// Decisions are not cached here: policy.Engine caches per policy revision.
//
// The explicit proxy's front is github.com/elazarl/goproxy (explicit.go): one
// http.Server per sandbox listener serves a goproxy.ProxyHttpServer. Each
// accepted connection is wrapped (explicitConn, explicitconn.go) so that the
// per-connection state stays per connection: its session (pinned upstream
// connection, byte counts, the raw Host header that net/http drops for
// absolute-form requests), the header limit counted from the first byte, and
// refusal plus audit of a request that cannot be read. The wrapper hands
// http.Server exactly one request's bytes at a time (head, then
// Content-Length body), so pipelined requests each get their own checks and
// the bytes a client sends right behind a CONNECT stay for the tunnel; a
// chunked request body ends the connection after its response. CONNECT goes
// through HandleConnectFunc -> ConnectHijack to the tunnel and interception
// code (tunnel.go), on the raw *net.TCPConn so the tunnel still splices.
// Absolute-form HTTP goes through OnRequest().DoFunc, which runs the stages up
// to the dial, and the round trip runs on a per-request ctx.RoundTripper over
// the session's pooled, guarded upstream connection. goproxy's own transport
// refuses to dial (proxy.Tr.Proxy is nil), and its CA, MITM, certificate store
// and HTTP/2 are never used.
//
// The transparent listener and the intercepted (MITM) request loop stay on
// net/http's wire types (http.ReadRequest, Request.Write, http.ReadResponse) in
// httpSession.loop: the transparent listener must peek TLS-or-HTTP-or-raw and
// SO_ORIGINAL_DST before any HTTP parsing, and goproxy's MITM would mint leaves
// with its own CA logic, negotiate HTTP/2 and dial outside the guarded dialer;
// serving the inner requests through http.Server would add a second parser and
// writer on a connection whose destination is pinned, for nothing goproxy does.
//
// gateway must never import netns, sandboxd or cmd; it talks to policy through
// policy.Decider, to audit through audit.Logger and to DNS through Resolver.
package gateway
