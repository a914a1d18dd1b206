package gateway

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/policy"
)

// serveTransparent serves one connection redirected by the sandbox's namespace
// rules: it recovers the original destination, peeks the first bytes without
// consuming them, and handles the connection as kind tls, http or tcp.
func (g *Gateway) serveTransparent(cc *clientConn) {
	rc := g.newReqCtx(cc, nil)
	rc.kind = policy.KindTCP
	dst, err := g.originalDst(cc.nc)
	if err != nil {
		g.serveRefused(rc, deny(ReasonOriginalDst, "%v", err))
		return
	}
	rc.origDst = dst
	rd := &connReader{c: cc.nc}
	var br *bufio.Reader
	var sn sniffed
	// The wait for the first byte holds no buffer (awaitReadable): a
	// server-first protocol waits PeekTimeout with none, and its tunnel's
	// head is empty.
	if _, werr := awaitReadable(cc.nc, time.Now().Add(g.cfg.PeekTimeout)); werr != nil && isTimeout(werr) {
		br, sn = bufio.NewReaderSize(rd, 16), sniffed{kind: policy.KindTCP}
	} else {
		br = bufio.NewReaderSize(rd, maxPeekBytes)
		sn, err = g.sniff(cc.nc, br)
	}
	rc.kind = sn.kind
	var d *denial
	switch {
	case errors.As(err, &d):
		g.serveRefused(rc, err)
		return
	case err != nil:
		return // closed before sending anything: nothing to decide
	case sn.kind == policy.KindHTTP && sn.h2:
		// h2c: each stream is decided by the host its :authority names, on
		// the original destination's port.
		g.serveH2(cc, &prefixConn{Conn: cc.nc, r: br}, h2Target{scheme: "http", port: int(dst.Port()), defaultPort: int(dst.Port())})
		return
	case sn.kind == policy.KindHTTP:
		g.serveTransparentHTTP(cc, br, dst, sn.req)
		return
	}
	rc.sni = sn.sni
	rc.br = br
	g.serve(rc)
}

// serveTransparentHTTP pins the connection to the host its first request names
// (Host header, else the original destination address) and runs the request
// loop; every later request must name the same host.
func (g *Gateway) serveTransparentHTTP(cc *clientConn, br *bufio.Reader, dst netip.AddrPort, pr peekedRequest) {
	head, _ := br.Peek(br.Buffered())
	port := int(dst.Port())
	host := dst.Addr().Unmap().String()
	if pr.Host != "" {
		h, p, err := hostname.SplitHostPort(pr.Host, port)
		if err != nil || p != port {
			rc := g.newReqCtx(cc, g.newPinnedSession(cc, cc.nc, nil, host, port))
			rc.kind = policy.KindHTTP
			if err == nil {
				err = fmt.Errorf("host header port %d differs from destination port %d", p, dst.Port())
			}
			g.serveRefused(rc, deny(ReasonHostMismatch, "%v", err))
			return
		}
		host = h
	}
	g.newPinnedSession(cc, cc.nc, head, host, port).loop(policy.KindHTTP)
}

// originalDst returns where the sandbox meant to connect before the REDIRECT.
func (g *Gateway) originalDst(c net.Conn) (netip.AddrPort, error) {
	if g.cfg.OriginalDst != nil {
		return g.cfg.OriginalDst(c)
	}
	return soOriginalDst(c)
}

// soOriginalDst reads SO_ORIGINAL_DST (IPv4) or IP6T_SO_ORIGINAL_DST (IPv6)
// from a redirected socket. A socket that was not redirected is an error: the
// transparent listener never guesses a destination.
func soOriginalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("original destination: %T is not a TCP connection", c)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	local, _ := netip.ParseAddrPort(tc.LocalAddr().String())
	var out netip.AddrPort
	var serr error
	cerr := raw.Control(func(fd uintptr) {
		if local.Addr().Is4() || local.Addr().Is4In6() {
			// struct sockaddr_in fits in the 16 bytes of an IPv6Mreq.
			m, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
			if err != nil {
				serr = err
				return
			}
			b := m.Multiaddr
			port := binary.BigEndian.Uint16(b[2:4])
			out = netip.AddrPortFrom(netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}), port)
			return
		}
		// struct sockaddr_in6 is returned in the IPv6MTUInfo's Addr field.
		m, err := unix.GetsockoptIPv6MTUInfo(int(fd), unix.SOL_IPV6, unix.SO_ORIGINAL_DST) // IP6T_SO_ORIGINAL_DST has the same value, 80
		if err != nil {
			serr = err
			return
		}
		a := m.Addr
		port := uint16(a.Port>>8) | uint16(a.Port<<8) // network byte order in a host-order field
		out = netip.AddrPortFrom(netip.AddrFrom16(a.Addr), port)
	})
	if cerr != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", cerr)
	}
	if serr != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination (socket not redirected?): %w", serr)
	}
	if !out.Addr().IsValid() || out.Port() == 0 {
		return netip.AddrPort{}, errors.New("original destination: empty")
	}
	return out, nil
}
