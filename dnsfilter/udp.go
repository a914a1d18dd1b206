package dnsfilter

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/oplog"
)

// UDP serving. miekg/dns's Server starts a goroutine per datagram (whose stack
// then grows while the message is unpacked); here a sandbox's UDP socket is
// served by a small set of long-lived workers: on a *net.UDPConn each takes a
// batch of datagrams per recvmmsg and sends their replies per sendmmsg
// (udpbatch.go; the batch buffers are pooled, so an idle worker holds none),
// else each has its own 64 KiB read buffer and reply writer. A datagram goes through the same steps miekg/dns
// takes: header, accept (the header checks), full unpack (FORMERR on failure),
// then ServeDNS; a plain query (request.go's parseRequest) is read from its
// wire form instead of unpacked. TCP stays on miekg/dns.
//
// The base workers never exit before the socket closes. A query waiting on a
// slow upstream never stops the sandbox's other queries: on the batch path it
// finishes on a goroutine of its own (udpbatch.go); on the other, a worker
// that takes a datagram while no other worker is reading starts a spare one,
// which exits after a datagram when another worker is reading. Either way at
// most udpMaxWorkers per sandbox.

const (
	udpBufSize       = 64 << 10 // the largest UDP datagram
	udpMinWorkers    = 4
	udpMaxBaseWorker = 16
	udpMaxWorkers    = 256 // base workers plus spares and pending queries' goroutines, per sandbox
)

// udpWorkers is the number of base workers: 2*GOMAXPROCS, within
// [udpMinWorkers, udpMaxBaseWorker].
func udpWorkers() int {
	return min(max(2*runtime.GOMAXPROCS(0), udpMinWorkers), udpMaxBaseWorker)
}

// udpServer serves one sandbox's UDP socket.
type udpServer struct {
	s    *sandboxServer
	pc   net.PacketConn
	uc   *net.UDPConn // pc when it is a *net.UDPConn: reads and writes without allocating addresses
	base int

	workers atomic.Int32 // running workers, base and spare
	idle    atomic.Int32 // workers blocked in a read
	closing atomic.Bool
	wg      sync.WaitGroup
	done    chan struct{} // closed once every worker has returned
}

// spareBufs holds spare workers' read buffers between spares.
var spareBufs = sync.Pool{New: func() any { b := make([]byte, udpBufSize); return &b }}

// startUDP starts pc's workers. The server owns pc from here on.
func (s *sandboxServer) startUDP(pc net.PacketConn) *udpServer {
	u := &udpServer{s: s, pc: pc, base: udpWorkers(), done: make(chan struct{})}
	u.uc, _ = pc.(*net.UDPConn)
	u.workers.Store(int32(u.base))
	u.wg.Add(u.base)
	for range u.base {
		go u.work(false)
	}
	go func() {
		u.wg.Wait()
		close(u.done)
	}()
	return u
}

// stop closes the socket and waits until every worker has returned or ctx ends.
func (u *udpServer) stop(ctx context.Context) error {
	u.closing.Store(true)
	u.pc.Close()
	select {
	case <-u.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("udp workers still running: %w", ctx.Err())
	}
}

// work reads and answers datagrams until the socket closes (or, for a spare,
// until another worker is reading).
func (u *udpServer) work(spare bool) {
	defer u.wg.Done()
	defer u.workers.Add(-1)
	if u.uc != nil {
		if rc, err := u.uc.SyscallConn(); err == nil {
			u.workBatch(rc, spare)
			return
		}
	}
	var bp *[]byte
	if spare {
		bp = spareBufs.Get().(*[]byte)
		defer spareBufs.Put(bp)
	} else {
		b := make([]byte, udpBufSize)
		bp = &b
	}
	buf := *bp
	w := &udpWriter{pc: u.pc, uc: u.uc}
	for {
		u.idle.Add(1)
		n, err := w.read(buf)
		if u.idle.Add(-1) == 0 && err == nil {
			u.grow()
		}
		if err != nil {
			if u.closing.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			u.s.f.log.Error("dns udp read failed, worker stopped", oplog.SandboxKey, u.s.sb.ID, oplog.ErrorKey, err)
			return
		}
		u.serve(w, buf[:n])
		if spare && u.idle.Load() > 0 {
			return
		}
	}
}

// grow starts a spare worker unless udpMaxWorkers already run. The caller is
// a running worker, so the wait group cannot be at zero.
func (u *udpServer) grow() {
	if u.closing.Load() {
		return
	}
	if u.workers.Add(1) > udpMaxWorkers {
		u.workers.Add(-1)
		return
	}
	u.wg.Add(1)
	go u.work(true)
}

// serve answers one datagram as miekg/dns's server does: too short or an
// unreadable header is dropped (audited by invalid), accept's verdict decides
// between answering, FORMERR, NOTIMP and dropping, and a message that does not
// unpack gets FORMERR.
func (u *udpServer) serve(w dns.ResponseWriter, m []byte) {
	u.serveMsg(w, m, false)
}

