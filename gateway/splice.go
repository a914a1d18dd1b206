package gateway

import (
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Plain HTTP bodies socket to socket. A response with a Content-Length from
// a plain-TCP HTTP/1.1 upstream to a client on plain TCP (plaintext HTTP
// inside a CONNECT, a transparent HTTP connection) needs no look at its body
// once its header was decided, scrubbed and written, unless a scrubber or
// content inspection took the body: then bodySplice moves what the upstream
// reader had buffered through the relay, and the rest with splice(2), kernel
// to kernel, the exact length and no more, so the upstream connection stays
// reusable. Chunked bodies, TLS on either side and HTTP/2 keep the relay.

// spliceMinBody is the smallest body worth splicing: below it the relay's
// one copy costs less than the syscalls.
const spliceMinBody = 256 << 10

// spliceChunk bounds one splice, so the client's write deadline
// (IdleTimeout without progress) is pushed forward between chunks.
const spliceChunk = 4 << 20

// bodySplice is one response body that may go by splice.
type bodySplice struct {
	u       *upstreamConn
	up      *net.TCPConn // under u
	client  *net.TCPConn // under the session's connection
	clientN *countConn   // the session's connection when it counts bytes (connectHTTP)
	count   *int64       // the record's bytes down
	timeout time.Duration
	done    bool          // splicing began: the body's reader never saw those bytes
	spliced *atomic.Int64 // the gateway's count of spliced bodies
}

// spliceFor returns a bodySplice for resp when its body may be spliced, nil
// when it goes through the relay.
func (s *httpSession) spliceFor(resp *http.Response, u *upstreamConn) *bodySplice {
	if u == nil || u.h2 != nil || s.h2 != nil || s.intercepted || resp.ContentLength < spliceMinBody || len(resp.TransferEncoding) > 0 {
		return nil
	}
	cr, ok := resp.Body.(countReadCloser)
	if !ok || cr.Closer != u.body || cr.r != u.body {
		return nil // a scrubber or content inspection reads the body
	}
	up, ok := u.nc.(*net.TCPConn)
	if !ok {
		return nil
	}
	sp := &bodySplice{u: u, up: up, count: cr.n, timeout: s.g.cfg.IdleTimeout, spliced: &s.g.splicedBodies}
	switch c := s.conn.(type) {
	case *net.TCPConn:
		sp.client = c
	case *countConn:
		sp.client, _ = c.Conn.(*net.TCPConn)
		sp.clientN = c
	}
	if sp.client == nil {
		return nil
	}
	return sp
}

// relay writes the body lr reads (the relayBody under net/http's
// Content-Length limit): what the upstream reader already holds through the
// relay, then the header and that flushed, then the rest spliced.
func (sp *bodySplice) relay(r *bodyRelay, lr *io.LimitedReader) (int64, error) {
	var total int64
	buf := r.b.read
	for lr.N > 0 && sp.u.br.Buffered() > 0 {
		n, err := lr.Read(buf[:min(len(buf), sp.u.br.Buffered())])
		if n > 0 {
			if _, werr := r.Write(buf[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
		}
		if err != nil {
			return total, err
		}
	}
	if err := r.Flush(); err != nil {
		return total, err
	}
	// From here the body's reader is out of step with its connection: it
	// is never read or drained again (a failed splice drops the upstream).
	sp.done = true
	sp.spliced.Add(1)
	for lr.N > 0 {
		sp.client.SetWriteDeadline(time.Now().Add(sp.timeout))
		n, err := sp.client.ReadFrom(&io.LimitedReader{R: sp.up, N: min(lr.N, spliceChunk)})
		lr.N -= n
		total += n
		*sp.count += n
		if sp.clientN != nil {
			sp.clientN.out.Add(n)
		}
		if err != nil {
			return total, err
		}
		if n == 0 {
			return total, io.ErrUnexpectedEOF
		}
	}
	sp.client.SetWriteDeadline(time.Time{})
	return total, nil
}
