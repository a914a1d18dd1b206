package gateway

import (
	"bufio"
	"bytes"
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

// relayConnect answers an allowed CONNECT and serves what the tunnel carries.
// The CONNECT allowed a destination, not whatever bytes follow it: nothing is
// relayed until the client's first bytes are known (sniff, as the transparent
// listener does), and then the tunnel carries
//   - TLS whose complete ClientHello names the CONNECT host, or has no server
//     name where policy allows kind tls with an empty sni for the destination;
//   - plaintext HTTP, every request decided again as kind http (connectHTTP);
//   - anything else, or nothing (a server-first protocol), only where policy
//     allows kind tcp to the destination (decideCarried).
func (g *Gateway) relayConnect(rc *reqCtx) error {
	s := rc.sess
	if rc.socks {
		writeSOCKSReply(s.bw, socksSucceeded)
	} else {
		s.bw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
	}
	if err := s.bw.Flush(); err != nil {
		return fail(ReasonUpstream, http.StatusBadGateway, err)
	}
	rc.responded = true
	rc.status = http.StatusOK
	s.conn.SetDeadline(time.Time{})
	if rc.mitm {
		return g.intercept(rc, &prefixConn{Conn: s.conn, r: s.br})
	}
	s.rd.limited, s.rd.progress = false, 0
	sn, err := g.sniffConnect(s)
	rc.carries = sn.kind
	var d *denial
	if err != nil && !errors.As(err, &d) {
		return fail("client_closed", http.StatusBadGateway, err)
	}
	if err != nil {
		return err
	}
	switch {
	case sn.kind == policy.KindHTTP && sn.h2:
		return g.connectH2C(rc)
	case sn.kind == policy.KindHTTP:
		return g.connectHTTP(rc)
	case sn.kind == policy.KindTLS && sn.sni != "":
		n, err := hostname.Normalize(sn.sni)
		if err != nil || n != rc.host {
			return deny(ReasonHostMismatch, "CONNECT %s carries TLS server name %q", rc.host, sn.sni)
		}
	default:
		if err := g.decideCarried(rc, sn.kind); err != nil {
			return err
		}
	}
	if err := g.connectRoute(rc); err != nil {
		return err
	}
	var head []byte
	if s.br != nil {
		head, _ = s.br.Peek(s.br.Buffered())
	}
	return g.tunnel(rc, s.conn, head, rc.upRaw)
}

// sniffConnect is sniff on what follows a CONNECT. When the client sent
// nothing yet, the session's buffers (20 KiB, empty: the 200 was flushed)
// go back to the gateway's pool before the wait for its first byte, which
// holds none: a server-first protocol or an idle client costs no buffer for
// the PeekTimeout it may wait, and a burst of CONNECTs reuses a few buffers
// instead of leaving one pair per tunnel to the GC. Buffers are taken again
// only once there is something to read.
func (g *Gateway) sniffConnect(s *httpSession) (sniffed, error) {
	if s.br.Buffered() == 0 {
		s.recycleBuffers()
		_, err := awaitReadable(s.conn, time.Now().Add(g.cfg.PeekTimeout))
		if err != nil && isTimeout(err) {
			return sniffed{kind: policy.KindTCP}, nil
		}
		// Readable, at EOF, or failed (or no socket to wait on): the
		// buffered peek below says which.
		s.takeBuffers()
		if !errors.Is(err, errNoRawConn) {
			s.bw = nil // nothing is written through it again (s.bufs keeps it)
		}
	}
	return g.sniff(s.conn, s.br)
}

// sessionBufs are a session's reader (maxPeekBytes) and writer (4 KiB),
// from the gateway's pool.
type sessionBufs struct {
	br *bufio.Reader
	bw *bufio.Writer
}

// takeBuffers gives s a reader and a writer over its connection from the
// gateway's pool.
func (s *httpSession) takeBuffers() {
	b, _ := s.g.sessBufs.Get().(*sessionBufs)
	if b == nil {
		b = &sessionBufs{br: bufio.NewReaderSize(nil, maxPeekBytes), bw: bufio.NewWriterSize(nil, 4096)}
	}
	b.br.Reset(&s.rd)
	b.bw.Reset(s.dw)
	s.br, s.bw, s.bufs = b.br, b.bw, b
}

// recycleBuffers is dropBuffers, and gives pooled buffers back. Only where
// nothing refers to them any more: the connection belongs to a tunnel, and
// what they held was copied (or there was nothing). A reader handed to
// anything else (prefixConn: interception, h2c) is never recycled.
func (s *httpSession) recycleBuffers() {
	b := s.bufs
	s.dropBuffers()
	s.bufs = nil
	if b == nil {
		return
	}
	b.br.Reset(nil)
	b.bw.Reset(nil)
	s.g.sessBufs.Put(b)
}

// connectHTTP serves plaintext HTTP inside an allowed CONNECT: a session
// pinned to the CONNECT's host and port runs each request through the
// pipeline as kind http, so every request must name that host and is decided
// and audited on its own. Nothing was dialed for the CONNECT: the first
// allowed request dials, so a refused one never reaches the upstream.
func (g *Gateway) connectHTTP(rc *reqCtx) error {
	if err := g.openTunnel(rc); err != nil {
		return err
	}
	outer := rc.sess
	head, _ := outer.br.Peek(outer.br.Buffered())
	cnt := &countConn{Conn: outer.conn}
	s := g.newPinnedSession(rc.cc, cnt, head, rc.host, rc.port)
	outer.recycleBuffers() // the pinned session copied head and reads the connection itself
	s.loop(policy.KindHTTP)
	rc.bytesUp, rc.bytesDown = int64(len(head))+cnt.in.Load(), cnt.out.Load()
	return nil
}

// connectH2C serves h2c (prior knowledge) inside an allowed CONNECT: every
// stream must name the CONNECT's host and port and is decided and audited on
// its own, as connectHTTP does for HTTP/1.1. Upstream it is plain HTTP/1.1
// (pooled connections, dialed by the first allowed stream).
func (g *Gateway) connectH2C(rc *reqCtx) error {
	if err := g.openTunnel(rc); err != nil {
		return err
	}
	outer := rc.sess
	cnt := &countConn{Conn: &prefixConn{Conn: outer.conn, r: outer.br}}
	g.serveH2(rc.cc, cnt, h2Target{scheme: "http", host: rc.host, port: rc.port, defaultPort: rc.port})
	rc.bytesUp, rc.bytesDown = cnt.in.Load(), cnt.out.Load()
	return nil
}

// copyUp writes head, then copies client to up (spliceIdle: splice when
// both are *net.TCPConn, no pipe held while idle), then half-closes up. With a guard (a sandbox that holds
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
	var n int64
	var err error
	if guard != nil {
		n, err = io.Copy(up, guardedReader{r: client, guard: guard})
	} else {
		n, err = spliceIdle(up, client)
	}
	total += n
	closeWrite(up)
	return total, err
}

