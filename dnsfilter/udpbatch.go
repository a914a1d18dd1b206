package dnsfilter

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"unsafe"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/oplog"
)

// Batched UDP: a worker takes up to udpBatchSize datagrams with one
// recvmmsg and sends the replies it could give at once (cached answers,
// refusals) with one sendmmsg, into buffers it keeps (no allocation per
// datagram for the reads and writes). A query that would wait for an upstream
// is not allowed to hold the batch's other replies back: it stops before the
// lookup (pendingQuery), the batch's replies go out, and then each pending
// query finishes on a goroutine of its own while udpMaxWorkers allows (else
// on this worker). So a batch worker never waits for an upstream while
// there is room, and the batch path starts no spare readers: a spare that
// lived for one batch cost its goroutine's start and stack growth, about 4%
// of the filter's CPU under load.
//
// A datagram longer than udpSlotSize is cut by the kernel; it is answered
// FORMERR (audited as malformed). Real queries are far smaller: one question
// and at most one OPT record (dnsmasq serves about 5 KiB at most).

const (
	udpBatchSize = 8
	udpSlotSize  = 4096
)

// mmsghdr is struct mmsghdr: a msghdr and the byte count the kernel sets.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// udpBatch is the buffers of one batch: a worker holds one while datagrams
// keep coming and gives it back to batchPool when the socket runs dry, so
// the workers of an idle sandbox hold none.
type udpBatch struct {
	in   [udpBatchSize]mmsghdr
	iov  [udpBatchSize]unix.Iovec
	addr [udpBatchSize]unix.RawSockaddrAny
	buf  [udpBatchSize][]byte

	out    [udpBatchSize]mmsghdr
	outIov [udpBatchSize]unix.Iovec
	reply  [udpBatchSize][]byte // the reply to datagram i, when queued
	nOut   int

	w [udpBatchSize]batchWriter
}

// batchPool holds the batches no worker holds.
var batchPool = sync.Pool{New: func() any { return newUDPBatch() }}

func newUDPBatch() *udpBatch {
	b := &udpBatch{}
	for i := range b.buf {
		b.buf[i] = make([]byte, udpSlotSize)
		b.reply[i] = make([]byte, 0, 512)
	}
	return b
}

// takeBatch takes a batch from the pool for u's socket.
func (u *udpServer) takeBatch() *udpBatch {
	b := batchPool.Get().(*udpBatch)
	for i := range b.w {
		b.w[i] = batchWriter{u: u, b: b, i: i}
	}
	return b
}

func putBatch(b *udpBatch) {
	for i := range b.w {
		b.w[i] = batchWriter{}
	}
	b.nOut = 0
	batchPool.Put(b)
}

// recvBatch waits for datagrams and returns a batch holding them (at least
// one) and how many. b is the batch the worker held from its last datagrams,
// or nil: when the socket has nothing, b goes back to the pool and the wait
// holds no buffer (a zero-length MSG_PEEK tells when a datagram is there).
func (u *udpServer) recvBatch(rc syscall.RawConn, b *udpBatch) (*udpBatch, int, error) {
	var n int
	var errno syscall.Errno
	err := rc.Read(func(fd uintptr) bool {
		if b == nil {
			_, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, fd, 0, 0, unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
			if e == unix.EAGAIN {
				return false
			}
			b = u.takeBatch()
		}
		r, e := b.recvmmsg(fd)
		if e == unix.EAGAIN {
			putBatch(b)
			b = nil
			return false
		}
		n, errno = r, e
		return true
	})
	if err == nil && errno != 0 {
		err = errno
	}
	if err != nil {
		if b != nil {
			putBatch(b)
		}
		return nil, 0, err
	}
	return b, n, nil
}

// recvmmsg takes the datagrams waiting on fd, without waiting.
func (b *udpBatch) recvmmsg(fd uintptr) (int, syscall.Errno) {
	for i := range b.in {
		b.iov[i].Base = &b.buf[i][0]
		b.iov[i].SetLen(udpSlotSize)
		h := &b.in[i].hdr
		h.Name = (*byte)(unsafe.Pointer(&b.addr[i]))
		h.Namelen = unix.SizeofSockaddrAny
		h.Iov = &b.iov[i]
		h.SetIovlen(1)
		h.Flags = 0
		b.in[i].n = 0
	}
	r, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.in[0])), udpBatchSize, unix.MSG_DONTWAIT, 0, 0)
	return int(r), e
}

// datagram returns datagram i of the last recv and whether the kernel cut it.
func (b *udpBatch) datagram(i int) ([]byte, bool) {
	return b.buf[i][:b.in[i].n], b.in[i].hdr.Flags&unix.MSG_TRUNC != 0
}

// source returns the sender of datagram i.
func (b *udpBatch) source(i int) netip.AddrPort {
	a := &b.addr[i]
	switch a.Addr.Family {
	case unix.AF_INET:
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(a))
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(p[0])<<8|uint16(p[1]))
	case unix.AF_INET6:
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(a))
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(p[0])<<8|uint16(p[1]))
	}
	return netip.AddrPort{}
}

