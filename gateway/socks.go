package gateway

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/policy"
)

// SOCKS5 (RFC 1928) on the explicit listener, for clients that prefer it to
// an HTTP proxy: a connection whose first byte is 5 (no HTTP method starts
// with it) is a SOCKS5 client. Only "no authentication" and the CONNECT
// command are served, to a domain name, an IPv4 or an IPv6 address. A CONNECT
// is then exactly an HTTP CONNECT to host:port: the same pipeline, policy
// input (kind connect), audit record (plus extra.proxy_protocol "socks5"),
// interception and content rules (relayConnect); only the answers are
// SOCKS replies instead of HTTP status lines. The whole handshake must arrive
// within ReadHeaderTimeout.

// SOCKS5 protocol constants (RFC 1928).
const (
	socksVersion      = 0x05
	socksNoAuth       = 0x00
	socksNoAcceptable = 0xff

	socksCmdConnect = 0x01

	socksAtypIPv4   = 0x01
	socksAtypDomain = 0x03
	socksAtypIPv6   = 0x04

	socksSucceeded          = 0x00
	socksGeneralFailure     = 0x01
	socksNotAllowed         = 0x02
	socksHostUnreachable    = 0x04
	socksConnRefused        = 0x05
	socksCmdNotSupported    = 0x07
	socksAddrTypeNotSupport = 0x08
)

// Reason ids of SOCKS5 refusals decided before policy (a malformed greeting or
// request is bad_request).
const (
	ReasonSOCKSMethod   = "socks_no_acceptable_method"       // the client offers no "no authentication"
	ReasonSOCKSCommand  = "socks_command_not_supported"      // BIND, UDP ASSOCIATE or an unknown command
	ReasonSOCKSAddrType = "socks_address_type_not_supported" // an address type other than IPv4, domain, IPv6
)

// serveSOCKS serves one SOCKS5 connection on the explicit listener: the
// handshake, then the CONNECT through the pipeline as kind connect. It runs
// in place of the connection's first HTTP request (explicitConn.readHead).
func (c *explicitConn) serveSOCKS() {
	s, g := c.sess, c.sess.g
	rc := g.newReqCtx(c.cc, s)
	rc.kind, rc.socks = policy.KindConnect, true
	c.cc.nc.SetDeadline(time.Now().Add(g.cfg.ReadHeaderTimeout))
	target, err := socksHandshake(rc, s.br, s.bw)
	c.cc.nc.SetDeadline(time.Time{})
	if err != nil {
		if isTimeout(err) {
			err = deny(ReasonBadRequest, "socks5: handshake not complete within read_header_timeout (%v)", g.cfg.ReadHeaderTimeout)
		}
		g.serveRefused(rc, err)
		return
	}
	// An HTTP CONNECT to the same target: normalizeConnect, screen and the
	// audit record read it as they read a CONNECT's.
	rc.req = &http.Request{
		Method: http.MethodConnect, RequestURI: target, Host: target, URL: &url.URL{Host: target},
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}, Body: http.NoBody,
	}
	g.serve(rc)
}

// socksHandshake reads the greeting, selects "no authentication", and reads
// the request, returning its target as host:port. A refusal in the
// method-selection phase is answered here (rc.responded); one in the request
// phase is answered by refuse with a reply code (socksReplyOf).
func socksHandshake(rc *reqCtx, br *bufio.Reader, bw *bufio.Writer) (string, error) {
	// A greeting that cannot be read gets no reply: there is no request yet
	// to answer.
	hdr, err := readFull(br, 2)
	if err != nil {
		rc.responded = true
		return "", socksReadErr("greeting", err)
	}
	methods, err := readFull(br, int(hdr[1]))
	if err != nil {
		rc.responded = true
		return "", socksReadErr("greeting", err)
	}
	noAuth := false
	for _, m := range methods {
		noAuth = noAuth || m == socksNoAuth
	}
	if !noAuth {
		bw.Write([]byte{socksVersion, socksNoAcceptable})
		bw.Flush()
		rc.responded = true
		if len(methods) == 0 {
			return "", deny(ReasonBadRequest, "socks5: greeting offers no authentication method")
		}
		return "", deny(ReasonSOCKSMethod, "socks5: the client offers methods %x; only 00 (no authentication) is served", methods)
	}
	bw.Write([]byte{socksVersion, socksNoAuth})
	if err := bw.Flush(); err != nil {
		rc.responded = true
		return "", fail("client_closed", http.StatusBadGateway, err)
	}
	req, err := readFull(br, 4) // VER CMD RSV ATYP
	if err != nil {
		return "", socksReadErr("request", err)
	}
	if req[0] != socksVersion || req[2] != 0 {
		return "", deny(ReasonBadRequest, "socks5: request with version %d, reserved byte %d: want 5 and 0", req[0], req[2])
	}
	host, err := socksAddr(br, req[3])
	if err != nil {
		return "", err
	}
	pb, err := readFull(br, 2)
	if err != nil {
		return "", socksReadErr("request", err)
	}
	port := int(pb[0])<<8 | int(pb[1])
	target := hostname.JoinHostPort(host, port)
	if h, p, err := hostname.SplitHostPort(target, 0); err == nil {
		rc.host, rc.port = h, p // for the record of a refused command
	}
	if req[1] != socksCmdConnect {
		return "", deny(ReasonSOCKSCommand, "socks5: command %d (%s) to %s: only CONNECT is served", req[1], socksCommand(req[1]), clip(target, maxRecordTextBytes/2))
	}
	return target, nil
}

