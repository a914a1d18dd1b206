package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/inspect"
	"github.com/airlock-dev/airlock/policy"
)

// Reason ids of response inspection.
const (
	// ReasonStripFixedLength: the policy strips this response, but it is
	// longer than respDecideMax and framed by Content-Length, which a
	// rewrite cannot keep, or it decodes to more than respScanMax bytes: it
	// is cut or refused instead (fail closed).
	ReasonStripFixedLength = "content_strip_fixed_length"
	// ReasonResponseUndecodable: a compressed response streamed could not
	// be read as it streams (its decoder held back more than respHoldMax
	// bytes), or one being re-encoded for a strip stopped decoding: it is
	// cut (fail closed).
	ReasonResponseUndecodable = "content_response_undecodable"
)

// Where values of streamed response findings, and the record's Extra key of
// what was stripped.
const (
	whereSSEEvent  = "sse.event"
	extraStripped  = "response_stripped"
	respScanTail   = 512 // bytes of a piece scanned again with the next (a phrase across two reads)
	respReadBuffer = 32 << 10
)

// respStream is a response body decided as it is read: nothing reaches the
// agent before the piece it is in was scanned and, when the scan found
// something new, decided by policy. An SSE stream's piece is one event
// (an event longer than respScanPiece: each respScanPiece of it); any other
// body's piece is what one read of the upstream returned, scanned with the
// end of the one before. A deny cuts the body before the piece: an SSE
// stream ends there with a final error event (the client's stream closes
// cleanly, told why); any other body ends with the denial as a read error,
// so the client sees a truncated response. A strip rewrites the piece.
// Used by the one goroutine that relays the response.
type respStream struct {
	g     *Gateway
	rc    *reqCtx
	r     io.ReadCloser
	sc    Inspector
	ct    string
	sse   bool
	sized bool   // framed by Content-Length: its length cannot change
	cut   func() // abandons the upstream the body comes from

	// A compressed body (enc): its raw bytes are relayed as they came,
	// each once the text it decodes to was decided (dec.safe), an event
	// stream's as its events are, any other's once it ended or its text
	// outgrew respDecideMax; the rest is held. A strip before any raw
	// byte left re-encodes the text, the stripped pieces included, into
	// reenc, from the start; after, it cuts the body.
	enc      string
	dec      *respDecoder
	hold     []byte // raw bytes not yet handed on, from raw offset holdOff
	holdOff  int64
	released bool         // a raw byte went on: the stream can no longer be re-encoded
	plain    []byte       // the text decided so far, while nothing was released
	noPlain  bool         // plain outgrew respDecideMax and was dropped
	reenc    flushWriter  // the gateway's own encoder, once a strip asked for one
	reencBuf bytes.Buffer // what reenc wrote, not yet handed on
	decoded  int64        // text bytes the decoder returned
	trailing bool         // raw bytes came after the compressed stream ended

	buf     []byte
	in      []byte // read, not yet decided (SSE: the event being received)
	out     []byte // decided, not yet handed on
	tail    []byte
	verdict *policy.Decision // the last decision about the findings so far
	offset  int64            // body bytes decided so far
	scanned int
	over    bool
	err     error // what Read returns once out is empty
}

func (b *respStream) Read(p []byte) (int, error) {
	for len(b.out) == 0 && b.err == nil {
		b.fill()
	}
	if len(b.out) > 0 {
		n := copy(p, b.out)
		b.out = b.out[n:]
		return n, nil
	}
	return 0, b.err
}

func (b *respStream) Close() error {
	if b.dec != nil {
		b.dec.stop()
	}
	return b.r.Close()
}

// fill reads the upstream once and decides what that completed.
func (b *respStream) fill() {
	if b.buf == nil {
		b.buf = make([]byte, respReadBuffer)
	}
	n, err := b.r.Read(b.buf)
	end := err != nil
	if b.enc != "" {
		b.fillEncoded(b.buf[:n], end)
	} else {
		b.in = append(b.in, b.buf[:n]...)
		b.pieces(end)
	}
	if end && b.err == nil {
		b.err = err
	}
}

