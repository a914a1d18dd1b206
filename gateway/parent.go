package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/ipguard"
)

// The parent proxy (Config.ParentProxy): every upstream connection the
// gateway makes, after policy allowed the origin, is a CONNECT origin:port
// through it, unless the origin is in ParentNoProxy. Plain HTTP uses CONNECT
// too (not absolute-form): the parent's refusal is then always its answer to
// the CONNECT, never confused with an origin's 403 or 502, and the upstream
// pool, websockets and plain HTTP inside a CONNECT need nothing of their own.

// parentProxy is the parsed ParentProxy with what dialing it needs.
type parentProxy struct {
	hostPort string       // host:port as configured: audit and logs name the parent by it
	host     string       // normalized name or IP literal
	port     int          // port to dial
	tls      bool         // https:// parent: TLS to the parent, verified like any upstream
	addrs    []netip.Addr // the parent's addresses, resolved once by New
	guard    *ipguard.Guard
	auth     func(ctx context.Context) (string, error)
	noProxy  noProxy
}

// parseParentURL checks an upstream.proxy URL: http or https, a host, an
// optional port, nothing else. Credentials in the URL are refused: they
// would end up in config files and logs.
func parseParentURL(raw string) (*url.URL, string, int, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", 0, fmt.Errorf("gateway: parent_proxy %q: %w", raw, err)
	}
	if u.User != nil {
		return nil, "", 0, errors.New("gateway: parent_proxy: the URL carries credentials; put them in the secrets file and name that secret in upstream.proxy_auth_secret")
	}
	port := 0
	switch u.Scheme {
	case "http":
		port = 80
	case "https":
		port = 443
	default:
		return nil, "", 0, fmt.Errorf("gateway: parent_proxy %q: scheme must be http or https", raw)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return nil, "", 0, fmt.Errorf("gateway: parent_proxy %q: want scheme://host[:port] only", raw)
	}
	h, p, err := hostname.SplitHostPort(u.Host, port)
	if err != nil {
		return nil, "", 0, fmt.Errorf("gateway: parent_proxy %q: %w", raw, err)
	}
	return u, h, p, nil
}

// newParentProxy resolves the parent (an IP literal, or a name resolved
// once, here, through res) and builds the guard its dials are checked with:
// the usual rules plus exactly the parent's addresses, the gateway's own
// addresses still refused.
func newParentProxy(cfg *Config, res Resolver) (*parentProxy, error) {
	u, host, port, err := parseParentURL(cfg.ParentProxy)
	if err != nil {
		return nil, err
	}
	np, err := parseNoProxy(cfg.ParentNoProxy)
	if err != nil {
		return nil, err
	}
	p := &parentProxy{hostPort: hostname.JoinHostPort(host, port), host: host, port: port,
		tls: u.Scheme == "https", auth: cfg.ParentAuth, noProxy: np}
	if ip, ok := hostname.ParseIP(host); ok {
		p.addrs = []netip.Addr{ip}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.DialTimeout)
		addrs, err := res.LookupNetIP(ctx, "ip", host)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("gateway: parent_proxy: resolve %s: %w", host, err)
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("gateway: parent_proxy: %s has no addresses", host)
		}
		p.addrs = addrs
	}
	allow := append([]netip.Prefix(nil), cfg.AllowCIDRs...)
	for i, a := range p.addrs {
		a = a.Unmap()
		p.addrs[i] = a
		switch ipguard.Classify(a) {
		case ipguard.ClassUnspecified, ipguard.ClassMulticast, ipguard.ClassBroadcast, ipguard.ClassInvalid:
			return nil, fmt.Errorf("gateway: parent_proxy: %s (%s) is not an address a proxy listens on", host, a)
		}
		allow = append(allow, netip.PrefixFrom(a, a.BitLen()))
	}
	p.guard = ipguard.New(allow, cfg.OwnAddrs)
	for _, a := range p.addrs {
		if err := p.guard.Check(a); err != nil {
			return nil, fmt.Errorf("gateway: parent_proxy: %w", err)
		}
	}
	return p, nil
}

// isAddr reports whether a is one of the parent's addresses.
func (p *parentProxy) isAddr(a netip.Addr) bool {
	a = a.Unmap()
	for _, x := range p.addrs {
		if x == a {
			return true
		}
	}
	return false
}

// refuseAsOrigin denies an origin that is the parent itself, by name or by
// address: the parent is reachable for the gateway's own CONNECTs only.
func (p *parentProxy) refuseAsOrigin(host string) error {
	if host == p.host {
		return deny(ReasonForbiddenAddress, "%s is the parent proxy", host)
	}
	if ip, ok := hostname.ParseIP(host); ok && p.isAddr(ip) {
		return deny(ReasonForbiddenAddress, "%s is the parent proxy's address", host)
	}
	return nil
}

// noProxy is upstream.no_proxy: origins dialed directly, with every check of
// a direct dial.
type noProxy struct {
	names    map[string]bool
	suffixes []string // ".example.com": any name under it, not the name itself
	prefixes []netip.Prefix
}