// queue keeps p as the reply to datagram i, sent by flush.
func (b *udpBatch) queue(i int, p []byte) {
	b.reply[i] = append(b.reply[i][:0], p...)
	r := b.reply[i]
	b.outIov[b.nOut].Base = &r[0]
	b.outIov[b.nOut].SetLen(len(r))
	h := &b.out[b.nOut].hdr
	h.Name = (*byte)(unsafe.Pointer(&b.addr[i]))
	h.Namelen = b.in[i].hdr.Namelen
	h.Iov = &b.outIov[b.nOut]
	h.SetIovlen(1)
	h.Flags = 0
	b.nOut++
}

// flush sends the queued replies on rc.
func (b *udpBatch) flush(rc syscall.RawConn) error {
	sent := 0
	var errno syscall.Errno
	err := rc.Write(func(fd uintptr) bool {
		for sent < b.nOut {
			r, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&b.out[sent])), uintptr(b.nOut-sent), unix.MSG_DONTWAIT, 0, 0)
			if e == unix.EAGAIN {
				return false
			}
			if e != 0 {
				// A reply the kernel refuses (an unreachable source) is
				// skipped, as a failed sendto would be.
				errno = e
				sent++
				continue
			}
			sent += int(r)
		}
		return true
	})
	b.nOut = 0
	if err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}

// batchWriter is the dns.ResponseWriter of datagram i of a batch: a reply
// that fits is queued for the batch's sendmmsg, a larger one is sent at once.
type batchWriter struct {
	u *udpServer
	b *udpBatch
	i int
}

var _ dns.ResponseWriter = (*batchWriter)(nil)

func (w *batchWriter) LocalAddr() net.Addr  { return w.u.pc.LocalAddr() }
func (w *batchWriter) RemoteAddr() net.Addr { return net.UDPAddrFromAddrPort(w.b.source(w.i)) }

// WriteMsg packs m and writes it.
func (w *batchWriter) WriteMsg(m *dns.Msg) error {
	p, err := m.Pack()
	if err != nil {
		return err
	}
	_, err = w.Write(p)
	return err
}

func (w *batchWriter) Write(p []byte) (int, error) {
	if len(p) == 0 || len(p) > udpSlotSize {
		return w.u.uc.WriteToUDPAddrPort(p, w.b.source(w.i))
	}
	w.b.queue(w.i, p)
	return len(p), nil
}

func (w *batchWriter) Close() error        { return nil }
func (w *batchWriter) TsigStatus() error   { return nil }
func (w *batchWriter) TsigTimersOnly(bool) {}
func (w *batchWriter) Hijack()             {}

// workBatch is work on the batch path: the worker reads until the socket
// closes (a spare, which only the other path starts, after one batch).
func (u *udpServer) workBatch(rc syscall.RawConn, spare bool) {
	var b *udpBatch
	defer func() {
		if b != nil {
			putBatch(b)
		}
	}()
	for {
		u.idle.Add(1)
		var n int
		var err error
		b, n, err = u.recvBatch(rc, b)
		u.idle.Add(-1)
		if err != nil {
			if u.closing.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			u.s.f.log.Error("dns udp read failed, worker stopped", oplog.SandboxKey, u.s.sb.ID, oplog.ErrorKey, err)
			return
		}
		u.serveBatch(rc, b, n)
		if spare {
			return
		}
	}
}

// serveBatch answers the n datagrams of the last recv: the replies that need
// no upstream in one sendmmsg, then the queries that wait for one.
func (u *udpServer) serveBatch(rc syscall.RawConn, b *udpBatch, n int) {
	var pending [udpBatchSize]*pendingQuery
	var src [udpBatchSize]netip.AddrPort
	np := 0
	for i := range n {
		m, cut := b.datagram(i)
		if p := u.serveNoWait(&b.w[i], m, cut, true); p != nil {
			pending[np], src[np] = p, b.source(i)
			np++
		}
	}
	if b.nOut > 0 {
		if err := b.flush(rc); err != nil && !errors.Is(err, net.ErrClosed) {
			u.s.f.log.Warn("write reply", oplog.SandboxKey, u.s.sb.ID, oplog.ErrorKey, err)
		}
	}
	for j := range np {
		w, p := &udpWriter{pc: u.pc, uc: u.uc, ap: src[j]}, pending[j]
		if !u.spawn(func() { u.s.finish(w, p) }) {
			u.s.finish(w, p)
		}
	}
}

// spawn runs f on a new worker goroutine if udpMaxWorkers allows one.
func (u *udpServer) spawn(f func()) bool {
	if u.closing.Load() {
		return false
	}
	if u.workers.Add(1) > udpMaxWorkers {
		u.workers.Add(-1)
		return false
	}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		defer u.workers.Add(-1)
		f()
	}()
	return true
}
