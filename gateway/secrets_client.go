package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
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
	c, _, err := g.dialer.dialHost(ctx, "", host, port)
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
