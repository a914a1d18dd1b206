package gateway

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// Defaults applied by New to zero fields of Config.
const (
	DefaultMaxHeaderBytes        = 64 << 10
	DefaultMaxConnsPerSandbox    = 1024
	DefaultMaxTunnelsPerSandbox  = 512
	DefaultIdleTimeout           = 90 * time.Second
	DefaultReadHeaderTimeout     = 10 * time.Second
	DefaultHandshakeTimeout      = 10 * time.Second
	DefaultPeekTimeout           = 2 * time.Second
	DefaultDialTimeout           = 10 * time.Second
	DefaultResponseHeaderTimeout = 60 * time.Second
	DefaultPolicyTimeout         = 2 * time.Second
	DefaultMaxIdleConnsPerHost   = 256
	DefaultMaxIdleConns          = 4096
	DefaultIdleConnTimeout       = 90 * time.Second
	DefaultLeafTTL               = 24 * time.Hour
	DefaultLeafCacheSize         = 1024
	DefaultMaxQueryParams        = 256
	DefaultBodyScanTimeout       = 10 * time.Second
	DefaultInspectMaxBody        = 8 << 20
	DefaultInspectMaxJSON        = 1 << 20

	// HTTP/2 on intercepted and h2c connections (h2.go).
	DefaultH2MaxConcurrentStreams = 100
	DefaultH2MaxReadFrameSize     = 64 << 10
	DefaultH2StreamWindow         = 1 << 20
	DefaultH2ConnWindow           = 4 << 20
	DefaultH2MaxResetsPerSecond   = 50
	DefaultH2MaxResetBurst        = 200
	DefaultH2MaxStreamsPerSandbox = 1024

	// MaxLeafTTL bounds LeafTTL: an intercepted leaf certificate never lives longer.
	MaxLeafTTL = 72 * time.Hour
	// maxPeekBytes bounds what the transparent listener buffers before deciding.
	maxPeekBytes = 16 << 10
)

