package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/airlock-dev/airlock/ipguard"
)

// dialer is the guarded dialer: it resolves through the gateway's Resolver,
// checks every candidate address with ipguard and dials exactly an address it
// checked. The dial function only ever sees checked IP:port strings.
type dialer struct {
	res     Resolver
	sres    SandboxResolver // res, when it charges lookups to a sandbox
	namer   SandboxNamer    // res, when it remembers the names it answered a sandbox
	guard   *ipguard.Guard
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	timeout time.Duration
}

func newDialer(res Resolver, guard *ipguard.Guard, dial func(ctx context.Context, network, addr string) (net.Conn, error), timeout time.Duration) *dialer {
	d := &dialer{res: res, guard: guard, dial: dial, timeout: timeout}
	d.sres, _ = res.(SandboxResolver)
	d.namer, _ = res.(SandboxNamer)
	if d.dial == nil {
		nd := &net.Dialer{KeepAlive: 30 * time.Second}
		d.dial = nd.DialContext
	}
	return d
}

// dialHost connects to host (a normalized name or canonical IP literal) on port
// for the sandbox sandboxID. It returns the address dialed, or on refusal the
// first address refused.
func (d *dialer) dialHost(ctx context.Context, sandboxID, host string, port int) (net.Conn, netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		addrs, err = d.lookup(ctx, sandboxID, host)
		if err != nil {
			return nil, netip.Addr{}, err
		}
		if len(addrs) == 0 {
			return nil, netip.Addr{}, fail(ReasonResolve, http.StatusBadGateway, fmt.Errorf("resolve %s: no addresses", host))
		}
	}
	var (
		refused    netip.Addr
		refusedErr error
		lastErr    error
		lastIP     netip.Addr
	)
	for _, a := range addrs {
		if err := d.guard.Check(a); err != nil {
			if !refused.IsValid() {
				refused, refusedErr = a, err
			}
			continue
		}
		// Dial the checked address itself, never the name: a second lookup could
		// answer differently (DNS rebinding).
		target := netip.AddrPortFrom(a.Unmap(), uint16(port))
		c, err := d.dial(ctx, "tcp", target.String())
		if err == nil {
			return c, a, nil
		}
		lastErr, lastIP = err, a
	}
	if lastErr == nil {
		return nil, refused, deny(ReasonForbiddenAddress, "%s resolves only to refused addresses: %v", host, refusedErr)
	}
	if errors.Is(lastErr, context.DeadlineExceeded) || isTimeout(lastErr) {
		return nil, lastIP, fail(ReasonTimeout, http.StatusGatewayTimeout, fmt.Errorf("dial %s (%s): %w", host, lastIP, lastErr))
	}
	return nil, lastIP, fail(ReasonUpstream, http.StatusBadGateway, fmt.Errorf("dial %s (%s): %w", host, lastIP, lastErr))
}

// lookup resolves host for the sandbox sandboxID: through LookupForSandbox
// when the Resolver charges lookups to a sandbox, so a name the DNS filter
// would refuse that sandbox now is never resolved for it here either. A
// refusal by those limits (an error with a Reason) is a denial with that
// reason id; any other error is a resolution failure.
func (d *dialer) lookup(ctx context.Context, sandboxID, host string) ([]netip.Addr, error) {
	var addrs []netip.Addr
	var err error
	if d.sres != nil {
		addrs, err = d.sres.LookupForSandbox(ctx, sandboxID, host)
	} else {
		addrs, err = d.res.LookupNetIP(ctx, "ip", host)
	}
	if err == nil {
		return addrs, nil
	}
	var r interface{ Reason() string }
	if errors.As(err, &r) && r.Reason() != "" {
		return nil, deny(r.Reason(), "resolve %s for sandbox %s: %v", host, sandboxID, err)
	}
	return nil, fail(ReasonResolve, http.StatusBadGateway, fmt.Errorf("resolve %s: %w", host, err))
}

// nameFor returns the name the sandbox sandboxID resolved to addr, while the
// answer's TTL lasts, when the Resolver remembers it (SandboxNamer).
func (d *dialer) nameFor(sandboxID string, addr netip.Addr) (string, bool) {
	if d.namer == nil {
		return "", false
	}
	return d.namer.NameFor(sandboxID, addr)
}
