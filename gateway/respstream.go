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

	buf     []byte
	in      []byte // read, not yet decided (SSE: the event being received)
	out     []byte // decided, not yet handed on
	tail    []byte
	dec     *policy.Decision // the last decision about the findings so far
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

func (b *respStream) Close() error { return b.r.Close() }

// fill reads the upstream once and decides what that completed.
func (b *respStream) fill() {
	if b.buf == nil {
		b.buf = make([]byte, respReadBuffer)
	}
	n, err := b.r.Read(b.buf)
	b.in = append(b.in, b.buf[:n]...)
	end := err != nil
	for len(b.in) > 0 && b.err == nil {
		cut := b.piece(end)
		if cut == 0 {
			break
		}
		if out, ok := b.decide(b.in[:cut], end && cut == len(b.in)); ok {
			b.out = append(b.out, out...)
		}
		b.offset += int64(cut)
		b.in = b.in[cut:]
	}
	if end && b.err == nil {
		b.err = err
	}
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
	fs := b.scan(piece)
	if len(fs) == 0 {
		return piece, true
	}
	late := b.rc.late
	if late.add(fs) || b.dec == nil {
		where := "in the response"
		if b.sse {
			where = "in an event of the response stream"
		}
		d, err := b.g.askLate(b.rc, late, !last, where)
		b.dec = &d
		if err != nil {
			b.block(err, &d)
			return nil, false
		}
	}
	if !strips(*b.dec) {
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
	if b.sse && !b.sized {
		b.out = append(b.out, sseErrorEvent(rc, err)...)
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
