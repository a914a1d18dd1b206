package gateway

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
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
	br := bufio.NewReaderSize(rd, maxPeekBytes)
	cc.nc.SetReadDeadline(time.Now().Add(g.cfg.PeekTimeout))
	first, err := br.Peek(1)
	switch {
	case err != nil && isTimeout(err):
		// The client waits for the server to speak: raw TCP.
	case err != nil:
		return // closed before sending anything: nothing to decide
	case first[0] == 0x16:
		rc.kind = policy.KindTLS
		cc.nc.SetReadDeadline(time.Now().Add(g.cfg.HandshakeTimeout))
		sni, perr := peekClientHello(br, maxPeekBytes)
		if perr != nil {
			cc.nc.SetReadDeadline(time.Time{})
			g.serveRefused(rc, deny(ReasonBadRequest, "tls client hello: %v", perr))
			return
		}
		rc.sni = sni
	default:
		cc.nc.SetReadDeadline(time.Now().Add(g.cfg.ReadHeaderTimeout))
		pr, perr := peekHTTPRequest(br, min(g.cfg.MaxHeaderBytes, maxPeekBytes))
		if perr == nil {
			cc.nc.SetReadDeadline(time.Time{})
			g.serveTransparentHTTP(cc, br, dst, pr)
			return
		}
		if !errors.Is(perr, errNotHTTP) && !isTimeout(perr) {
			cc.nc.SetReadDeadline(time.Time{})
			g.serveRefused(rc, deny(ReasonBadRequest, "http request: %v", perr))
			return
		}
	}
	cc.nc.SetReadDeadline(time.Time{})
	rc.br = br
	g.serve(rc)
}

// serveTransparentHTTP pins the connection to the host its first request names
// (Host header, else the original destination address) and runs the request
// loop; every later request must name the same host.
func (g *Gateway) serveTransparentHTTP(cc *clientConn, br *bufio.Reader, dst netip.AddrPort, pr peekedRequest) {
	s := g.newSession(cc, cc.nc, nil)
	// The peeked bytes come first, then the connection through the session's
	// own connReader.
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		s.br = bufio.NewReaderSize(io.MultiReader(bytesReader(b), &s.rd), maxPeekBytes)
	}
	s.pinned = true
	s.pinPort = int(dst.Port())
	s.defaultPort = int(dst.Port())
	s.pinHost = dst.Addr().Unmap().String()
	if pr.Host != "" {
		h, p, err := hostname.SplitHostPort(pr.Host, int(dst.Port()))
		if err != nil || p != int(dst.Port()) {
			rc := g.newReqCtx(cc, s)
			rc.kind = policy.KindHTTP
			if err == nil {
				err = fmt.Errorf("host header port %d differs from destination port %d", p, dst.Port())
			}
			g.serveRefused(rc, deny(ReasonHostMismatch, "%v", err))
			return
		}
		s.pinHost = h
	}
	s.loop(policy.KindHTTP)
}

func bytesReader(b []byte) io.Reader {
	c := make([]byte, len(b))
	copy(c, b)
	return &sliceReader{b: c}
}

type sliceReader struct{ b []byte }

func (r *sliceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
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
