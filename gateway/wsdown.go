package gateway

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/http"

	"github.com/airlock-dev/airlock/inspect"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/wsframe"
)

// Bounds and names of what a websocket's server sends.
const (
	// wsDownFrame bounds the payload of a frame held whole to be decided
	// (and, stripped, rewritten); a longer one goes on in pieces of it,
	// each decided first, and a strip of it cuts the websocket.
	wsDownFrame = 1 << 20
	// whereWSDown is the Where of what a server's message carries.
	whereWSDown = "ws.server_message"
	// wsClosePolicy is the close code a block sends the client (RFC 6455
	// 7.4.1: policy violation).
	wsClosePolicy = 1008
)

// wsDown reads what the upstream sends on a websocket (RFC 6455: server
// frames) and hands on to the client only what was decided: each frame
// whole once its payload was scanned (up to wsDownFrame bytes; past that in
// pieces), a text message's text reassembled across continuation frames
// (the end of its previous frame scanned again with the next) and scanned
// as a response is (ScanResponse). Findings go to policy as a response's
// do: flagged by default; a strip rewrites the frame without the injected
// text (its length fixed); a deny ends the websocket with a close frame
// (1008) naming the reason and the decision id, and nothing of that frame
// or after it reaches the client. Control frames and binary messages pass
// as they are. A compressed frame is refused (the gateway strips the
// extension offer, so none is negotiated): closed with a close frame too.
// Used by the one goroutine that relays the server's bytes.
type wsDown struct {
	g    *Gateway
	rc   *reqCtx
	late *lateFindings
	r    io.Reader

	buf     []byte
	hdr     []byte // the frame header being read, then the current frame's
	need    int    // its length, once known
	fin     bool
	rsv1    bool
	opcode  byte
	mask    [4]byte
	masked  bool
	left    uint64           // payload bytes of the current frame still to read
	payload []byte           // the current frame's payload read, not yet decided
	sent    bool             // part of the current frame went on (a long one)
	offset  int64            // message text bytes decided so far (stripped spans)
	text    bool             // the message being received is text
	ct      string           // its content type for ScanResponse: JSON or plain text
	tail    []byte           // end of the message's last piece
	verdict *policy.Decision // the last decision about the findings so far
	denied  *policy.Decision // the decision that ended the websocket (nil: the gateway's own refusal)

	out     []byte
	err     error // what Read returns once out is empty
	blocked error // the denial that ended the websocket
}

// newWSDown returns the reader of what rc's websocket server sends, or nil
// when inspection is off.
func (g *Gateway) newWSDown(rc *reqCtx, r io.Reader) *wsDown {
	if g.cfg.Inspector == nil {
		return nil
	}
	if rc.late == nil {
		rc.late = &lateFindings{}
	}
	return &wsDown{g: g, rc: rc, late: rc.late, r: r}
}

func (d *wsDown) Read(p []byte) (int, error) {
	for len(d.out) == 0 && d.err == nil {
		if d.buf == nil {
			d.buf = make([]byte, respReadBuffer)
		}
		n, err := d.r.Read(d.buf)
		d.feed(d.buf[:n])
		if err != nil && d.err == nil {
			d.err = err
		}
	}
	if len(d.out) > 0 {
		n := copy(p, d.out)
		d.out = d.out[n:]
		return n, nil
	}
	return 0, d.err
}

// feed parses b into frames and decides each.
func (d *wsDown) feed(b []byte) {
	for len(b) > 0 && d.err == nil {
		if d.left == 0 && (d.need == 0 || len(d.hdr) < d.need) {
			if d.need == 0 && len(d.hdr) == 0 {
				d.payload, d.sent = d.payload[:0], false
			}
			d.hdr = append(d.hdr, b[0])
			b = b[1:]
			if d.need == 0 {
				d.need, _ = wsframe.HeaderLen(d.hdr)
			}
			if d.need > 0 && len(d.hdr) == d.need {
				d.startFrame()
				if d.left == 0 {
					d.frame(true)
				}
			}
			continue
		}
		n := int(min(uint64(len(b)), d.left, uint64(wsDownFrame-len(d.payload))))
		pos := d.frameLen() - d.left
		for i, c := range b[:n] {
			if d.masked {
				c ^= d.mask[(pos+uint64(i))&3]
			}
			d.payload = append(d.payload, c)
		}
		b = b[n:]
		d.left -= uint64(n)
		switch {
		case d.left == 0:
			d.frame(true)
		case len(d.payload) == wsDownFrame:
			d.frame(false)
		}
	}
}

func (d *wsDown) frameLen() uint64 {
	h := d.hdr
	switch l := uint64(h[1] & 0x7f); l {
	case 126:
		return uint64(binary.BigEndian.Uint16(h[2:4]))
	case 127:
		return binary.BigEndian.Uint64(h[2:10])
	default:
		return l
	}
}

