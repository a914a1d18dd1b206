package gateway

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/secrets"
)

// Tunnels and interception: what a CONNECT (explicit proxy) or a TLS or raw
// TCP connection (transparent listener) becomes once the pipeline allowed it.
// relayConnect and tunnel relay opaque bytes, intercept terminates the
// client's TLS and runs the inner request loop (httpSession.loop, http.go).

// relayConnect answers an allowed CONNECT and runs the tunnel or interception.
func (g *Gateway) relayConnect(rc *reqCtx) error {
	s := rc.sess
	s.bw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
	if err := s.bw.Flush(); err != nil {
		return fail(ReasonUpstream, http.StatusBadGateway, err)
	}
	rc.responded = true
	rc.status = http.StatusOK
	s.conn.SetDeadline(time.Time{})
	if rc.mitm {
		return g.intercept(rc, &prefixConn{Conn: s.conn, r: s.br})
	}
	// Start relaying the upstream's bytes at once (server-first protocols), and
	// look at the client's first bytes: a TLS ClientHello must name the CONNECT
	// host (domain fronting).
	down := make(chan int64, 1)
	up := rc.upRaw
	client := s.conn
	go func() {
		n, _ := io.Copy(client, up)
		closeWrite(client)
		down <- n
	}()
	s.rd.limited, s.rd.progress = false, 0
	client.SetReadDeadline(time.Now().Add(g.cfg.PeekTimeout))
	sni, perr := peekClientHello(s.br, maxPeekBytes)
	client.SetReadDeadline(time.Time{})
	var err error
	switch {
	case perr == nil && sni != "":
		n, nerr := hostname.Normalize(sni)
		if nerr != nil || n != rc.host {
			err = deny(ReasonHostMismatch, "CONNECT %s carries TLS server name %q", rc.host, sni)
		}
	case perr == nil, errors.Is(perr, errNotTLS), isTimeout(perr):
	case errors.Is(perr, io.EOF), errors.Is(perr, net.ErrClosed):
		err = fail("client_closed", http.StatusBadGateway, perr)
	default:
		err = deny(ReasonBadRequest, "CONNECT %s: %v", rc.host, perr)
	}
	if err == nil {
		err = g.openTunnel(rc)
	}
	if err != nil {
		up.Close()
		client.Close()
		rc.bytesDown = <-down
		return err
	}
	head, _ := s.br.Peek(s.br.Buffered())
	guard := g.streamGuard(rc, false)
	upN, _ := copyUp(up, head, client, guard)
	guardFailed(rc, guard, up, client)
	rc.bytesUp = upN
	rc.bytesDown = <-down
	return nil
}

// copyUp writes head, then copies client to up (splice when both are
// *net.TCPConn), then half-closes up. With a guard (a sandbox that holds
// placeholders) every chunk is checked before it is written, and splice is
// given up; the copy stops at the first chunk the guard refuses.
func copyUp(up net.Conn, head []byte, client net.Conn, guard *secrets.StreamGuard) (int64, error) {
	var total int64
	if guard != nil {
		if err := guard.Check(head); err != nil {
			closeWrite(up)
			return 0, err
		}
	}
	if len(head) > 0 {
		n, err := up.Write(head)
		total += int64(n)
		if err != nil {
			closeWrite(up)
			return total, err
		}
	}
	var src io.Reader = client
	if guard != nil {
		src = guardedReader{r: client, guard: guard}
	}
	n, err := io.Copy(up, src)
	total += n
	closeWrite(up)
	return total, err
}

// pipe relays between two connections with already-read heads (websocket
// after 101, intercepted TLS passthrough).
func pipe(rc *reqCtx, a net.Conn, aHead []byte, b net.Conn, bHead []byte, guard *secrets.StreamGuard) error {
	down := make(chan int64, 1)
	go func() {
		var total int64
		if len(bHead) > 0 {
			n, _ := a.Write(bHead)
			total += int64(n)
		}
		n, _ := io.Copy(a, b)
		closeWrite(a)
		down <- total + n
	}()
	n, _ := copyUp(b, aHead, a, guard)
	guardFailed(rc, guard, a, b)
	rc.bytesUp += n
	rc.bytesDown += <-down
	return nil
}

// intercept terminates the client's TLS with a leaf for rc.host (minted only
// now, after allow) and serves the inner requests, each decided again as kind
// http. The ClientHello's server name, if any, must be rc.host.
func (g *Gateway) intercept(rc *reqCtx, client net.Conn) error {
	cert, err := g.leaves.get(rc.host)
	if err != nil {
		return fail(ReasonUpstream, http.StatusBadGateway, err)
	}
	var sniErr error
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"}, // HTTP/2 is never negotiated inside
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hello.ServerName != "" {
				n, err := hostname.Normalize(hello.ServerName)
				if err != nil || n != rc.host {
					sniErr = deny(ReasonHostMismatch, "tls server name %q on a connection to %s", hello.ServerName, rc.host)
					return nil, sniErr
				}
			}
			return cert, nil
		},
	}
	cnt := &countConn{Conn: client}
	tc := tls.Server(cnt, cfg)
	untrack := rc.cc.track(tc)
	defer untrack()
	tc.SetDeadline(time.Now().Add(g.cfg.HandshakeTimeout))
	herr := tc.Handshake()
	tc.SetDeadline(time.Time{})
	defer func() { rc.bytesUp, rc.bytesDown = cnt.in.Load(), cnt.out.Load() }()
	if herr != nil {
		tc.Close()
		if sniErr != nil {
			return sniErr
		}
		return fail("client_tls_error", http.StatusBadGateway, herr)
	}
	if err := g.openTunnel(rc); err != nil {
		tc.Close()
		return err
	}
	s := g.newSession(rc.cc, tc, nil)
	s.pinned, s.pinHost, s.pinPort, s.defaultPort = true, rc.host, rc.port, rc.port
	s.scheme, s.intercepted = "https", true
	s.sni = tc.ConnectionState().ServerName
	s.loop(policy.KindHTTP)
	tc.Close()
	return nil
}

// tunnel relays a passthrough connection (transparent TLS or raw TCP): head is
// what the peekers buffered; the rest goes *net.TCPConn to *net.TCPConn.
func (g *Gateway) tunnel(rc *reqCtx, client net.Conn, head []byte, up net.Conn) error {
	if err := g.openTunnel(rc); err != nil {
		return err
	}
	rc.responded = true
	down := make(chan int64, 1)
	go func() {
		n, _ := io.Copy(client, up)
		closeWrite(client)
		down <- n
	}()
	guard := g.streamGuard(rc, false)
	n, _ := copyUp(up, head, client, guard)
	guardFailed(rc, guard, up, client)
	rc.bytesUp = n
	rc.bytesDown = <-down
	return nil
}
