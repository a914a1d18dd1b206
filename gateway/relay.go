package gateway

import (
	"bufio"
	"io"
	"net/http"
	"sync"
)

// Response bodies on the gateway's own HTTP/1.1 loop (transparent HTTP,
// plaintext HTTP in a CONNECT, intercepted TLS): forward hands
// http.Response.Write a bodyRelay, which moves the body in large writes
// instead of the session's 4 KiB ones (one TLS record and one write deadline
// per write). It flushes what it holds right before the gateway would wait
// on the upstream socket (upstreamReader.beforeRead), so a streamed response
// reaches the client as it arrives and a small one leaves with its header in
// one write.

const (
	relayWriteSize = 64 << 10 // bytes a bodyRelay holds before it writes
	relayReadSize  = 32 << 10 // bytes read from the body at a time (the upstream reader's size: reads bypass its copy)
)

// relayBufs are a bodyRelay's buffers, pooled on the Gateway.
type relayBufs struct {
	bw   *bufio.Writer
	read []byte
}

func newRelayPool() *sync.Pool {
	return &sync.Pool{New: func() any {
		return &relayBufs{bw: bufio.NewWriterSize(nil, relayWriteSize), read: make([]byte, relayReadSize)}
	}}
}

// bodyRelay is the writer one response is written to. Header writes are
// buffered; the body comes through ReadFrom (Content-Length: the reader is
// net/http's LimitReader) or through relayBody.WriteTo (chunked), both reading
// into the pooled read buffer.
type bodyRelay struct {
	pool *sync.Pool
	b    *relayBufs
	// flushEach: flush after every body read (no beforeRead hook could be
	// set: an HTTP/2 upstream's body).
	flushEach bool
	// sp: the body may be spliced socket to socket (bodySplice).
	sp *bodySplice
}

// newBodyRelay takes buffers from the pool writing to w (the session's
// deadline writer).
func (g *Gateway) newBodyRelay(w io.Writer, flushEach bool) *bodyRelay {
	b := g.relayBufs.Get().(*relayBufs)
	b.bw.Reset(w)
	return &bodyRelay{pool: g.relayBufs, b: b, flushEach: flushEach}
}

// release returns the buffers; the relay is not used again.
func (r *bodyRelay) release() {
	r.b.bw.Reset(nil)
	r.pool.Put(r.b)
	r.b = nil
}

func (r *bodyRelay) Write(p []byte) (int, error) { return r.b.bw.Write(p) }

// Flush writes what the relay holds.
func (r *bodyRelay) Flush() error { return r.b.bw.Flush() }

// flushHeld is upstreamReader's beforeRead: nothing waits in the relay while
// the gateway waits for the upstream.
func (r *bodyRelay) flushHeld() {
	if r.b.bw.Buffered() > 0 {
		r.b.bw.Flush() // an error stays in the writer and ends the response
	}
}

// ReadFrom copies a Content-Length body (net/http's Response.Write hands its
// LimitReader here through io.Copy), spliced when it may be.
func (r *bodyRelay) ReadFrom(src io.Reader) (int64, error) {
	if lr, ok := src.(*io.LimitedReader); ok && r.sp != nil {
		if b, ok := lr.R.(relayBody); ok && b.r == r {
			return r.sp.relay(r, lr)
		}
	}
	return r.copyTo(r, src)
}

// copyTo reads src into the read buffer and writes each read to w (the relay
// itself, or net/http's chunked writer in front of it).
func (r *bodyRelay) copyTo(w io.Writer, src io.Reader) (int64, error) {
	var total int64
	buf := r.b.read
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			m, err := w.Write(buf[:n])
			total += int64(m)
			if err == nil && r.flushEach {
				err = r.Flush()
			}
			if err != nil {
				return total, err
			}
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}

// relayBody is the response body forward hands Response.Write: for a chunked
// response io.Copy uses its WriteTo (the pooled read buffer, not a new 32 KiB
// one per response); a Content-Length body is read through Read.
type relayBody struct {
	io.ReadCloser
	r *bodyRelay
}

func (b relayBody) WriteTo(w io.Writer) (int64, error) {
	if b.r.sp != nil && b.r.sp.done {
		return 0, nil
	}
	return b.r.copyTo(w, b.ReadCloser)
}

// Read (and WriteTo) is EOF once the body went by splice: Response.Write
// reads on after the Content-Length to check for more.
func (b relayBody) Read(p []byte) (int, error) {
	if b.r.sp != nil && b.r.sp.done {
		return 0, io.EOF
	}
	return b.ReadCloser.Read(p)
}

// Close closes the body unless it went by splice: net/http's reader never
// saw those bytes and would wait for them.
func (b relayBody) Close() error {
	if b.r.sp != nil && b.r.sp.done {
		return nil
	}
	return b.ReadCloser.Close()
}

// writeResponse writes resp (header and body) to the client through a
// bodyRelay. u is the HTTP/1.1 upstream the body comes from (nil when it
// comes from elsewhere: the relay then flushes after every read).
func (s *httpSession) writeResponse(resp *http.Response, u *upstreamConn) error {
	if err := s.bw.Flush(); err != nil { // nothing is expected here; keep the order if there is
		return err
	}
	r := s.g.newBodyRelay(s.dw, u == nil)
	defer r.release()
	if u != nil {
		u.rd.beforeRead = r.flushHeld
		defer func() { u.rd.beforeRead = nil }()
	}
	if writeResponseHead(r.b.bw, resp) {
		if n := resp.ContentLength; n > 0 {
			var body io.Reader = resp.Body
			// A long body goes by splice here too (ReadFrom): the head
			// waits in the relay and is flushed first.
			if r.sp = s.spliceFor(resp, u); r.sp != nil {
				body = relayBody{ReadCloser: resp.Body, r: r}
			}
			if _, err := io.CopyN(r, body, n); err != nil {
				return err
			}
		}
		return r.Flush()
	}
	if resp.Body != nil && resp.Body != http.NoBody {
		r.sp = s.spliceFor(resp, u)
		resp.Body = relayBody{ReadCloser: resp.Body, r: r}
	}
	if err := resp.Write(r); err != nil {
		return err
	}
	return r.Flush()
}