func (d *wsDown) startFrame() {
	h := d.hdr
	d.fin, d.rsv1, d.opcode, d.masked = h[0]&0x80 != 0, h[0]&0x40 != 0, h[0]&0x0f, h[1]&0x80 != 0
	if d.masked {
		copy(d.mask[:], h[len(h)-4:])
	}
	d.left = d.frameLen()
}

// frame decides the current frame's payload read so far (whole: the
// frame ended) and hands it on.
func (d *wsDown) frame(whole bool) {
	hdr := d.hdr
	defer func() {
		if whole {
			d.hdr, d.need = d.hdr[:0], 0
		}
	}()
	if d.rsv1 {
		d.block(deny(ReasonWSCompressed, "a compressed websocket frame from the server, but no extension was negotiated"), nil)
		return
	}
	control := d.opcode >= 8
	switch {
	case control:
	case d.opcode == 1:
		d.text, d.tail, d.offset = true, d.tail[:0], 0
		d.ct = "text/plain"
		if len(d.payload) > 0 && (d.payload[0] == '{' || d.payload[0] == '[') {
			d.ct = "application/json" // MCP and agent messages over websocket
		}
	case d.opcode == 2:
		d.text = false
	}
	out := d.payload
	if !control && d.text {
		var ok bool
		if out, ok = d.decide(d.payload, whole); !ok {
			return
		}
	}
	if !d.sent {
		if len(out) != len(d.payload) || d.masked {
			hdr = wsFrameHeader(d.fin, d.rsv1, d.opcode, len(out)) // rewritten: its length, unmasked
		}
		d.out = append(d.out, hdr...)
	}
	d.out = append(d.out, out...)
	d.sent = !whole
	d.payload = d.payload[:0]
	if control && d.opcode == 8 {
		d.err = io.EOF // the server closed: nothing follows
	}
}

// decide scans a piece of a text message and returns what of it goes on
// (ok), or ends the websocket when policy denies it.
func (d *wsDown) decide(piece []byte, whole bool) ([]byte, bool) {
	data := piece
	if len(d.tail) > 0 {
		data = append(d.tail, piece...)
	}
	ct := d.ct
	fs := d.g.cfg.Inspector.ScanResponse(ct, data)
	d.tail = append(d.tail[:0], data[max(0, len(data)-respScanTail):]...)
	if d.fin && whole {
		d.tail = d.tail[:0] // the message ended
	}
	for i := range fs {
		if fs[i].Where == inspect.WhereResponse {
			fs[i].Where = whereWSDown
		}
	}
	base := d.offset
	d.offset += int64(len(piece))
	if len(fs) == 0 {
		return piece, true
	}
	if d.late.add(fs) || d.verdict == nil {
		v, err := d.g.askLate(d.rc, d.late, true, "in a websocket message from the server")
		d.verdict = &v
		if err != nil {
			d.block(err, &v)
			return nil, false
		}
	}
	if !strips(*d.verdict) {
		return piece, true
	}
	out, spans := inspect.StripResponse(ct, piece)
	if len(spans) == 0 {
		return piece, true
	}
	if d.sent || !whole {
		d.block(&denial{reason: ReasonStripFixedLength, status: http.StatusForbidden,
			msg: fmt.Sprintf("the policy strips this websocket message, but its frame is longer than %d bytes and part of it left: closed instead", wsDownFrame)}, nil)
		return nil, false
	}
	d.late.strip(spans, base)
	return out, true
}

// block ends the websocket: a close frame naming the reason and the
// decision id goes to the client (unless a frame is part way out), then
// nothing. The caller closes both connections (denial).
func (d *wsDown) block(err error, v *policy.Decision) {
	d.blocked, d.denied = err, v
	if !d.sent {
		_, reason := refusalOf(err)
		msg := "airlock: " + reason + " (decision " + d.rc.id + ")"
		if len(msg) > 123 { // a control frame's payload is at most 125 bytes
			msg = msg[:123]
		}
		payload := binary.BigEndian.AppendUint16(nil, wsClosePolicy)
		payload = append(payload, msg...)
		d.out = append(d.out, wsFrameHeader(true, false, 8, len(payload))...)
		d.out = append(d.out, payload...)
	}
	d.err = io.EOF
}

// denial is the decision that denied (nil: the gateway's own refusal) and
// the denial that ended the websocket (nil: none did).
func (d *wsDown) denial() (*policy.Decision, error) {
	if d == nil || d.blocked == nil {
		return nil, nil
	}
	return d.denied, d.blocked
}

// wsFrameHeader is an unmasked frame header (a server's).
func wsFrameHeader(fin, rsv1 bool, op byte, n int) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	if rsv1 {
		b0 |= 0x40
	}
	switch {
	case n < 126:
		return []byte{b0, byte(n)}
	case n < 1<<16:
		return []byte{b0, 126, byte(n >> 8), byte(n)}
	}
	return binary.BigEndian.AppendUint64([]byte{b0, 127}, uint64(n))
}
