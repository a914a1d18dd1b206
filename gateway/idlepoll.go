package gateway

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// An idle tunnel's upstream-to-client direction waits on the idlePoller, not
// on a goroutine of its own. A goroutine blocked in a read holds its stack
// (2-8 KiB, more after a deep call) for as long as the tunnel is open; a
// socket registered with the poller holds an entry in an epoll set and a
// small struct. When the upstream has bytes, the poller starts a goroutine
// that moves them (splice, as spliceIdle does) for as long as they keep
// coming and parks the direction again after parkGrace without a byte.
//
// The poller is one epoll instance per Gateway (made on the first tunnel)
// read by one goroutine that itself waits in the runtime's netpoller (the
// epoll descriptor is readable while it has events), so it holds no thread.
// Registrations are one-shot: an event disarms its socket until it is armed
// again, so a socket is never handled twice at once. A socket closed while
// armed leaves the epoll set with its last descriptor, silently: the owner
// of a parked direction (tunnel) takes it back with take before it waits for
// it, and runs it itself when the poller had not fired.

// parkGrace is how long a busy direction keeps its goroutine after its last
// byte before it parks: long enough that a transfer in bursts does not park
// between them, short enough that idle tunnels do not each hold one.
const parkGrace = time.Second

// pollerBuf is what the poller moves for one event on its own goroutine; a
// burst that fills it is handed to a goroutine (a transfer, not a wake-up).
const pollerBuf = 16 << 10

// idlePoller is the Gateway's epoll set of parked tunnel directions.
type idlePoller struct {
	f     *os.File // the epoll descriptor, in the runtime's netpoller
	epfd  int
	grace time.Duration // parkGrace; shorter in tests
	buf   []byte        // run's: what one event moves without a goroutine

	mu     sync.Mutex
	parked map[uint64]*parkedDir
	next   uint64
	closed bool
}

// newIdlePoller makes the epoll set and starts its reader.
func newIdlePoller() (*idlePoller, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	p := &idlePoller{f: os.NewFile(uintptr(fd), "airlock-idle-epoll"), epfd: fd, grace: parkGrace, buf: make([]byte, pollerBuf), parked: map[uint64]*parkedDir{}}
	raw, err := p.f.SyscallConn()
	if err != nil {
		p.f.Close()
		return nil, err
	}
	go p.run(raw)
	return p, nil
}

// idle returns the Gateway's poller, made on first use; nil when it cannot
// be made (the caller waits with a goroutine, as before).
func (g *Gateway) idle() *idlePoller {
	g.idleOnce.Do(func() {
		p, err := newIdlePoller()
		if err != nil {
			g.logger.Warn("idle tunnel poller unavailable: each open tunnel keeps a goroutine per direction", "error", err)
			return
		}
		g.idlePoll = p
	})
	return g.idlePoll
}

// closeIdle stops the poller, if one was made (Shutdown, once every tunnel
// ended).
func (g *Gateway) closeIdle() {
	g.idleOnce.Do(func() {}) // none made from here on
	if g.idlePoll != nil {
		g.idlePoll.close()
	}
}

// run reads events until the poller is closed. Each event's direction is
// taken out of the set and resumed on a goroutine of its own.
func (p *idlePoller) run(raw interface {
	Read(func(fd uintptr) bool) error
}) {
	evs := make([]unix.EpollEvent, 128)
	raw.Read(func(fd uintptr) bool {
		for {
			n, err := unix.EpollWait(int(fd), evs, 0)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || n <= 0 {
				return false // nothing ready: wait until the epoll descriptor is readable again
			}
			for _, ev := range evs[:n] {
				key := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
				p.mu.Lock()
				d := p.parked[key]
				delete(p.parked, key)
				p.mu.Unlock()
				if d != nil {
					d.fire()
				}
			}
			if n < len(evs) {
				return false
			}
		}
	})
}

// close stops the reader. Directions still parked stay so until their owner
// takes them back.
func (p *idlePoller) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.f.Close()
}