// socksAddr reads DST.ADDR of type atyp.
func socksAddr(br *bufio.Reader, atyp byte) (string, error) {
	switch atyp {
	case socksAtypIPv4, socksAtypIPv6:
		n := 4
		if atyp == socksAtypIPv6 {
			n = 16
		}
		b, err := readFull(br, n)
		if err != nil {
			return "", socksReadErr("request", err)
		}
		a, _ := netip.AddrFromSlice(b)
		return a.Unmap().String(), nil
	case socksAtypDomain:
		l, err := br.ReadByte()
		if err != nil {
			return "", socksReadErr("request", err)
		}
		if l == 0 {
			return "", deny(ReasonBadRequest, "socks5: empty domain name")
		}
		b, err := readFull(br, int(l))
		if err != nil {
			return "", socksReadErr("request", err)
		}
		return string(b), nil
	}
	return "", deny(ReasonSOCKSAddrType, "socks5: address type %d: want 1 (IPv4), 3 (domain name) or 4 (IPv6)", atyp)
}

// readFull reads exactly n bytes (a copy) from br.
func readFull(br *bufio.Reader, n int) ([]byte, error) {
	b := make([]byte, n)
	_, err := io.ReadFull(br, b)
	return b, err
}

// socksReadErr is the refusal of a handshake that could not be read: cut short
// (or too slow, which serveSOCKS names) is a bad_request.
func socksReadErr(phase string, err error) error {
	if isTimeout(err) {
		return err
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return deny(ReasonBadRequest, "socks5: truncated %s", phase)
	}
	return deny(ReasonBadRequest, "socks5: reading the %s: %v", phase, err)
}

func socksCommand(c byte) string {
	switch c {
	case 0x02:
		return "BIND"
	case 0x03:
		return "UDP ASSOCIATE"
	}
	return "unknown"
}

// writeSOCKSReply answers a SOCKS5 request with code rep. The bound address is
// always 0.0.0.0:0: the gateway's own upstream address is none of the
// sandbox's business.
func writeSOCKSReply(bw *bufio.Writer, rep byte) {
	bw.Write([]byte{socksVersion, rep, 0, socksAtypIPv4, 0, 0, 0, 0, 0, 0})
	bw.Flush()
}

// socksReplyOf is the reply code of a refusal: a denial by policy or the
// gateway is "not allowed by ruleset" except the SOCKS-specific ones and a
// malformed request; a resolution or dial failure says what failed.
func socksReplyOf(err error) byte {
	var d *denial
	if errors.As(err, &d) {
		switch d.reason {
		case ReasonSOCKSCommand:
			return socksCmdNotSupported
		case ReasonSOCKSAddrType:
			return socksAddrTypeNotSupport
		case ReasonBadRequest, ReasonBadDestination:
			return socksGeneralFailure
		}
		return socksNotAllowed
	}
	var f *failure
	if errors.As(err, &f) {
		switch f.reason {
		case ReasonResolve, ReasonTimeout:
			return socksHostUnreachable
		case ReasonUpstream:
			return socksConnRefused
		}
	}
	return socksGeneralFailure
}