// pieces decides the pieces of b.in that are complete (end: all of it) and
// hands on what of them goes to the agent (emit).
func (b *respStream) pieces(end bool) {
	for len(b.in) > 0 && b.err == nil {
		cut := b.piece(end)
		if cut == 0 {
			break
		}
		if out, ok := b.decide(b.in[:cut], end && cut == len(b.in)); ok {
			b.emit(out)
		}
		b.offset += int64(cut)
		b.in = b.in[cut:]
	}
}

// emit hands on decided text: to the agent as it is, or for a compressed
// body to the gateway's encoder once it re-encodes, else kept (plain) while
// a re-encoding may still be asked for.
func (b *respStream) emit(out []byte) {
	switch {
	case b.enc == "":
		b.out = append(b.out, out...)
	case b.reenc != nil:
		b.reenc.Write(out) // into reencBuf: cannot fail
	case !b.released && !b.noPlain:
		if len(b.plain)+len(out) > respDecideMax {
			b.plain, b.noPlain = nil, true
			return
		}
		b.plain = append(b.plain, out...)
	}
}

// fillEncoded takes one read of a compressed body: the decoder decodes it,
// the text is decided piece by piece, and the raw bytes whose text was
// decided go on as they came (or, re-encoding, the encoder's output does).
func (b *respStream) fillEncoded(raw []byte, end bool) {
	if b.reenc == nil {
		b.hold = append(b.hold, raw...)
	}
	d := b.dec
	if d.finished && d.err == io.EOF && len(raw) > 0 && !b.trailing {
		// Bytes after the end of the compressed stream: no decoder reads
		// them as text, but policy hears of it.
		b.trailing = true
		b.judge([]inspect.Finding{malformedEncoding(b.enc)}, nil, end)
	}
	if !d.finished {
		if len(raw) > 0 {
			d.push(raw, b.decodedPiece)
		}
		if end && !d.finished && b.err == nil {
			d.push(nil, b.decodedPiece)
		}
		if d.finished && b.err == nil {
			switch {
			case d.err == io.EOF:
				b.pieces(true)
			case d.err != errDecodeStopped:
				b.plain, b.noPlain = nil, true
				b.judge([]inspect.Finding{malformedEncoding(b.enc)}, nil, end)
			}
		}
	}
	if b.err != nil {
		return
	}
	if b.reenc != nil {
		if d.finished && d.err != io.EOF {
			b.block(&denial{reason: ReasonResponseUndecodable, status: http.StatusBadGateway,
				msg: "the policy strips this compressed response, and the rest of it cannot be decoded to be stripped: cut instead"}, nil)
			return
		}
		if end {
			b.reenc.Close()
		} else {
			b.reenc.Flush()
		}
		b.out = append(b.out, b.reencBuf.Bytes()...)
		b.reencBuf.Reset()
		return
	}
	// A body that is not an event stream is held until it ends or its
	// text outgrows respDecideMax (as one of declared length up to that is
	// read whole), so a strip can still re-encode it. Then every raw byte
	// whose text was decided goes on; once decoding ended (whole, stopped
	// at a bound, or not decodable: reported), all do.
	if len(b.hold) > respHoldMax && !b.noPlain {
		// Raw bytes that decode to little (empty deflate blocks): stop
		// holding them for a strip that may never come.
		b.plain, b.noPlain = nil, true
	}
	if !b.sse && !b.noPlain && !end {
		return
	}
	rel := int64(len(b.hold))
	if !d.finished {
		rel = d.safe - b.holdOff
	}
	if rel > 0 {
		b.out = append(b.out, b.hold[:rel]...)
		b.hold = append(b.hold[:0], b.hold[rel:]...)
		b.holdOff += rel
		b.released, b.plain = true, nil
	}
	if len(b.hold) > respHoldMax {
		b.block(&denial{reason: ReasonResponseUndecodable, status: http.StatusBadGateway,
			msg: fmt.Sprintf("the compressed response held back more than %d bytes not yet decoded: cut", respHoldMax)}, nil)
	}
}

// decodedPiece takes a piece of a compressed body's text from its decoder;
// false stops decoding: the body was blocked, or is past respScanMax or
// past respBombRatio times its compressed size (reported once; the rest is
// relayed unread, as a plain body's is past respScanMax).
func (b *respStream) decodedPiece(out []byte) bool {
	b.decoded += int64(len(out))
	if b.decoded > respBombMin && b.decoded > respBombRatio*b.dec.fed {
		b.judge([]inspect.Finding{oversizeResponse(b.enc, true)}, nil, false)
		return b.stopDecoding()
	}
	b.in = append(b.in, out...)
	b.pieces(false)
	if b.err != nil {
		return false
	}
	if b.scanned >= respScanMax && !b.sse {
		b.judge(b.scan(nil), nil, false)
		return b.stopDecoding()
	}
	return true
}