// parkedNow is the number of directions parked (tests).
func (p *idlePoller) parkedNow() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.parked)
}

// arm registers d's source for one readable (or hung-up) event.
func (p *idlePoller) arm(d *parkedDir) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return net.ErrClosed
	}
	p.next++
	key := p.next
	p.parked[key] = d
	p.mu.Unlock()
	d.key = key
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: int32(uint32(key)), Pad: int32(uint32(key >> 32))}
	var cerr error
	// Inside Control the descriptor cannot be closed and reused under us.
	err := d.rawSrc.Control(func(fd uintptr) {
		// A socket parked before stays in the set, disarmed, until it
		// is closed: re-arm it (MOD), or add it the first time.
		cerr = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_MOD, int(fd), &ev)
		if errors.Is(cerr, unix.ENOENT) {
			cerr = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
		}
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		p.mu.Lock()
		delete(p.parked, key)
		p.mu.Unlock()
	}
	return err
}

// disarm takes d's source out of the set (its event, if one comes after all,
// finds no direction).
func (p *idlePoller) disarm(d *parkedDir) {
	p.mu.Lock()
	delete(p.parked, d.key)
	p.mu.Unlock()
	d.rawSrc.Control(func(fd uintptr) {
		unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	}) // an error: the socket is closed, and so out of the set already
}

// parkedDir is one tunnel direction, src to dst, that waits on the poller
// while idle.
type parkedDir struct {
	p        *idlePoller
	dst, src *net.TCPConn
	rawSrc   syscall.RawConn
	rawDst   syscall.RawConn
	key      uint64
	done     chan struct{} // closed when the direction ended (total and err final)

	mu      sync.Mutex
	state   parkState
	noPark  bool // the owner waits for the end: do not park again
	total   int64
	err     error
	onClose func() // after the direction ended (closeWrite of dst)
}

type parkState uint8

const (
	dirParked  parkState = iota // armed on the poller
	dirRunning                  // a goroutine (or the owner) moves bytes
	dirEnded
)

// parkDirection starts moving src to dst as a parked direction: nothing runs
// until src is readable. onEnd runs once when src reached EOF or failed. It
// returns nil when the poller cannot take it (the caller then runs the
// direction on a goroutine).
func (p *idlePoller) parkDirection(dst, src *net.TCPConn, onEnd func()) *parkedDir {
	rs, err := src.SyscallConn()
	if err != nil {
		return nil
	}
	rd, err := dst.SyscallConn()
	if err != nil {
		return nil
	}
	d := &parkedDir{p: p, dst: dst, src: src, rawSrc: rs, rawDst: rd, done: make(chan struct{}), state: dirParked, onClose: onEnd}
	if err := p.arm(d); err != nil {
		return nil
	}
	return d
}

// fire is the poller's event: unless its owner took the direction back, it
// moves what src holds right here, on the poller's goroutine, without
// waiting (a non-blocking read into the poller's buffer and a non-blocking
// write), and parks the direction again. Only a burst that does not fit
// (the buffer filled, or dst would block) gets a goroutine (move), which
// keeps it while bytes come. An idle tunnel woken by a few bytes (a
// keep-alive, an echo) so costs no goroutine at all.
func (d *parkedDir) fire() {
	d.mu.Lock()
	if d.state != dirParked {
		d.mu.Unlock()
		return
	}
	d.state = dirRunning
	d.mu.Unlock()
	n, left, eof, err := d.moveQueued(d.p.buf)
	d.mu.Lock()
	d.total += int64(n)
	switch {
	case err != nil || eof:
		d.mu.Unlock()
		d.end(err)
		return
	case left != nil || n == len(d.p.buf):
		d.mu.Unlock()
		go d.move(left)
		return
	case !d.noPark:
		d.state = dirParked
		if d.p.arm(d) == nil {
			d.mu.Unlock()
			return
		}
		d.state = dirRunning
	}
	d.mu.Unlock()
	go d.move(nil) // the owner waits for the end, or the poller is gone
}

