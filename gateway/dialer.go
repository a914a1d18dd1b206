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

	// parent, when set, carries every dial but those to ParentNoProxy
	// origins (parent.go); parentTLS is the config for an https parent.
	parent    *parentProxy
	parentTLS func(serverName string) *tls.Config
}

// dialed says where a dial went: ip is the origin's address when the
// gateway knows it (it dialed it, or the origin is an IP literal), parent the
// parent proxy's host:port when the connection goes through it.
type dialed struct {
	ip     netip.Addr
	parent string
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
// for the sandbox sandboxID: through the parent proxy when one is configured
// and host is not in its no_proxy list, else directly. It returns where it
// went: the address dialed (or on refusal the first address refused), and
// the parent's host:port when it went through the parent.
func (d *dialer) dialHost(ctx context.Context, sandboxID, host string, port int) (net.Conn, dialed, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	t, err := d.plan(ctx, sandboxID, host, port)
	if err != nil {
		return nil, t.at, err
	}
	return d.connect(ctx, t)
}

// route is a destination resolved and checked but not connected to: what
// plan found and connect dials. A CONNECT plans before it answers the client
// and connects only once what the tunnel carries is decided (relayConnect),
// so a tunnel refused on its content never opens a connection upstream.
type route struct {
	host  string
	port  int
	addrs []netip.Addr // direct: the checked addresses, in order
	at    dialed       // the parent, or the origin's address when known
}

// plan resolves host (unless it is an IP literal or goes through the parent)
// and checks it with the guard, without connecting. Its error is the one
// dialHost would return for the same destination; the route is never nil.
func (d *dialer) plan(ctx context.Context, sandboxID, host string, port int) (*route, error) {
	t := &route{host: host, port: port}
	if d.parent != nil && !d.parent.noProxy.match(host) {
		if err := d.parent.refuseAsOrigin(host); err != nil {
			return t, err
		}
		// The origin is not resolved here: the parent resolves the name. An IP
		// literal is checked with the guard as a direct dial would be.
		if ip, ok := hostname.ParseIP(host); ok {
			t.at.ip = ip
			if err := d.guard.Check(ip); err != nil {
				return t, deny(ReasonForbiddenAddress, "%s: %v", host, err)
			}
		}
		t.at.parent = d.parent.hostPort
		return t, nil
	}
	if d.parent != nil {
		if err := d.parent.refuseAsOrigin(host); err != nil {
			return t, err
		}
	}
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		addrs, err = d.lookup(ctx, sandboxID, host)
		if err != nil {
			return t, err
		}
		if len(addrs) == 0 {
			return t, fail(ReasonResolve, http.StatusBadGateway, fmt.Errorf("resolve %s: no addresses", host))
		}
	}
	var (
		refused    netip.Addr
		refusedErr error
	)
	for _, a := range addrs {
		err := d.guard.Check(a)
		if err == nil && d.parent != nil && d.parent.isAddr(a) {
			err = fmt.Errorf("address %s refused: the parent proxy's address", a)
		}
		if err != nil {
			if !refused.IsValid() {
				refused, refusedErr = a, err
			}
			continue
		}
		t.addrs = append(t.addrs, a)
	}
	if len(t.addrs) == 0 {
		t.at.ip = refused
		return t, deny(ReasonForbiddenAddress, "%s resolves only to refused addresses: %v", host, refusedErr)
	}
	return t, nil
}

// connect dials a planned route: the parent, or the first checked address
// that connects. Dialing the checked address itself, never the name: a
// second lookup could answer differently (DNS rebinding).
func (d *dialer) connect(ctx context.Context, t *route) (net.Conn, dialed, error) {
	if t.at.parent != "" {
		c, err := d.dialParent(ctx, t.host, t.port)
		return c, t.at, err
	}
	var (
		lastErr error
		lastIP  netip.Addr
	)
	for _, a := range t.addrs {
		target := netip.AddrPortFrom(a.Unmap(), uint16(t.port))
		c, err := d.dial(ctx, "tcp", target.String())
		if err == nil {
			return c, dialed{ip: a}, nil
		}
		lastErr, lastIP = err, a
	}
	if lastErr == nil {
		return nil, dialed{}, fail(ReasonUpstream, http.StatusBadGateway, fmt.Errorf("dial %s: no checked address", t.host))
	}
	if errors.Is(lastErr, context.DeadlineExceeded) || isTimeout(lastErr) {
		return nil, dialed{ip: lastIP}, fail(ReasonTimeout, http.StatusGatewayTimeout, fmt.Errorf("dial %s (%s): %w", t.host, lastIP, lastErr))
	}
	return nil, dialed{ip: lastIP}, fail(ReasonUpstream, http.StatusBadGateway, fmt.Errorf("dial %s (%s): %w", t.host, lastIP, lastErr))
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