// stopDecoding ends the decoding of a body read past a bound: one that is
// re-encoded cannot go on (cut), any other is relayed unread from here.
func (b *respStream) stopDecoding() bool {
	b.plain, b.noPlain = nil, true
	if b.err == nil && b.reenc != nil {
		b.block(&denial{reason: ReasonResponseUndecodable, status: http.StatusBadGateway,
			msg: "the policy strips this compressed response, and it decodes past what is read: cut instead"}, nil)
	}
	return false
}

// piece returns the length of the next piece of b.in ready to decide, or 0
// when it must wait for more.
func (b *respStream) piece(end bool) int {
	if !b.sse {
		return len(b.in)
	}
	if i := eventEnd(b.in[:min(len(b.in), respScanPiece)]); i > 0 {
		return i
	}
	switch {
	case len(b.in) >= respScanPiece:
		return respScanPiece
	case end:
		return len(b.in)
	}
	return 0
}

// eventEnd returns the offset just past the first SSE event boundary (a
// blank line: "\n\n", "\r\n\r\n" or "\r\r") in data, or 0.
func eventEnd(data []byte) int {
	for i := 0; i+1 < len(data); i++ {
		switch {
		case data[i] == '\n' && data[i+1] == '\n', data[i] == '\r' && data[i+1] == '\r' && (i+2 >= len(data) || data[i+2] != '\n'):
			return i + 2
		case data[i] == '\r' && i+3 < len(data) && data[i+1] == '\n' && data[i+2] == '\r' && data[i+3] == '\n':
			return i + 4
		}
	}
	return 0
}

// decide scans a piece and returns what of it goes on to the agent (ok),
// or ends the body (b.err) when policy denies it.
func (b *respStream) decide(piece []byte, last bool) ([]byte, bool) {
	return b.judge(b.scan(piece), piece, last)
}

// judge asks policy about a piece's findings fs (when they are new) and
// returns what of the piece goes on to the agent (ok), or ends the body
// (b.err) when policy denies it.
func (b *respStream) judge(fs []inspect.Finding, piece []byte, last bool) ([]byte, bool) {
	if len(fs) == 0 {
		return piece, true
	}
	late := b.rc.late
	if late.add(fs) || b.verdict == nil {
		where := "in the response"
		if b.sse {
			where = "in an event of the response stream"
		}
		d, err := b.g.askLate(b.rc, late, !last, where)
		b.verdict = &d
		if err != nil {
			b.block(err, &d)
			return nil, false
		}
	}
	if !strips(*b.verdict) || len(piece) == 0 {
		return piece, true
	}
	ct := b.ct
	if b.sse {
		ct = "text/event-stream"
	}
	out, spans := inspect.StripResponse(ct, piece)
	if len(spans) == 0 {
		return piece, true
	}
	if b.sized {
		b.block(&denial{reason: ReasonStripFixedLength, status: http.StatusForbidden,
			msg: fmt.Sprintf("the policy strips this response, but it is longer than %d bytes with a fixed Content-Length: cut instead", respDecideMax)}, nil)
		return nil, false
	}
	if b.enc != "" && b.reenc == nil && !b.reencode() {
		b.block(&denial{reason: ReasonStripFixedLength, status: http.StatusForbidden,
			msg: "the policy strips this compressed response, but part of it was already relayed as it came: cut instead"}, nil)
		return nil, false
	}
	late.strip(spans, b.offset)
	return out, true
}

// scan scans a piece (with the end of the last one, outside SSE) up to
// respScanMax bytes of the body; past that one oversize finding. An SSE
// stream is scanned whole, however long it lives: each event is bounded.
func (b *respStream) scan(piece []byte) []inspect.Finding {
	if b.scanned >= respScanMax && !b.sse {
		if b.over {
			return nil
		}
		b.over = true
		return []inspect.Finding{{Detector: inspect.DetectorOversize, Class: inspect.ClassOversize, Where: inspect.WhereResponse, Confidence: inspect.High}}
	}
	b.scanned += len(piece)
	data := piece
	if !b.sse && len(b.tail) > 0 {
		data = append(b.tail, piece...)
	}
	fs := b.sc.ScanResponse(b.ct, data)
	if !b.sse {
		b.tail = append(b.tail[:0], data[max(0, len(data)-respScanTail):]...)
	}
	if b.sse {
		for i := range fs {
			if fs[i].Where == inspect.WhereResponse {
				fs[i].Where = whereSSEEvent
			}
		}
	}
	return fs
}