// pipe relays between two connections with already-read heads (websocket
// after 101, intercepted TLS passthrough).
func pipe(rc *reqCtx, a net.Conn, aHead []byte, b net.Conn, bHead []byte, guard *secrets.StreamGuard) error {
	down := make(chan int64, 1)
	var wsd *wsDown // what a websocket's server sends, decided (wsdown.go)
	if rc.wsScan != nil {
		wsd = rc.wsScan.g.newWSDown(rc, io.MultiReader(bytes.NewReader(bHead), b))
	}
	go func() {
		var total int64
		if wsd != nil {
			total, _ = io.Copy(a, wsd)
			if _, err := wsd.denial(); err != nil {
				a.Close() // the close frame went: nothing more either way
				b.Close()
			}
			closeWrite(a)
			down <- total
			return
		}
		if len(bHead) > 0 {
			n, _ := a.Write(bHead)
			total += int64(n)
		}
		n, _ := spliceIdle(a, b)
		closeWrite(a)
		down <- total + n
	}()
	var src net.Conn = a
	ws := rc.wsScan
	if ws != nil {
		src = wsScanConn{Conn: a, w: ws}
		ws.check(aHead) // refused: copyUp is skipped, not a byte of it leaves
	}
	var n int64
	if ws == nil || ws.err == nil {
		n, _ = copyUp(b, aHead, src, guard)
	}
	if !wsDenied(rc, ws, a, b) {
		guardFailed(rc, guard, a, b)
	}
	rc.bytesUp += n
	rc.bytesDown += <-down
	if dec, err := wsd.denial(); err != nil && rc.err == nil {
		rc.err = err
		if dec != nil {
			rc.dec, rc.decided = *dec, true
		}
	}
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
		NextProtos: []string{h2ALPN, "http/1.1"}, // h2: every stream through the pipeline (h2.go)
		// Full 16 KiB records from the first byte: crypto/tls otherwise
		// writes the first 128 KiB of every connection in records of one
		// TCP segment (about 1.2 KiB), each its own seal and write(2), a
		// browser's latency trade that only costs a relay.
		DynamicRecordSizingDisabled: true,
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
	tc := tls.Server(g.batchWrites(cnt), cfg)
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
	st := tc.ConnectionState()
	if st.NegotiatedProtocol == h2ALPN {
		g.serveH2(rc.cc, tc, h2Target{scheme: "https", intercepted: true, sni: st.ServerName, host: rc.host, port: rc.port, defaultPort: rc.port})
		tc.Close()
		return nil
	}
	s := g.newPinnedSession(rc.cc, tc, nil, rc.host, rc.port)
	s.scheme, s.intercepted = "https", true
	s.sni = st.ServerName
	s.loop(policy.KindHTTP)
	tc.Close()
	return nil
}

// tunnel relays a passthrough connection (TLS or raw TCP, transparent or
// through a CONNECT): head is what the peekers buffered; the rest goes
// *net.TCPConn to *net.TCPConn.
func (g *Gateway) tunnel(rc *reqCtx, client net.Conn, head []byte, up net.Conn) error {
	if err := g.openTunnel(rc); err != nil {
		return err
	}
	rc.responded = true
	// Nothing is read or answered through the peek buffers from here: keep a
	// copy of what they held and let them go (16 KiB and 4 KiB per open
	// tunnel otherwise, for as long as it stays open).
	head = bytes.Clone(head)
	rc.br = nil
	if rc.sess != nil {
		rc.sess.recycleBuffers()
	}
	down := make(chan int64, 1)
	go func() {
		n, _ := spliceIdle(client, up)
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