// errQueryTooLarge: a datagram the batch path cut at udpSlotSize.
var errQueryTooLarge = fmt.Errorf("query larger than %d bytes", udpSlotSize)

// serveMsg is serve; with noWait a query whose answer is not cached is
// returned (pending, nothing written or audited yet) instead of waiting for
// an upstream; with truncated (m was cut at the batch slot's size) the query
// is answered FORMERR.
func (u *udpServer) serveMsg(w dns.ResponseWriter, m []byte, truncated bool) {
	u.serveNoWait(w, m, truncated, false)
}

func (u *udpServer) serveNoWait(w dns.ResponseWriter, m []byte, truncated, noWait bool) *pendingQuery {
	s := u.s
	if len(m) < 12 {
		s.invalid(m, dns.ErrShortRead)
		return nil
	}
	dh := dns.Header{
		Id:      binary.BigEndian.Uint16(m[0:]),
		Bits:    binary.BigEndian.Uint16(m[2:]),
		Qdcount: binary.BigEndian.Uint16(m[4:]),
		Ancount: binary.BigEndian.Uint16(m[6:]),
		Nscount: binary.BigEndian.Uint16(m[8:]),
		Arcount: binary.BigEndian.Uint16(m[10:]),
	}
	action := s.accept(dh)
	if action == dns.MsgAccept && !truncated {
		if r, ok := parseRequest(m, s.names); ok {
			return s.serveDNS(w, &r, noWait)
		}
	}
	req := new(dns.Msg)
	switch {
	case action == dns.MsgAccept && truncated:
		_ = req.Unpack(m[:12])
		s.invalid(m, errQueryTooLarge)
	case action == dns.MsgAccept:
		err := req.Unpack(m)
		if err == nil {
			r := requestOf(req)
			return s.serveDNS(w, &r, noWait)
		}
		s.invalid(m, err)
	case action == dns.MsgReject, action == dns.MsgRejectNotImplemented:
		// Only the header: Unpack stops at the end of the message.
		_ = req.Unpack(m[:12])
	default: // dns.MsgIgnore
		return nil
	}
	opcode := req.Opcode
	req.SetRcodeFormatError(req)
	req.Zero = false
	if action == dns.MsgRejectNotImplemented {
		req.Opcode = opcode
		req.Rcode = dns.RcodeNotImplemented
	}
	req.Ns, req.Answer, req.Extra = nil, nil, nil
	if err := w.WriteMsg(req); err != nil && !errors.Is(err, net.ErrClosed) {
		s.f.log.Warn("write reply", oplog.SandboxKey, s.sb.ID, oplog.ErrorKey, err)
	}
	return nil
}

// udpWriter is a worker's dns.ResponseWriter: it sends to the source of the
// datagram the worker read last and packs into a buffer it keeps.
type udpWriter struct {
	pc   net.PacketConn
	uc   *net.UDPConn
	ap   netip.AddrPort // source, when uc is set
	addr net.Addr       // source, otherwise
	buf  []byte
}

var _ dns.ResponseWriter = (*udpWriter)(nil)

func (w *udpWriter) read(b []byte) (int, error) {
	if w.uc != nil {
		n, ap, err := w.uc.ReadFromUDPAddrPort(b)
		w.ap = ap
		return n, err
	}
	n, addr, err := w.pc.ReadFrom(b)
	w.addr = addr
	return n, err
}

// LocalAddr is the sandbox's UDP listener address.
func (w *udpWriter) LocalAddr() net.Addr { return w.pc.LocalAddr() }

// RemoteAddr is the source of the datagram being answered.
func (w *udpWriter) RemoteAddr() net.Addr {
	if w.uc != nil {
		return net.UDPAddrFromAddrPort(w.ap)
	}
	return w.addr
}

// WriteMsg packs m into the writer's buffer and sends it.
func (w *udpWriter) WriteMsg(m *dns.Msg) error {
	b, err := m.PackBuffer(w.buf[:cap(w.buf)])
	if err != nil {
		return err
	}
	if cap(b) > cap(w.buf) && cap(b) <= udpBufSize {
		w.buf = b[:0]
	}
	_, err = w.Write(b)
	return err
}

// Write sends b as one datagram.
func (w *udpWriter) Write(b []byte) (int, error) {
	if w.uc != nil {
		return w.uc.WriteToUDPAddrPort(b, w.ap)
	}
	return w.pc.WriteTo(b, w.addr)
}

// Close does nothing: the socket is the sandbox's listener.
func (w *udpWriter) Close() error { return nil }

// TsigStatus reports no TSIG: the filter serves none.
func (w *udpWriter) TsigStatus() error { return nil }

// TsigTimersOnly does nothing (no TSIG).
func (w *udpWriter) TsigTimersOnly(bool) {}

// Hijack does nothing: UDP replies are always written through the writer.
func (w *udpWriter) Hijack() {}