// reencode switches a compressed body to the gateway's own encoder (same
// Content-Encoding), when none of its raw bytes left yet: the text decided
// so far is encoded first, then every piece as it is decided, flushed after
// each read. False when raw bytes already left (the agent's decoder is
// part way through the origin's stream: a rewrite cannot join it).
func (b *respStream) reencode() bool {
	if b.released || b.noPlain {
		return false
	}
	w, err := respEncodings[b.enc].encode(&b.reencBuf)
	if err != nil {
		return false
	}
	b.reenc = w
	w.Write(b.plain)
	b.plain, b.hold = nil, nil
	return true
}

// block ends the body with err: the decision d (nil: the gateway's own
// denial) becomes the request's, the upstream is abandoned, and an SSE
// stream gets its final error event.
func (b *respStream) block(err error, d *policy.Decision) {
	rc := b.rc
	if d != nil {
		rc.dec, rc.decided = *d, true
	}
	rc.err = err
	rc.late.cutBy(err)
	b.cut()
	b.r.Close()
	if b.dec != nil {
		b.dec.stop()
	}
	if b.sse && !b.sized && b.enc == "" {
		b.out = append(b.out, sseErrorEvent(rc, err)...)
		b.err = io.EOF
		return
	}
	if b.sse && !b.sized && b.reenc != nil {
		// A re-encoded stream ends cleanly too, the error event encoded.
		b.reenc.Write(sseErrorEvent(rc, err))
		b.reenc.Close()
		b.out = append(b.out, b.reencBuf.Bytes()...)
		b.reencBuf.Reset()
		b.err = io.EOF
		return
	}
	b.err = err
}

// sseErrorEvent is the event that ends a stream a block cut: an "error"
// event whose data is JSON naming the reason and the decision id, shaped as
// the LLM APIs' stream errors are ({"type": "error", "error": {...}}).
func sseErrorEvent(rc *reqCtx, err error) []byte {
	status, reason := refusalOf(err)
	msg := err.Error()
	var d *denial
	if errors.As(err, &d) {
		msg = d.msg
	}
	data, _ := json.Marshal(map[string]any{
		"type": "error",
		"error": map[string]any{
			"type":     "airlock_blocked",
			"message":  "airlock: " + msg,
			"reason":   reason,
			"decision": rc.id,
			"status":   status,
		},
	})
	var b bytes.Buffer
	b.WriteString("event: error\ndata: ")
	b.Write(data)
	b.WriteString("\n\n")
	return b.Bytes()
}

// relayFailure is the error a response relay that failed with err ends the
// request with: the denial that cut the response short, when content
// inspection did, else the upstream's failure.
func relayFailure(rc *reqCtx, err error) error {
	if l := rc.late; l != nil {
		if cut := l.cutErr(); cut != nil {
			return cut
		}
	}
	return fail(ReasonUpstream, http.StatusBadGateway, fmt.Errorf("relaying response: %w", err))
}

// cutUpstream is what abandons rc's upstream when a response is cut short:
// an HTTP/1.1 connection is dropped (never reused with a body unread); an
// HTTP/2 upstream's stream is reset by closing the body.
func (s *httpSession) cutUpstream(rc *reqCtx) func() {
	return func() {
		if rc.up == nil || rc.up.h2 == nil {
			s.dropUpstream()
		}
	}
}

// strippedExtra lists on the record what was stripped from the response
// (detector, offset, length; never the text).
func strippedExtra(r *audit.Record, rc *reqCtx) {
	if rc.late == nil {
		return
	}
	spans := rc.late.strippedSpans()
	if len(spans) == 0 {
		return
	}
	b, err := json.Marshal(spans)
	if err != nil {
		return
	}
	if r.Extra == nil {
		r.Extra = map[string]json.RawMessage{}
	}
	r.Extra[extraStripped] = b
}