// Config configures a Gateway. Zero fields take the Default* values.
type Config struct {
	// AllowCIDRs are destination prefixes the SSRF guard lets through even though
	// they are loopback, private, link-local etc. (config upstream.allow_cidrs).
	AllowCIDRs []netip.Prefix
	// OwnAddrs are the gateway's own addresses; they are always refused.
	OwnAddrs []netip.Addr
	// ParentProxy is the URL of a parent (egress) proxy, http://host[:port] or
	// https://host[:port], no credentials (config upstream.proxy). When set,
	// every upstream connection goes through it as CONNECT origin:port, after
	// policy allowed the origin; the origin name is sent as it is, for the
	// parent to resolve. A name here is resolved once, by New. Empty: direct.
	ParentProxy string
	// ParentNoProxy lists origins dialed directly, with every check of a
	// direct dial (config upstream.no_proxy): host names, "*.x" or ".x" for
	// names under x, addresses and CIDRs (matched against IP-literal origins).
	ParentNoProxy []string
	// ParentAuth returns the Proxy-Authorization value sent to the parent on
	// each CONNECT (and only there); nil sends none. The value is never logged
	// or audited.
	ParentAuth func(ctx context.Context) (string, error)

	// UpstreamCAFile is an optional PEM bundle trusted for upstream TLS in
	// addition to the system roots (config upstream.ca_file).
	UpstreamCAFile string

	// CACertFile and CAKeyFile hold the interception CA made by `airlock ca init`.
	// Both empty means no interception: a decision that asks for it is denied
	// with reason mitm_unavailable. One set without the other is an error.
	CACertFile string
	CAKeyFile  string
	// LeafTTL is the validity of minted leaf certificates (at most MaxLeafTTL).
	LeafTTL time.Duration
	// LeafCacheSize bounds the leaf certificate LRU.
	LeafCacheSize int

	// MaxHeaderBytes bounds a request's or response's header block.
	MaxHeaderBytes int
	// MaxQueryParams bounds the parameters of a request's query string. A
	// request with more is denied (too_many_query_params) before policy sees
	// it: a query cut short could hide the parameter a deny rule looks for.
	MaxQueryParams int
	// BodyScanTimeout bounds, as one absolute deadline, reading the request
	// body that the secrets check (Injector.Check) scans before policy; a body
	// that does not arrive in time is refused (408, body_scan_timeout).
	BodyScanTimeout time.Duration
	// MaxConnsPerSandbox bounds concurrent client connections per sandbox.
	MaxConnsPerSandbox int
	// MaxTunnelsPerSandbox bounds concurrent tunnels (CONNECT, TLS passthrough,
	// raw TCP) per sandbox.
	MaxTunnelsPerSandbox int
	// IdleTimeout bounds the wait for the next request on a kept-alive client
	// connection and for progress while a request or response body is relayed.
	IdleTimeout time.Duration
	// ReadHeaderTimeout bounds reading one request's header block.
	ReadHeaderTimeout time.Duration
	// HandshakeTimeout bounds TLS handshakes on both sides.
	HandshakeTimeout time.Duration
	// PeekTimeout bounds the transparent listener's wait for the client's first
	// bytes; a client that sends nothing in time is handled as kind tcp.
	PeekTimeout time.Duration
	// DialTimeout bounds resolving and connecting to an upstream.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for an upstream's response header.
	ResponseHeaderTimeout time.Duration
	// PolicyTimeout bounds one policy decision (the decider fails closed).
	PolicyTimeout time.Duration
	// MaxIdleConnsPerHost and MaxIdleConns size the upstream keep-alive pool.
	MaxIdleConnsPerHost int
	MaxIdleConns        int
	// IdleConnTimeout drops pooled upstream connections idle for longer.
	IdleConnTimeout time.Duration
	// H2MaxConcurrentStreams bounds the streams a sandbox's HTTP/2 connection
	// may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS); the server
	// closes a connection that opens past it.
	H2MaxConcurrentStreams int
	// H2MaxReadFrameSize bounds one HTTP/2 frame read from a sandbox
	// (SETTINGS_MAX_FRAME_SIZE, 16 KiB to 16 MiB). The header list of a
	// stream is bounded by MaxHeaderBytes.
	H2MaxReadFrameSize int
	// H2StreamWindow and H2ConnWindow are the flow-control windows the
	// gateway gives a sandbox's HTTP/2 stream and connection: the most
	// request body it buffers for one stream and for all of them.
	H2StreamWindow int
	H2ConnWindow   int
	// H2MaxResetsPerSecond and H2MaxResetBurst bound the streams a sandbox
	// may cancel (RST_STREAM) on one HTTP/2 connection: past the burst, at
	// more than this rate, the connection is closed (rapid reset).
	H2MaxResetsPerSecond int
	H2MaxResetBurst      int
	// H2MaxStreamsPerSandbox bounds the HTTP/2 streams a sandbox has in
	// flight over all its connections (each is a request being served); a
	// stream past it is refused (429, stream_limit).
	H2MaxStreamsPerSandbox int

	// Injector adds credentials to allowed intercepted requests; nil means none.
	Injector Injector
	// Approver answers what the policy asks (approval.go); nil means nobody
	// is asked and an ask decision is the deny it is.
	Approver Approver
	// Inspector runs content inspection on what requests carry (inspect.go);
	// nil means none.
	Inspector Inspector
	// InspectMaxBody is how many bytes of a request body are scanned; the
	// rest is relayed unscanned and reported as one oversize finding
	// (config inspect.max_body_bytes).
	InspectMaxBody int64
	// InspectMaxJSON: a JSON body with a declared length up to this is read
	// before policy, so JSON-RPC and LLM calls are policy input and a secret
	// split across its fields is found; a larger one is scanned as it streams.
	InspectMaxJSON int64

	// DialFunc replaces the network dial (tests use a recording fake that refuses
	// every address outside their allowed set). It is only ever called with an
	// IP:port that the guard has checked. nil means a net.Dialer.
	DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)
	// OriginalDst replaces SO_ORIGINAL_DST lookup on transparent connections
	// (tests on loopback, where no redirect happened). nil means the socket option.
	OriginalDst func(c net.Conn) (netip.AddrPort, error)
}