// parseNoProxy parses entries: a host name, "*.x" or ".x" (names under x), an
// IP address or a CIDR (matched against IP-literal origins only: the gateway
// resolves no origin name when a parent is used).
func parseNoProxy(entries []string) (noProxy, error) {
	np := noProxy{names: map[string]bool{}}
	for i, e := range entries {
		s := strings.TrimSpace(e)
		if pfx, err := netip.ParsePrefix(s); err == nil {
			np.prefixes = append(np.prefixes, pfx.Masked())
			continue
		}
		if a, ok := hostname.ParseIP(s); ok {
			np.prefixes = append(np.prefixes, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		suffix := false
		if rest, ok := strings.CutPrefix(s, "*."); ok {
			s, suffix = rest, true
		} else if rest, ok := strings.CutPrefix(s, "."); ok {
			s, suffix = rest, true
		}
		n, err := hostname.Normalize(s)
		if err != nil || strings.Contains(n, "*") {
			return noProxy{}, fmt.Errorf("gateway: parent_no_proxy[%d]: %q is not a host name, *.domain, .domain, address or CIDR", i, e)
		}
		if suffix {
			np.suffixes = append(np.suffixes, "."+n)
		} else {
			np.names[n] = true
		}
	}
	return np, nil
}

// match reports whether host (normalized name or canonical IP literal) is
// dialed directly.
func (np noProxy) match(host string) bool {
	if ip, ok := hostname.ParseIP(host); ok {
		for _, p := range np.prefixes {
			if p.Contains(ip.Unmap()) {
				return true
			}
		}
		return false
	}
	if np.names[host] {
		return true
	}
	for _, s := range np.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// parentError is the parent's refusal of a CONNECT: its status goes in the
// audit record (never its body, never the credential).
type parentError struct {
	parent string
	status int
}

func (e *parentError) Error() string {
	return "parent proxy " + e.parent + " answered " + strconv.Itoa(e.status) + " " + http.StatusText(e.status)
}

// maxParentResponse bounds the parent's answer to a CONNECT.
const maxParentResponse = 16 << 10

// dialParent connects to host:port through the parent: a guarded dial of
// one of the parent's addresses, TLS for an https parent, then CONNECT
// host:port (the name, which the parent resolves). The returned connection
// carries the origin's bytes.
func (d *dialer) dialParent(ctx context.Context, host string, port int) (net.Conn, error) {
	p := d.parent
	var lastErr error
	var c net.Conn
	for _, a := range p.addrs {
		if err := p.guard.Check(a); err != nil {
			lastErr = err
			continue
		}
		var err error
		c, err = d.dial(ctx, "tcp", netip.AddrPortFrom(a, uint16(p.port)).String())
		if err == nil {
			break
		}
		lastErr = err
	}
	if c == nil {
		return nil, fail(ReasonParentUnavailable, http.StatusBadGateway, fmt.Errorf("parent proxy %s: %w", p.hostPort, lastErr))
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if p.tls {
		tc := tls.Client(c, d.parentTLS(p.host))
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, fail(ReasonParentUnavailable, http.StatusBadGateway, fmt.Errorf("parent proxy %s: tls: %w", p.hostPort, err))
		}
		c = tc
	}
	br, err := p.connect(ctx, c, host, port)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	if br.Buffered() > 0 {
		return &prefixConn{Conn: c, r: br}, nil
	}
	return c, nil
}

// connect sends CONNECT host:port on c and reads the parent's answer.
func (p *parentProxy) connect(ctx context.Context, c net.Conn, host string, port int) (*bufio.Reader, error) {
	target := hostname.JoinHostPort(host, port)
	var b strings.Builder
	b.WriteString("CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n")
	if p.auth != nil {
		cred, err := p.auth(ctx)
		if err != nil {
			return nil, fail(ReasonParentUnavailable, http.StatusBadGateway, fmt.Errorf("parent proxy %s: credential: %w", p.hostPort, err))
		}
		if strings.ContainsAny(cred, "\r\n") {
			return nil, fail(ReasonParentUnavailable, http.StatusBadGateway, fmt.Errorf("parent proxy %s: credential holds a line break", p.hostPort))
		}
		b.WriteString("Proxy-Authorization: " + cred + "\r\n")
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(c, b.String()); err != nil {
		return nil, fail(ReasonParentUnavailable, http.StatusBadGateway, fmt.Errorf("parent proxy %s: %w", p.hostPort, err))
	}
	lr := &io.LimitedReader{R: c, N: maxParentResponse}
	br := bufio.NewReaderSize(lr, 4096)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return nil, fail(ReasonParentUnavailable, http.StatusBadGateway, fmt.Errorf("parent proxy %s: reading its answer: %w", p.hostPort, err))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fail(ReasonParentRefused, http.StatusBadGateway, &parentError{parent: p.hostPort, status: resp.StatusCode})
	}
	// The origin's bytes that came with the answer are in br; the caller
	// reads them before c.
	return br, nil
}
