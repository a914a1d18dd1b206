package gateway

import (
	"crypto/tls"
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Socket I/O under the two TLS connections of an intercepted exchange.
// crypto/tls reads one record's bytes at a time from the connection under
// it and writes each record (16 KiB of plaintext at most) with its own
// write(2); a relay that decrypts and re-encrypts every byte then pays a
// system call per record on each side. Under the upstream's TLS a
// readAhead takes everything the socket holds in one read(2) and tells the
// relay when a read would wait (so the relay writes to the client then,
// not before every record); under the client's TLS a recordBatch gathers
// the records of one write of the session and sends them in one write(2).
// Neither holds a buffer while idle: both take one from the Gateway's
// tlsBufs for as long as it holds bytes.

const (
	readAheadSize = 256 << 10 // bytes one read(2) of an upstream TLS socket may bring
	// batchSize is what a recordBatch gathers before it writes: the
	// relay's writes (relayWriteSize) as records, with their overhead.
	batchSize = relayWriteSize + 8<<10
)

// tlsBufs pools the buffers of readAheads and recordBatches (zero value
// ready).
type tlsBufs struct {
	read, batch sync.Pool // *[]byte
}

func (p *tlsBufs) getRead() *[]byte {
	if b, ok := p.read.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, readAheadSize)
	return &b
}

func (p *tlsBufs) getBatch() *[]byte {
	if b, ok := p.batch.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, batchSize)
	return &b
}

// readAhead is an upstream TCP connection as the TLS client above it reads
// it: each read(2) takes up to readAheadSize bytes (every record the socket
// holds), served from the buffer until it is drained, when the buffer goes
// back to the pool. The wait for more bytes happens without a buffer, and
// beforeWait (when set) runs first: the response relay flushes what it
// holds to the client only when the upstream has nothing more for now.
// Read by one goroutine at a time (the TLS connection's read lock).
type readAhead struct {
	net.Conn
	raw  syscall.RawConn
	bufs *tlsBufs
	buf  *[]byte
	r, w int

	beforeWait func()
}

// newReadAhead wraps c, or returns nil when c is not a plain TCP connection
// (a wrapper that reads on its own, a parent proxy's TLS): then the TLS
// client reads c as it is.
func newReadAhead(c net.Conn, bufs *tlsBufs) *readAhead {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return &readAhead{Conn: c, raw: raw, bufs: bufs}
}

// Buffered is the number of bytes read from the socket and not yet read
// through the readAhead.
func (c *readAhead) Buffered() int { return c.w - c.r }

func (c *readAhead) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if c.r == c.w {
		if err := c.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, (*c.buf)[c.r:c.w])
	c.r += n
	if c.r == c.w {
		c.drop()
	}
	return n, nil
}

// drop returns the buffer to the pool.
func (c *readAhead) drop() {
	if c.buf != nil {
		c.bufs.read.Put(c.buf)
		c.buf = nil
	}
	c.r, c.w = 0, 0
}

// fill reads the socket once into a pooled buffer. On the first "nothing
// yet" it runs beforeWait and tries again before waiting (what beforeWait
// wrote took time the upstream may have used); a deadline or a close ends
// the wait as a read of the connection would.
func (c *readAhead) fill() error {
	ran := c.beforeWait == nil
	for {
		var n int
		var errno error
		err := c.raw.Read(func(fd uintptr) bool {
			if c.buf == nil {
				c.buf = c.bufs.getRead()
			}
			for {
				n, errno = unix.Read(int(fd), *c.buf)
				if errno != unix.EINTR {
					break
				}
			}
			if errno == unix.EAGAIN {
				c.drop() // no buffer held while waiting
				return !ran
			}
			return true
		})
		switch {
		case err != nil:
			c.drop()
			return c.opError(err)
		case errno == unix.EAGAIN:
			ran = true
			c.beforeWait()
			continue
		case errno != nil:
			c.drop()
			return c.opError(os.NewSyscallError("read", errno))
		case n == 0:
			c.drop()
			return io.EOF
		}
		c.r, c.w = 0, n
		return nil
	}
}

// opError wraps err as the net package wraps a failed read, so callers that
// test for timeouts and closed connections see what they expect.
func (c *readAhead) opError(err error) error {
	return &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// recordBatch is a client connection as the intercepting TLS server above
// it writes it: between begin and end (one write of the session's
// deadlineWriter, which crypto/tls cuts into records) the records are
// gathered, up to batchSize, and end writes them in one write(2). Outside a
// batch (the handshake, alerts, HTTP/2) writes go straight through. A
// failed write is sticky: the TLS stream is cut mid-record, so every later
// write fails with the same error.
type recordBatch struct {
	net.Conn
	bufs *tlsBufs

	mu   sync.Mutex
	hold bool
	buf  *[]byte
	err  error
}

// batchWrites wraps an intercepted client connection for its TLS server.
func (g *Gateway) batchWrites(c net.Conn) net.Conn {
	return &recordBatch{Conn: c, bufs: &g.tlsBufs}
}

// batchOf returns the recordBatch under an intercepted client connection,
// or nil.
func batchOf(c net.Conn) *recordBatch {
	if tc, ok := c.(*tls.Conn); ok {
		b, _ := tc.NetConn().(*recordBatch)
		return b
	}
	return nil
}

func (c *recordBatch) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if !c.hold {
		n, err := c.Conn.Write(p)
		c.err = err
		return n, err
	}
	if c.buf == nil {
		c.buf = c.bufs.getBatch()
	}
	if len(*c.buf)+len(p) > cap(*c.buf) {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
		if len(p) > cap(*c.buf) {
			n, err := c.Conn.Write(p)
			c.err = err
			return n, err
		}
	}
	*c.buf = append(*c.buf, p...)
	return len(p), nil
}

// begin starts gathering writes.
func (c *recordBatch) begin() {
	c.mu.Lock()
	c.hold = true
	c.mu.Unlock()
}

// end writes what was gathered since begin and stops gathering; its error
// is the write's.
func (c *recordBatch) end() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hold = false
	if c.buf == nil {
		return c.err
	}
	err := c.flushLocked()
	c.bufs.batch.Put(c.buf)
	c.buf = nil
	return err
}

func (c *recordBatch) flushLocked() error {
	if c.err != nil || len(*c.buf) == 0 {
		return c.err
	}
	_, err := c.Conn.Write(*c.buf)
	*c.buf = (*c.buf)[:0]
	c.err = err
	return err
}