func (c *Config) applyDefaults() {
	setDur := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	setInt := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	setInt(&c.MaxHeaderBytes, DefaultMaxHeaderBytes)
	setInt(&c.MaxQueryParams, DefaultMaxQueryParams)
	setDur(&c.BodyScanTimeout, DefaultBodyScanTimeout)
	if c.InspectMaxBody == 0 {
		c.InspectMaxBody = DefaultInspectMaxBody
	}
	if c.InspectMaxJSON == 0 {
		c.InspectMaxJSON = DefaultInspectMaxJSON
	}
	setInt(&c.MaxConnsPerSandbox, DefaultMaxConnsPerSandbox)
	setInt(&c.MaxTunnelsPerSandbox, DefaultMaxTunnelsPerSandbox)
	setInt(&c.MaxIdleConnsPerHost, DefaultMaxIdleConnsPerHost)
	setInt(&c.MaxIdleConns, DefaultMaxIdleConns)
	setInt(&c.LeafCacheSize, DefaultLeafCacheSize)
	setDur(&c.IdleTimeout, DefaultIdleTimeout)
	setDur(&c.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	setDur(&c.HandshakeTimeout, DefaultHandshakeTimeout)
	setDur(&c.PeekTimeout, DefaultPeekTimeout)
	setDur(&c.DialTimeout, DefaultDialTimeout)
	setDur(&c.ResponseHeaderTimeout, DefaultResponseHeaderTimeout)
	setDur(&c.PolicyTimeout, DefaultPolicyTimeout)
	setDur(&c.IdleConnTimeout, DefaultIdleConnTimeout)
	setDur(&c.LeafTTL, DefaultLeafTTL)
	setInt(&c.H2MaxConcurrentStreams, DefaultH2MaxConcurrentStreams)
	setInt(&c.H2MaxReadFrameSize, DefaultH2MaxReadFrameSize)
	setInt(&c.H2StreamWindow, DefaultH2StreamWindow)
	setInt(&c.H2ConnWindow, DefaultH2ConnWindow)
	setInt(&c.H2MaxResetsPerSecond, DefaultH2MaxResetsPerSecond)
	setInt(&c.H2MaxResetBurst, DefaultH2MaxResetBurst)
	setInt(&c.H2MaxStreamsPerSandbox, DefaultH2MaxStreamsPerSandbox)
}

func (c *Config) validate() error {
	if (c.CACertFile == "") != (c.CAKeyFile == "") {
		return fmt.Errorf("gateway: ca: cert %q and key %q must both be set or both be empty", c.CACertFile, c.CAKeyFile)
	}
	if c.LeafTTL < time.Hour || c.LeafTTL > MaxLeafTTL {
		return fmt.Errorf("gateway: leaf_ttl %v: must be between 1h and %v", c.LeafTTL, MaxLeafTTL)
	}
	pos := []struct {
		name string
		v    int
	}{
		{"max_header_bytes", c.MaxHeaderBytes}, {"max_conns_per_sandbox", c.MaxConnsPerSandbox},
		{"max_tunnels_per_sandbox", c.MaxTunnelsPerSandbox}, {"max_idle_conns_per_host", c.MaxIdleConnsPerHost},
		{"max_idle_conns", c.MaxIdleConns}, {"leaf_cache_size", c.LeafCacheSize},
		{"max_query_params", c.MaxQueryParams}, {"h2_max_concurrent_streams", c.H2MaxConcurrentStreams},
		{"h2_max_resets_per_second", c.H2MaxResetsPerSecond}, {"h2_max_reset_burst", c.H2MaxResetBurst},
		{"h2_max_streams_per_sandbox", c.H2MaxStreamsPerSandbox},
	}
	for _, p := range pos {
		if p.v < 0 {
			return fmt.Errorf("gateway: %s %d: must be positive", p.name, p.v)
		}
	}
	if c.InspectMaxBody < 0 || c.InspectMaxJSON < 0 {
		return fmt.Errorf("gateway: inspect max_body_bytes %d, max_json_bytes %d: must be positive", c.InspectMaxBody, c.InspectMaxJSON)
	}
	if c.MaxHeaderBytes < 1024 || c.MaxHeaderBytes > 1<<20 {
		return fmt.Errorf("gateway: max_header_bytes %d: must be between 1024 and 1048576", c.MaxHeaderBytes)
	}
	if c.H2MaxReadFrameSize < 16<<10 || c.H2MaxReadFrameSize > 16<<20 {
		return fmt.Errorf("gateway: h2_max_read_frame_size %d: must be between 16384 and 16777216", c.H2MaxReadFrameSize)
	}
	if c.H2StreamWindow < 65535 || c.H2StreamWindow > 1<<30 || c.H2ConnWindow < c.H2StreamWindow || c.H2ConnWindow > 1<<30 {
		return fmt.Errorf("gateway: h2_stream_window %d, h2_conn_window %d: want 65535 <= stream <= conn <= 1073741824", c.H2StreamWindow, c.H2ConnWindow)
	}
	durs := []struct {
		name string
		v    time.Duration
	}{
		{"idle_timeout", c.IdleTimeout}, {"read_header_timeout", c.ReadHeaderTimeout},
		{"handshake_timeout", c.HandshakeTimeout}, {"peek_timeout", c.PeekTimeout},
		{"dial_timeout", c.DialTimeout}, {"response_header_timeout", c.ResponseHeaderTimeout},
		{"policy_timeout", c.PolicyTimeout}, {"idle_conn_timeout", c.IdleConnTimeout},
		{"body_scan_timeout", c.BodyScanTimeout},
	}
	for _, d := range durs {
		if d.v < 0 {
			return fmt.Errorf("gateway: %s %v: must be positive", d.name, d.v)
		}
	}
	if c.ParentProxy == "" && (len(c.ParentNoProxy) > 0 || c.ParentAuth != nil) {
		return fmt.Errorf("gateway: parent_no_proxy and parent_auth need parent_proxy")
	}
	for _, p := range c.AllowCIDRs {
		if !p.IsValid() {
			return fmt.Errorf("gateway: allow_cidrs: invalid prefix %v", p)
		}
	}
	return nil
}
