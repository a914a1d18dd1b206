package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/airlock-dev/airlock/hostname"
)

// TokenClientTimeout bounds one call the gateway makes for itself to a token
// endpoint.
const TokenClientTimeout = 30 * time.Second

// TokenClient returns the HTTP client for the gateway's own calls to token
// endpoints (STS AssumeRole for secrets; the daemon hands it to the Injector
// with SetTokenClient). Every connection goes through the guarded dialer, as
// a sandbox's would: the gateway's resolver, ipguard's refusal of private and
// metadata addresses outside upstream.allow_cidrs, the parent proxy when one
// is configured. Only HTTPS, verified against the upstream roots; redirects
// are not followed; no environment proxy.
func (g *Gateway) TokenClient() *http.Client {
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("gateway token client: plain HTTP is refused")
		},
		DialTLSContext:        g.dialTokenTLS,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: TokenClientTimeout,
		MaxIdleConns:          4,
		IdleConnTimeout:       90 * time.Second,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       TokenClientTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func (g *Gateway) dialTokenTLS(ctx context.Context, _, addr string) (net.Conn, error) {
	host, port, err := hostname.SplitHostPort(addr, 443)
	if err != nil {
		return nil, fmt.Errorf("gateway token client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, g.dialer.timeout)
	defer cancel()
	t, err := g.planOwn(ctx, host, port)
	if err != nil {
		return nil, fmt.Errorf("gateway token client: %w", err)
	}
	c, _, err := g.dialer.connect(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("gateway token client: %w", err)
	}
	tc := tls.Client(c, g.upstreamTLS(host, false))
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("gateway token client: %w", err)
	}
	return tc, nil
}

// planOwn is dialer.plan for the gateway's own calls: no sandbox to charge a
// lookup to, so names go to the Resolver itself (a sandbox's lookups go
// through its DNS limits); every address is checked by the same guard, and a
// parent proxy carries the call as it would a sandbox's.
func (g *Gateway) planOwn(ctx context.Context, host string, port int) (*route, error) {
	d := g.dialer
	if d.parent != nil && !d.parent.noProxy.match(host) {
		return d.plan(ctx, "", host, port) // the parent resolves the name
	}
	if d.parent != nil {
		if err := d.parent.refuseAsOrigin(host); err != nil {
			return nil, err
		}
	}
	addrs := []netip.Addr{}
	if ip, ok := hostname.ParseIP(host); ok {
		addrs = append(addrs, ip)
	} else {
		var err error
		if addrs, err = d.res.LookupNetIP(ctx, "ip", host); err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
	}
	t := &route{host: host, port: port}
	var refused error
	for _, a := range addrs {
		if err := d.guard.Check(a); err != nil {
			refused = err
			continue
		}
		if d.parent != nil && d.parent.isAddr(a) {
			refused = fmt.Errorf("address %s refused: the parent proxy's address", a)
			continue
		}
		t.addrs = append(t.addrs, a)
	}
	if len(t.addrs) == 0 {
		return nil, fmt.Errorf("%s resolves to no address the gateway may dial (%v)", host, refused)
	}
	return t, nil
}
