package gateway

import (
	"errors"
	"net"
	"net/http"
	"sync"

	"github.com/airlock-dev/airlock/inspect"
	"github.com/airlock-dev/airlock/policy"
)

// Reason ids of websocket inspection.
const (
	// ReasonWSCompressed: a compressed frame (RSV1) on a websocket whose
	// upgrade negotiated no extension; content inspection cannot read it.
	ReasonWSCompressed = "websocket_compressed_refused"
)

// lateFindings are the findings of what a request carried after its first
// decision (a streamed body, websocket messages) and the deny they led to.
// The relay goroutines write them; finish reads them: behind mu.
type lateFindings struct {
	mu  sync.Mutex
	fs  []inspect.Finding
	dec *policy.Decision
}

func (l *lateFindings) add(fs []inspect.Finding) (grew bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range fs {
		if !containsFinding(l.fs, f) {
			l.fs = append(l.fs, f)
			grew = true
		}
	}
	return grew
}

func (l *lateFindings) found() []inspect.Finding {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fs
}

func (l *lateFindings) denied(d policy.Decision) {
	l.mu.Lock()
	l.dec = &d
	l.mu.Unlock()
}

func (l *lateFindings) lateDecision() *policy.Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dec
}

// reaskLate asks policy about rc with its findings so far (on a copy of its
// input: this runs on a relay goroutine) and returns the denial, if any,
// recording the deciding decision in late.
func (g *Gateway) reaskLate(rc *reqCtx, late *lateFindings, partial bool, where string) error {
	in := rc.in
	contentInput(&in, rc, partial)
	ctx := newDecisionCtx(g.cfg.PolicyTimeout)
	d := g.dec.Decide(ctx, &in)
	ctx.stop()
	err := denialOf(d)
	if err == nil {
		return nil
	}
	var dn *denial
	if errors.As(err, &dn) {
		dn.msg = where + ": " + dn.msg
	}
	late.denied(d)
	return err
}

// wsScan inspects what the sandbox sends on a websocket, frame by frame
// (RFC 6455: client frames are masked): each message's payload, reassembled
// across continuation frames (control frames between them skipped), goes
// through one stream scanner, so a secret split across frames is found.
// Every chunk is scanned before it is forwarded; a chunk that adds a finding
// makes policy decide again, and a deny closes the websocket before that
// chunk leaves. A compressed frame is refused: the gateway strips the
// extension offer from the upgrade request when inspection is on, so none is
// ever negotiated. Used by one goroutine; the findings are shared (late).
type wsScan struct {
	g    *Gateway
	rc   *reqCtx
	late *lateFindings

	hdr     []byte
	left    uint64
	mask    [4]byte
	masked  bool
	maskPos int
	opcode  byte
	fin     bool
	msg     StreamScanner // the data message being received
	buf     []byte
	err     error
}

// newWSScan returns rc's websocket scanner, or nil when inspection is off.
func (g *Gateway) newWSScan(rc *reqCtx) *wsScan {
	if g.cfg.Inspector == nil {
		return nil
	}
	if rc.late == nil {
		rc.late = &lateFindings{}
	}
	return &wsScan{g: g, rc: rc, late: rc.late}
}

// check scans p, the next bytes the client sent, before they are forwarded.
func (w *wsScan) check(p []byte) error {
	if w.err != nil || len(p) == 0 {
		return w.err
	}
	out := w.buf[:0]
	for len(p) > 0 {
		if w.left == 0 {
			w.hdr = append(w.hdr, p[0])
			p = p[1:]
			need, ok := wsHeaderLen(w.hdr)
			if !ok || len(w.hdr) < need {
				continue
			}
			if err := w.start(); err != nil {
				w.err = err
				return err
			}
			out = w.flushFrame(out)
			continue
		}
		n := min(uint64(len(p)), w.left)
		if w.opcode < 8 { // data or continuation: part of the message
			for _, c := range p[:n] {
				if w.masked {
					c ^= w.mask[w.maskPos&3]
				}
				w.maskPos++
				out = append(out, c)
			}
		}
		p = p[n:]
		w.left -= n
		out = w.flushFrame(out)
	}
	w.buf = out[:0]
	return w.err
}

// flushFrame writes the payload gathered to the message's scanner and, at
// the end of a final frame, closes the message; it asks policy when the
// scanner found something new.
func (w *wsScan) flushFrame(out []byte) []byte {
	if w.msg != nil && len(out) > 0 {
		w.msg.Write(out)
	}
	out = out[:0]
	if w.msg == nil {
		return out
	}
	end := w.left == 0 && w.fin && w.opcode < 8
	if end {
		w.msg.Close()
	}
	if w.late.add(w.msg.Findings()) && w.err == nil {
		w.err = w.g.reaskLate(w.rc, w.late, !end, "in a websocket message")
	}
	if end {
		w.msg = nil
	}
	return out
}

// start reads a gathered frame header.
func (w *wsScan) start() error {
	h := w.hdr
	w.hdr = w.hdr[:0]
	op := h[0] & 0x0f
	w.fin = h[0]&0x80 != 0
	if h[0]&0x40 != 0 {
		return deny(ReasonWSCompressed, "a compressed websocket frame, but no extension was negotiated")
	}
	w.masked = h[1]&0x80 != 0
	l := uint64(h[1] & 0x7f)
	i := 2
	switch l {
	case 126:
		l = uint64(h[2])<<8 | uint64(h[3])
		i = 4
	case 127:
		l = 0
		for _, c := range h[2:10] {
			l = l<<8 | uint64(c)
		}
		i = 10
	}
	if w.masked {
		copy(w.mask[:], h[i:i+4])
	}
	w.maskPos, w.left = 0, l
	switch {
	case op >= 8: // control: not part of the message
		w.opcode = op
	case op == 0: // continuation
		w.opcode = 0
		if w.msg == nil {
			w.msg = w.g.cfg.Inspector.NewStream("ws.message")
		}
	default: // a new text or binary message
		w.opcode = op
		if w.msg != nil {
			w.msg.Close()
			w.late.add(w.msg.Findings())
		}
		w.msg = w.g.cfg.Inspector.NewStream("ws.message")
	}
	return nil
}

// wsHeaderLen returns the length of the frame header in h once its first two
// bytes are known.
func wsHeaderLen(h []byte) (int, bool) {
	if len(h) < 2 {
		return 0, false
	}
	n := 2
	switch h[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if h[1]&0x80 != 0 {
		n += 4
	}
	return n, true
}

// wsScanConn is the client side of a websocket read through a wsScan.
type wsScanConn struct {
	net.Conn
	w *wsScan
}

func (c wsScanConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		if serr := c.w.check(p[:n]); serr != nil {
			return 0, serr
		}
	}
	return n, err
}

// stripWSExtensions removes the extension offer of a websocket upgrade when
// inspection is on: a compressed frame could not be read.
func (g *Gateway) stripWSExtensions(h http.Header) {
	if g.cfg.Inspector != nil {
		h.Del("Sec-Websocket-Extensions")
	}
}

// wsDenied ends a websocket whose scan led policy to deny: both connections
// closed, the denial and the deciding decision the request's. It reports
// whether that happened.
func wsDenied(rc *reqCtx, w *wsScan, conns ...net.Conn) bool {
	if w == nil || w.err == nil {
		return false
	}
	for _, c := range conns {
		c.Close()
	}
	rc.err = w.err
	if d := w.late.lateDecision(); d != nil {
		rc.dec, rc.decided = *d, true
	}
	return true
}
