package gateway

import (
	"errors"
	"io"
	"net"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// What an open tunnel holds while no byte moves. A goroutine waiting in
// io.Copy between two *net.TCPConn holds a splice pipe (two descriptors and
// the kernel's pipe) for as long as it waits, and a peeker waiting for a
// client's first byte holds its read buffer. An idle tunnel should hold
// neither: awaitReadable waits on the socket itself, with no buffer, and
// spliceIdle moves only what the kernel says is queued, so its pipe goes
// back to the pool as soon as the bytes have moved. Ten thousand idle
// tunnels then cost the gateway two descriptors each, not six.

// errNoRawConn: the connection has no socket to wait on (a wrapper, a pipe
// in tests); callers fall back to a buffered read.
var errNoRawConn = errors.New("connection has no raw socket")

// awaitReadable waits until c has a byte to read, has reached EOF or failed,
// or deadline passes (then an error with Timeout() true, as a read's). It
// reads nothing and holds no buffer while it waits. queued is what the
// kernel holds for reading (0 at EOF).
func awaitReadable(c net.Conn, deadline time.Time) (queued int, err error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, errNoRawConn
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, errNoRawConn
	}
	if !deadline.IsZero() {
		c.SetReadDeadline(deadline)
		defer c.SetReadDeadline(time.Time{})
	}
	var probeErr error
	err = raw.Read(func(fd uintptr) bool {
		queued, probeErr = queuedBytes(int(fd))
		return !errors.Is(probeErr, unix.EAGAIN)
	})
	if err != nil {
		return 0, err
	}
	return queued, probeErr
}

// queuedBytes is the number of bytes waiting on the socket fd; 0 with a nil
// error at EOF, EAGAIN when there is nothing yet. (recvfrom is called
// directly: unix.Recvfrom allocates the peer's address on every call.)
func queuedBytes(fd int) (int, error) {
	for {
		n, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
		if err == nil && n > 0 {
			return n, nil
		}
		// Nothing queued: EOF, an error, or not yet.
		var b [1]byte
		m, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), 1, unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		switch {
		case errno == unix.EINTR:
			continue
		case errno != 0:
			return 0, errno
		case m == 0:
			return 0, nil
		}
		// A byte is there that SIOCINQ did not count: it arrived between
		// the calls, or it is the last before a FIN (which SIOCINQ takes
		// one off for).
		return 1, nil
	}
}

// spliceIdle copies src to dst until src's EOF, as io.Copy does (spliced
// between two *net.TCPConn), but between bursts it waits on src with no
// pipe held (awaitReadable). Other connections go through io.Copy.
func spliceIdle(dst, src net.Conn) (int64, error) {
	tsrc, ok := src.(*net.TCPConn)
	if _, dok := dst.(*net.TCPConn); !ok || !dok {
		return io.Copy(dst, src)
	}
	var total int64
	lr := &io.LimitedReader{R: tsrc}
	for {
		n, err := awaitReadable(tsrc, time.Time{})
		if err != nil {
			if errors.Is(err, errNoRawConn) {
				m, err := io.Copy(dst, src)
				return total + m, err
			}
			return total, err
		}
		if n == 0 {
			return total, nil // EOF
		}
		lr.N = int64(n)
		m, err := io.Copy(dst, lr)
		total += m
		if err != nil {
			return total, err
		}
		if m < int64(n) {
			return total, nil // EOF (queued bytes cannot go away otherwise)
		}
	}
}