// moveQueued reads what src holds into buf and writes it to dst, neither
// waiting. left is a copy of what dst did not take (nil when it took all).
func (d *parkedDir) moveQueued(buf []byte) (n int, left []byte, eof bool, err error) {
	var rerr error
	cerr := d.rawSrc.Control(func(fd uintptr) {
		for {
			n, rerr = unix.Read(int(fd), buf)
			if rerr != unix.EINTR {
				return
			}
		}
	})
	switch {
	case cerr != nil:
		return 0, nil, false, cerr
	case rerr == unix.EAGAIN:
		return 0, nil, false, nil // woken for nothing (a hang-up event that is not one yet)
	case rerr != nil:
		return 0, nil, false, rerr
	case n == 0:
		return 0, nil, true, nil
	}
	written := 0
	var werr error
	cerr = d.rawDst.Control(func(fd uintptr) {
		for written < n {
			m, err := unix.Write(int(fd), buf[written:n])
			if m > 0 {
				written += m
			}
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				if err != unix.EAGAIN {
					werr = err
				}
				return
			}
		}
	})
	if cerr == nil {
		cerr = werr
	}
	if cerr != nil {
		return n, nil, false, cerr
	}
	if written < n {
		left = bytes.Clone(buf[written:n])
	}
	return n, left, false, nil
}

// move copies while bytes come, then parks again after parkGrace without
// one, or ends the direction at EOF or an error. It re-arms under d.mu, so an
// event or the owner's wait sees the direction parked only once it is.
func (d *parkedDir) move(left []byte) {
	if len(left) > 0 {
		if _, err := d.dst.Write(left); err != nil {
			d.end(err)
			return
		}
	}
	n, idle, err := spliceBusy(d.dst, d.src, d.p.grace)
	d.mu.Lock()
	d.total += n
	if idle && !d.noPark {
		d.state = dirParked
		if d.p.arm(d) == nil {
			d.mu.Unlock()
			return
		}
		d.state = dirRunning // closed under us, or the poller is gone: finish here
	}
	d.mu.Unlock()
	if idle {
		m, e := spliceIdle(d.dst, d.src)
		d.mu.Lock()
		d.total += m
		d.mu.Unlock()
		err = e
	}
	d.end(err)
}

// end records the direction's end and wakes its owner.
func (d *parkedDir) end(err error) {
	d.mu.Lock()
	d.state = dirEnded
	d.err = err
	d.mu.Unlock()
	if d.onClose != nil {
		d.onClose()
	}
	close(d.done)
}

// wait is the owner's: it waits until the direction ended, running it
// itself (no poller, no goroutine) when it is parked, and returns the bytes
// it moved.
func (d *parkedDir) wait() (int64, error) {
	d.mu.Lock()
	switch d.state {
	case dirParked:
		d.state = dirRunning
		d.mu.Unlock()
		d.p.disarm(d)
		n, err := spliceIdle(d.dst, d.src)
		d.mu.Lock()
		d.total += n
		d.mu.Unlock()
		d.end(err)
	case dirRunning:
		d.noPark = true
		d.mu.Unlock()
	default:
		d.mu.Unlock()
	}
	<-d.done
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.total, d.err
}

// spliceBusy is spliceIdle until src has been quiet for grace: idle reports
// that (nothing was lost: src simply had no byte); otherwise src reached EOF
// (err nil) or failed.
func spliceBusy(dst, src *net.TCPConn, grace time.Duration) (total int64, idle bool, err error) {
	for {
		n, err := awaitReadable(src, time.Now().Add(grace))
		if err != nil {
			if isTimeout(err) {
				return total, true, nil
			}
			return total, false, err
		}
		if n == 0 {
			return total, false, nil
		}
		m, err := dst.ReadFrom(&io.LimitedReader{R: src, N: int64(n)})
		total += m
		if err != nil {
			return total, false, err
		}
		if m < int64(n) {
			return total, false, nil
		}
	}
}
