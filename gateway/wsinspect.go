package gateway

import (
	"errors"
	"net"
	"net/http"
	"sync"

	"github.com/airlock-dev/airlock/inspect"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/wsframe"
)

// Reason ids of websocket inspection.
const (
	// ReasonWSCompressed: a compressed frame (RSV1) on a websocket whose
	// upgrade negotiated no extension; content inspection cannot read it.
	ReasonWSCompressed = "websocket_compressed_refused"
)

// lateFindings are the findings of what a request carried after its first
// decision (a streamed body, websocket messages, the response), the deny
// they led to, and what was stripped from the response. The relay
// goroutines write them; finish reads them: behind mu.
type lateFindings struct {
	mu       sync.Mutex
	fs       []inspect.Finding
	dec      *policy.Decision
	stripped []inspect.Stripped // offsets in the whole response body
	cut      error              // the denial that cut a response short
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
	_, err := g.askLate(rc, late, partial, where)
	return err
}

// askLate is reaskLate that returns the decision too (a response's: it may
// strip).
func (g *Gateway) askLate(rc *reqCtx, late *lateFindings, partial bool, where string) (policy.Decision, error) {
	in := rc.in
	contentInput(&in, rc, partial)
	ctx := newDecisionCtx(g.cfg.PolicyTimeout)
	d := g.dec.Decide(ctx, &in)
	ctx.stop()
	err := denialOf(d)
	if err == nil {
		return d, nil
	}
	var dn *denial
	if errors.As(err, &dn) {
		dn.msg = where + ": " + dn.msg
	}
	late.denied(d)
	return d, err
}

// maxStripped bounds the stripped spans a record lists (the rest are
// counted in the last one's length).
const maxStripped = 64

// strip records spans stripped from the response piece at offset base.
func (l *lateFindings) strip(spans []inspect.Stripped, base int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range spans {
		s.Offset += int(base)
		if len(l.stripped) == maxStripped {
			l.stripped[maxStripped-1].Length += s.Length
			continue
		}
		l.stripped = append(l.stripped, s)
	}
}

func (l *lateFindings) strippedSpans() []inspect.Stripped {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stripped
}

// cutBy records the denial that cut the response short.
func (l *lateFindings) cutBy(err error) {
	l.mu.Lock()
	l.cut = err
	l.mu.Unlock()
}

func (l *lateFindings) cutErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cut
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

	fr     wsframe.Reader
	opcode byte
	fin    bool
	msg    StreamScanner // the data message being received
	err    error
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
	if err := w.fr.Feed(p, w.start, w.payload); err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}

// payload writes a piece of a data frame to the message's scanner.
func (w *wsScan) payload(h *wsframe.Header, b []byte) {
	if w.msg != nil && !h.Control() {
		w.msg.Write(b)
	}
	w.flushFrame()
}

// flushFrame closes the message at the end of its final frame and asks
// policy when the scanner found something new.
func (w *wsScan) flushFrame() {
	if w.msg == nil {
		return
	}
	end := w.fr.Left() == 0 && w.fin && w.opcode < 8
	if end {
		w.msg.Close()
	}
	if w.late.add(w.msg.Findings()) && w.err == nil {
		w.err = w.g.reaskLate(w.rc, w.late, !end, "in a websocket message")
	}
	if end {
		w.msg = nil
	}
}

// start begins a frame: a control frame is not part of the message, a
// continuation goes on with it, a new data frame starts the next one.
func (w *wsScan) start(h *wsframe.Header) error {
	if h.RSV1 {
		return deny(ReasonWSCompressed, "a compressed websocket frame, but no extension was negotiated")
	}
	w.fin = h.Fin
	switch op := h.Opcode; {
	case h.Control():
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
	w.flushFrame()
	return nil
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
