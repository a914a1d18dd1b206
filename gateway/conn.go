package gateway

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// clientConn is one accepted connection from a sandbox.
type clientConn struct {
	g    *Gateway
	sb   *sandbox
	mode listenerMode
	nc   net.Conn
	idle atomic.Bool

	mu      sync.Mutex
	closers []io.Closer // upstreams and wrappers to close with the connection
	closed  bool
}

func (g *Gateway) newClientConn(s *sandbox, c net.Conn, mode listenerMode) *clientConn {
	cc := &clientConn{g: g, sb: s, mode: mode, nc: c}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetKeepAlive(true)
		tc.SetKeepAlivePeriod(30 * time.Second)
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		c.Close()
		return nil
	}
	if s.conns.Add(1) > int64(g.cfg.MaxConnsPerSandbox) {
		s.conns.Add(-1)
		s.mu.Unlock()
		// The cap is a denial like any other: audited, then refused.
		rc := g.newReqCtx(cc, nil)
		rc.kind = kindOfMode(mode)
		g.serveRefused(rc, deny(ReasonConnLimit, "sandbox %s has %d connections open (max_conns_per_sandbox)", s.info.ID, g.cfg.MaxConnsPerSandbox))
		c.Close()
		return nil
	}
	s.live[cc] = struct{}{}
	s.mu.Unlock()
	g.metrics.activeConns.Inc()
	return cc
}

// track registers a closer (an upstream connection) to be closed with cc; the
// returned func unregisters it.
func (cc *clientConn) track(c io.Closer) (untrack func()) {
	cc.mu.Lock()
	if cc.closed {
		cc.mu.Unlock()
		c.Close()
		return func() {}
	}
	cc.closers = append(cc.closers, c)
	cc.mu.Unlock()
	return func() {
		cc.mu.Lock()
		for i, x := range cc.closers {
			if x == c {
				cc.closers = append(cc.closers[:i], cc.closers[i+1:]...)
				break
			}
		}
		cc.mu.Unlock()
	}
}

// forceClose closes the connection and everything tracked with it; handlers
// blocked on either side return.
func (cc *clientConn) forceClose() {
	cc.mu.Lock()
	cc.closed = true
	cl := cc.closers
	cc.closers = nil
	cc.mu.Unlock()
	cc.nc.Close()
	for _, c := range cl {
		c.Close()
	}
}

// close is the handler's final cleanup.
func (cc *clientConn) close() {
	cc.forceClose()
	s := cc.sb
	s.mu.Lock()
	delete(s.live, cc)
	s.mu.Unlock()
	s.conns.Add(-1)
	cc.g.metrics.activeConns.Dec()
}

// connReader sits under a session's bufio.Reader: while a header block is read
// it enforces MaxHeaderBytes; while a body is read it pushes the read deadline
// forward on every read, so a client that stops sending is dropped. While
// bounded (bound), no read waits past one absolute deadline, however steadily
// the client dribbles.
type connReader struct {
	c        net.Conn
	limit    int  // remaining header bytes when limited
	limited  bool // reading a header block
	progress time.Duration
	// until and expired are atomic: bound and Read may run on different
	// goroutines.
	until   atomic.Int64 // bound: unix nanos after which reads fail; 0 when unbounded
	expired atomic.Bool  // a read failed because until passed
}

// bound makes every read until unbound fail once t passes.
func (r *connReader) bound(t time.Time) {
	r.until.Store(t.UnixNano())
	r.expired.Store(false)
	r.c.SetReadDeadline(t)
}

// unbound lifts bound's deadline.
func (r *connReader) unbound() {
	r.until.Store(0)
	r.c.SetReadDeadline(time.Time{})
}

var errHeaderTooLarge = errors.New("request header exceeds max_header_bytes")

func (r *connReader) Read(p []byte) (int, error) {
	if r.limited {
		if r.limit <= 0 {
			return 0, errHeaderTooLarge
		}
		if len(p) > r.limit {
			p = p[:r.limit]
		}
	} else if r.progress > 0 {
		d := time.Now().Add(r.progress)
		if u := r.until.Load(); u != 0 && u < d.UnixNano() {
			d = time.Unix(0, u)
		}
		r.c.SetReadDeadline(d)
	}
	n, err := r.c.Read(p)
	r.limit -= n
	if u := r.until.Load(); err != nil && u != 0 && isTimeout(err) && time.Now().UnixNano() >= u {
		r.expired.Store(true)
	}
	return n, err
}

// deadlineWriter pushes the write deadline forward on every write: slow readers
// are dropped after timeout without progress.
type deadlineWriter struct {
	c       net.Conn
	timeout time.Duration
	// batch, when c is an intercepted TLS connection: the records of each
	// write leave in one write(2) (tlsio.go).
	batch *recordBatch
}

func (w deadlineWriter) Write(p []byte) (int, error) {
	w.c.SetWriteDeadline(time.Now().Add(w.timeout))
	if w.batch == nil {
		return w.c.Write(p)
	}
	w.batch.begin()
	n, err := w.c.Write(p)
	if ferr := w.batch.end(); ferr != nil && err == nil {
		return 0, ferr // the records did not all reach the client
	}
	return n, err
}

// prefixConn is a net.Conn whose first reads come from a bufio.Reader that
// already holds bytes the peekers looked at.
type prefixConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if c.r != nil {
		if c.r.Buffered() > 0 {
			return c.r.Read(p)
		}
		c.r = nil
	}
	return c.Conn.Read(p)
}

// countConn counts bytes both ways (used where splice does not apply anyway).
type countConn struct {
	net.Conn
	in, out atomic.Int64
}

func (c *countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.Add(int64(n))
	return n, err
}

func (c *countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.Add(int64(n))
	return n, err
}

// countReader counts bytes read through it.
type countReader struct {
	r io.Reader
	n *int64
}

func (c countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n += int64(n)
	return n, err
}

type countReadCloser struct {
	countReader
	io.Closer
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}
